"""Who may use the station: loopback only by default, a bearer token everywhere else.

- :func:`check_bind`: serving on an address other than a loopback one needs a token (``--token`` or the environment
  variable :data:`TOKEN_ENV`).
- :func:`token_middleware`: with a token, every request needs ``Authorization: Bearer TOKEN``. A browser cannot send
  that header for a page, so a page opened once as ``/?token=TOKEN`` is answered with a redirect to the same page
  without the token and an HttpOnly, SameSite=Strict cookie holding it; later requests of that browser carry the
  cookie. The redirect never leaves the station (:func:`same_site`). Tokens are compared in constant time.
- :func:`read_token`: the token from ``--token``, a file (``--token-file``) or the environment variable
  :data:`TOKEN_ENV`, so that it need not show in ``ps``.
- :data:`SECURITY_HEADERS`: on every answer; the content security policy allows only the station's own scripts,
  styles and images (nothing from outside, nothing inline).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlencode

from fastapi.security.utils import get_authorization_scheme_param
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

TOKEN_ENV = "DEFECT_DETECTOR_TOKEN"
COOKIE = "station_token"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' blob: data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback: ``localhost``, 127.0.0.0/8, ``::1``."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(token: str | None = None, token_file: str | os.PathLike[str] | None = None) -> str | None:
    """The station's token: ``token``, else the first line of ``token_file``, else ``$DEFECT_DETECTOR_TOKEN``, else
    None. ``ValueError`` (one line) for both flags at once, or a file that cannot be read or is empty."""
    if token is not None and token_file is not None:
        raise ValueError("give --token or --token-file, not both")
    if token_file is not None:
        try:
            lines = Path(token_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--token-file {token_file}: cannot read it ({type(exc).__name__})") from None
        if not lines or not lines[0].strip():
            raise ValueError(f"--token-file {token_file}: the first line is empty")
        return lines[0].strip()
    return token if token is not None else (os.environ.get(TOKEN_ENV) or None)


def check_bind(host: str, token: str | None) -> None:
    """``ValueError`` (one line) when serving on ``host`` would expose the station without a token."""
    if token is not None and not token.strip():
        raise ValueError("--token is empty")
    if not is_loopback(host) and not token:
        raise ValueError(
            f"refusing to serve on {host} without a token: give --token-file FILE (or set {TOKEN_ENV}, or --token TOKEN), or bind 127.0.0.1"
        )


def same_site(path: str) -> str:
    """``path`` as a redirect target that stays on this station: one leading ``/`` (``//evil.example/`` and
    ``/\\evil.example`` would send a browser to another site) and no backslashes."""
    return "/" + path.replace("\\", "/").lstrip("/")


def _matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))


def _bearer(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header (FastAPI's own parser of the scheme), None without one."""
    scheme, value = get_authorization_scheme_param(request.headers.get("authorization"))
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def token_middleware(token: str | None) -> Callable[[Request, Callable[[Request], Awaitable[Response]]], Awaitable[Response]]:
    """The HTTP middleware: security headers on every answer and, with ``token``, the check in the module docstring."""

    async def middleware(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if token is None or _matches(_bearer(request), token) or _matches(request.cookies.get(COOKIE), token):
            response = await call_next(request)
        elif request.method == "GET" and _matches(request.query_params.get("token"), token):
            query = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
            target = same_site(request.url.path) + (f"?{query}" if query else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
        else:
            detail = "missing or wrong token: send Authorization: Bearer TOKEN (a browser: open /?token=TOKEN once)"
            response = JSONResponse({"detail": detail}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
        for key, value in SECURITY_HEADERS.items():
            response.headers.setdefault(key, value)
        return response

    return middleware
