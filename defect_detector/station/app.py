"""The station web app: server-rendered pages (``station/pages/``), their plain JavaScript and CSS (``station/static/``,
shipped in the package: no build step, nothing loaded from elsewhere) and the JSON API (:mod:`~defect_detector.station.api`).

Pages: ``GET /`` the live page (it polls ``/api/live`` twice a second), ``GET /review`` the review queue,
``GET /report?since=ISO`` the shift report (CSV with ``Accept: text/csv`` or ``?format=csv``). Every error answer is
``{"detail": "one line"}`` with a 4xx status (5xx only for a database that fails), never a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

from defect_detector.station.api import build_api
from defect_detector.station.db import describe, iso, parse_time
from defect_detector.station.limits import LOCAL_HOSTS, MAX_BODY, RequestGuard
from defect_detector.station.records import utc_now
from defect_detector.station.report import DEFAULT_SHIFTS, report, report_csv, report_rows, window_lists
from defect_detector.station.security import token_middleware
from defect_detector.station.store import Store

log = logging.getLogger("defect_detector.station")
HERE = Path(__file__).resolve().parent


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _validation_detail(exc: RequestValidationError) -> str:
    """The first validation error as ``where: what`` (e.g. ``body.box: Value error, box must ...``)."""
    errors = exc.errors()
    if not errors:
        return "invalid request"
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body" or len(first.get("loc", ())) == 1)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return _one_line(f"{where or 'request'}: {first.get('msg', 'invalid')}{more}")


def _install_handlers(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code in (204, 304):
            return Response(status_code=exc.status_code)
        return JSONResponse({"detail": _one_line(str(exc.detail))}, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> Response:
        return JSONResponse({"detail": _validation_detail(exc)}, status_code=422)

    @app.exception_handler(SQLAlchemyError)
    async def database(_request: Request, exc: SQLAlchemyError) -> Response:
        log.warning("station database error: %s", _one_line(str(getattr(exc, "orig", None) or exc)))
        return JSONResponse({"detail": "the station database is unavailable; try again"}, status_code=503)

    @app.exception_handler(Exception)
    async def unexpected(_request: Request, exc: Exception) -> Response:
        log.error("station: unexpected error", exc_info=exc)
        return JSONResponse({"detail": "internal error (logged by the station)"}, status_code=500)


def writable(store: Store) -> Callable[[Request, Callable[[Request], Awaitable[Response]]], Awaitable[Response]]:
    """The HTTP middleware that answers 503 (one line) while ``store`` cannot take writes (``Store.check``: its file was
    deleted or replaced, or the disk is full), ``/healthz`` included: issue 44's station answered 201 to verdicts that
    vanished, and said ok."""

    async def middleware(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if not request.url.path.startswith("/static/"):
            try:
                store.check()
            except OSError as exc:
                log.warning("station: %s", exc)
                return JSONResponse({"detail": f"{exc}; restart the station on a database it can write"}, status_code=503)
        return await call_next(request)

    return middleware


def create_app(
    store: Store,
    token: str | None = None,
    shifts: tuple[int, ...] = DEFAULT_SHIFTS,
    clock: Callable[[], datetime] = utc_now,
    allowed_hosts: Iterable[str] | None = LOCAL_HOSTS,
) -> FastAPI:
    """The app over an open :class:`Store`. ``token``: required on every request when given (see
    :mod:`~defect_detector.station.security`); ``shifts``: local hours shifts start at; ``clock``: aware UTC now;
    ``allowed_hosts``: the ``Host`` names it answers to (:mod:`~defect_detector.station.limits`; None: any)."""
    app = FastAPI(title="defect_detector station", docs_url=None, redoc_url=None, openapi_url=None)
    app.middleware("http")(writable(store))
    app.middleware("http")(token_middleware(token))
    app.add_middleware(RequestGuard, hosts=allowed_hosts, max_body=MAX_BODY)  # outermost: before the token check
    _install_handlers(app)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(build_api(store, clock, shifts))
    pages = Environment(loader=FileSystemLoader(HERE / "pages"), autoescape=select_autoescape(["html"]))
    database = describe(store.url)

    def page(name: str, **context: Any) -> HTMLResponse:
        html = pages.get_template(name).render(database=database, **context)
        return HTMLResponse(html, headers={"Cache-Control": "no-store"})

    @app.get("/", response_class=HTMLResponse)
    def live_page() -> HTMLResponse:
        return page("live.html", active="live", classes=store.classes(refresh=True))

    @app.get("/review", response_class=HTMLResponse)
    def review_page() -> HTMLResponse:
        return page("review.html", active="review", classes=store.classes(refresh=True))

    @app.get("/report", response_model=None)
    def report_page(
        request: Request,
        since: Annotated[str | None, Query(max_length=64)] = None,
        format: Annotated[str | None, Query(pattern="^(csv|html)$")] = None,
    ) -> Response:
        now = clock()
        try:
            start = parse_time(since) if since else (now - timedelta(days=1)).replace(tzinfo=None)
            with store.engine.connect() as conn:
                summaries = report(conn, start.replace(tzinfo=now.tzinfo), now, shifts)
                lists = window_lists(conn, start.replace(tzinfo=now.tzinfo), now)
        except (ValueError, OverflowError) as exc:
            raise HTTPException(400, _one_line(str(exc) or "since: out of range")) from None
        if format == "csv" or (format is None and "text/csv" in request.headers.get("accept", "")):
            headers = {"Content-Disposition": 'attachment; filename="station-report.csv"'}
            return Response(report_csv(summaries), media_type="text/csv; charset=utf-8", headers=headers)
        rows = report_rows(summaries)
        since_text = iso(start.replace(microsecond=0))
        return page("report.html", active="report", rows=rows, since=since_text, shifts=len(summaries), **lists)

    return app
