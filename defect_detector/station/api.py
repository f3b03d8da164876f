"""The station's JSON API (DESIGN.md "Line station"; every answer JSON unless it is a PNG).

Inputs are validated before they reach the database: ids are positive integers, classes are the database's known
classes, a missed box lies inside its frame (xyxy in frame pixels, at least :data:`MIN_MISSED_SIDE` pixels a side and at
most :data:`MAX_MISSED_SHARE` of the frame's area), a reviewer's name is one printable line, times are ISO 8601 within
the years :data:`~defect_detector.station.db.YEARS`.

A whole board: ``POST /api/inspections/{id}/verdict`` gives every call of the inspection still waiting for review one
verdict (``station/review.py`` ``record_board_verdict``).

Two reviewers: ``GET /api/review/next?reviewer=NAME`` leases the call it hands out to NAME for
:data:`~defect_detector.station.review.LEASE_S` seconds (the next reviewer gets the next call); a verdict on a call
that already has one must carry the call's current ``version`` (in the body, or ``If-Match: "N"``), else 409.

SQL goes through bound parameters only, and image files are found through the paths the
recorder stored, never through anything in the request.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, HTTPException, Path, Query
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from defect_detector.station import queries
from defect_detector.station.db import parse_time
from defect_detector.station.images import resolve
from defect_detector.station.report import shift_start
from defect_detector.station.review import (
    Conflict,
    NotFound,
    missed_of,
    record_board_verdict,
    record_missed,
    record_verdict,
    rejections_by_design,
)
from defect_detector.station.store import Store

MAX_ID = 2**63 - 1
MAX_VERSION = 2**31 - 1
MIN_MISSED_SIDE = 4
"""Pixels a drawn missed box must at least measure a side (a smaller one is a slip of the mouse, not a defect)."""
MAX_MISSED_SHARE = 0.5
"""Largest share of its frame's area a drawn missed box may cover (a box over the whole frame teaches nothing)."""
Id = Annotated[int, Path(ge=1, le=MAX_ID, description="a positive integer id")]


def _reviewer(value: str) -> str:
    value = value.strip()
    if not value or not value.isprintable():
        raise ValueError("reviewer must be a non-empty printable name")
    return value


class VerdictIn(BaseModel):
    """``POST /api/calls/{id}/verdict``: ``{"verdict", "class" (defect only, optional), "reviewer"}``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    verdict: Literal["defect", "false_call", "skip"]
    class_name: str | None = Field(default=None, alias="class", min_length=1, max_length=128)
    reviewer: str = Field(min_length=1, max_length=64)
    version: int | None = Field(default=None, ge=0, le=MAX_VERSION)

    _check_reviewer = field_validator("reviewer")(_reviewer)


class BoardVerdictIn(BaseModel):
    """``POST /api/inspections/{id}/verdict``: ``{"verdict": "defect" | "false_call", "reviewer"}`` for every call of the
    inspection still waiting for review."""

    model_config = ConfigDict(extra="forbid")
    verdict: Literal["defect", "false_call"]
    reviewer: str = Field(min_length=1, max_length=64)

    _check_reviewer = field_validator("reviewer")(_reviewer)


class MissedIn(BaseModel):
    """``POST /api/inspections/{id}/missed``: ``{"box": [x1, y1, x2, y2] frame pixels, "class", "reviewer"}``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    box: tuple[float, float, float, float]
    class_name: str = Field(alias="class", min_length=1, max_length=128)
    reviewer: str = Field(min_length=1, max_length=64)

    _check_reviewer = field_validator("reviewer")(_reviewer)

    @field_validator("box")
    @classmethod
    def _ordered(cls, box: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
        x1, y1, x2, y2 = box
        if not all(math.isfinite(v) for v in box):
            raise ValueError("box coordinates must be finite numbers")
        if x2 - x1 < MIN_MISSED_SIDE or y2 - y1 < MIN_MISSED_SIDE:
            side = MIN_MISSED_SIDE
            raise ValueError(f"box must be [x1, y1, x2, y2] with x2 >= x1 + {side} and y2 >= y1 + {side} (at least {side} pixels a side)")
        return box


def _check_class(store: Store, name: str) -> None:
    if not store.is_class(name):
        raise HTTPException(422, f"class: unknown class {name[:64]!r} (known: {', '.join(store.classes())})")


def _reviewer_query(value: str | None) -> str | None:
    try:
        return None if value is None else _reviewer(value)
    except ValueError as exc:
        raise HTTPException(422, f"reviewer: {exc}") from None


def _if_match(value: str | None) -> int | None:
    """The version an ``If-Match`` header names (``"3"``, ``W/"3"`` or ``3``); None without one; 400 for another."""
    if value is None:
        return None
    text = value.strip().removeprefix("W/").strip('"')
    if not text.isdigit() or int(text) > MAX_VERSION:
        raise HTTPException(400, f'If-Match: expected a call version such as "3", got {value[:32]!r}')
    return int(text)


def _check_missed_box(box: tuple[float, float, float, float], width: int, height: int) -> None:
    """422 unless ``box`` (xyxy) lies inside the ``width`` x ``height`` frame and covers at most MAX_MISSED_SHARE of it."""
    x1, y1, x2, y2 = box
    if x1 < 0 or y1 < 0 or x2 > width or y2 > height:
        raise HTTPException(422, f"box: {list(box)} is not inside the {width}x{height} frame")
    if (x2 - x1) * (y2 - y1) > MAX_MISSED_SHARE * width * height:
        share = f"{MAX_MISSED_SHARE:.0%}"
        raise HTTPException(422, f"box: {list(box)} covers more than {share} of the {width}x{height} frame; draw the defect itself")


@contextmanager
def _review_answers() -> Iterator[None]:
    """A verdict's refusals as answers: 404 for an unknown call or inspection, 409 for a conflict (one line each)."""
    try:
        yield
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except Conflict as exc:
        raise HTTPException(409, str(exc)) from None


def _since(text: str | None, default: datetime) -> datetime:
    if text is None:
        return default
    try:
        return parse_time(text)
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None


def build_api(store: Store, clock: Callable[[], datetime], shifts: tuple[int, ...]) -> APIRouter:
    """The ``/api`` routes and ``/healthz`` over ``store``; ``clock`` gives the current time (aware UTC)."""
    router = APIRouter()
    _reading_routes(router, store, clock, shifts)
    _review_routes(router, store, clock)
    _picture_routes(router, store)
    return router


def _reading_routes(router: APIRouter, store: Store, clock: Callable[[], datetime], shifts: tuple[int, ...]) -> None:
    """Health, inspections, the live page's data, known classes, events."""

    @router.get("/healthz")
    def healthz() -> dict[str, Any]:
        with store.engine.connect() as conn:
            queued = queries.queue_length(conn)
        return {"status": "ok", "queue": queued}

    @router.get("/api/inspections")
    def inspections(
        limit: Annotated[int, Query(ge=1, le=queries.MAX_LIMIT)] = 50,
        before: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
        verdict: Annotated[str | None, Query(pattern="^(pass|fail|not_inspected)$")] = None,
    ) -> dict[str, Any]:
        with store.engine.connect() as conn:
            return {"items": queries.list_inspections(conn, limit, before, verdict)}

    @router.get("/api/inspections/{inspection_id}")
    def inspection(inspection_id: Id) -> dict[str, Any]:
        with store.engine.connect() as conn:
            item = queries.inspection_with_calls(conn, inspection_id)
            if item is None:
                raise HTTPException(404, f"no inspection {inspection_id}")
            item["missed"] = missed_of(conn, inspection_id)
        return item

    @router.get("/api/live")
    def live() -> dict[str, Any]:
        now = clock()
        with store.engine.connect() as conn:
            return queries.live_summary(conn, now.replace(tzinfo=None), shift_start(now, shifts).replace(tzinfo=None))

    @router.get("/api/rejections")
    def rejections() -> dict[str, Any]:
        """Per design, the calls rejected as false calls that ``teach --station`` would apply to its taught weights."""
        with store.engine.connect() as conn:
            designs = rejections_by_design(conn)
        return {"designs": designs, "apply": "defect-detector teach --station DB --weights TAUGHT.pt --out TAUGHT.pt"}

    @router.get("/api/classes")
    def known_classes() -> dict[str, Any]:
        return {"classes": store.classes(refresh=True)}

    @router.get("/api/events")
    def events(since: Annotated[str | None, Query(max_length=64)] = None) -> dict[str, Any]:
        start = _since(since, (clock() - timedelta(days=1)).replace(tzinfo=None))
        with store.engine.connect() as conn:
            return {"items": queries.events_since(conn, start)}


def _review_routes(router: APIRouter, store: Store, clock: Callable[[], datetime]) -> None:
    """The review queue, verdicts and drawn misses."""

    @router.get("/api/review/next", response_model=None)
    def review_next(reviewer: Annotated[str | None, Query(min_length=1, max_length=64)] = None) -> dict[str, Any] | Response:
        reviewer = _reviewer_query(reviewer)
        with store.engine.begin() as conn:
            item = queries.review_next(conn, reviewer, clock().astimezone(timezone.utc).replace(tzinfo=None))
        if item is None:
            return Response(status_code=204)
        return JSONResponse(item, headers={"ETag": f'"{item["call"]["version"]}"'})

    @router.post("/api/calls/{call_id}/verdict")
    def verdict(call_id: Id, body: VerdictIn, if_match: Annotated[str | None, Header(max_length=64)] = None) -> dict[str, Any]:
        version = body.version if body.version is not None else _if_match(if_match)
        if body.class_name is not None and body.verdict != "defect":
            raise HTTPException(422, "class: only a defect verdict takes a class")
        if body.class_name is not None:
            _check_class(store, body.class_name)
        with _review_answers(), store.engine.begin() as conn:
            return record_verdict(conn, call_id, body.verdict, body.class_name, body.reviewer, clock(), version)

    @router.post("/api/inspections/{inspection_id}/verdict")
    def board_verdict(inspection_id: Id, body: BoardVerdictIn) -> dict[str, Any]:
        with _review_answers(), store.engine.begin() as conn:
            return record_board_verdict(conn, inspection_id, body.verdict, body.reviewer, clock())

    @router.post("/api/inspections/{inspection_id}/missed", status_code=201)
    def missed(inspection_id: Id, body: MissedIn) -> JSONResponse:
        _check_class(store, body.class_name)
        with store.engine.begin() as conn:
            row = queries.get_inspection(conn, inspection_id)
            if row is None:
                raise HTTPException(404, f"no inspection {inspection_id}")
            if not row.width or not row.height:
                raise HTTPException(409, f"inspection {inspection_id} has no frame to draw on")
            if row.verdict == "not_inspected":
                raise HTTPException(409, f"inspection {inspection_id} was not inspected ({row.reason_kind}): it is not a training frame")
            _check_missed_box(body.box, row.width, row.height)
            stored = record_missed(conn, inspection_id, body.box, body.class_name, body.reviewer, clock())
        return JSONResponse(stored, status_code=201)


def _picture_routes(router: APIRouter, store: Store) -> None:
    """Stored frames and golden images, found through the paths the recorder stored."""

    def picture(inspection_id: int, column: str) -> FileResponse:
        with store.engine.connect() as conn:
            row = queries.get_inspection(conn, inspection_id)
        if row is None:
            raise HTTPException(404, f"no inspection {inspection_id}")
        path = resolve(store.images, getattr(row, column))
        if path is None:
            what = "frame" if column == "image" else "golden image"
            raise HTTPException(404, f"inspection {inspection_id} has no stored {what}")
        return FileResponse(path, media_type="image/png", headers={"Cache-Control": "private, max-age=3600"})

    @router.get("/api/inspections/{inspection_id}/image", response_class=FileResponse)
    def image(inspection_id: Id) -> FileResponse:
        return picture(inspection_id, "image")

    @router.get("/api/inspections/{inspection_id}/reference", response_class=FileResponse)
    def reference(inspection_id: Id) -> FileResponse:
        return picture(inspection_id, "reference_image")
