"""What every request must pass before the app reads it: a ``Host`` the station answers to, and a body of at most
:data:`MAX_BODY` bytes.

- **Allowed hosts.** A page that a browser loaded from another name (DNS rebinding: ``evil.example`` resolving to
  127.0.0.1) sends that name in ``Host``; the station answers such a request with 400. By default it answers to the
  loopback names (``localhost``, ``127.0.0.1``, ``::1``) and the address it is bound to; bound to every address
  (``0.0.0.0`` / ``::``) it answers to this machine's name and addresses too. ``--allowed-host NAME`` adds one (``*``:
  any name, the check off).
- **Body size.** A ``Content-Length`` above the limit is refused with 413 before anything is read; a body without one
  (chunked) is counted as it arrives and refused with 413 the moment it passes the limit, so nothing larger is ever
  held in memory.

Both answers are ``{"detail": "one line"}``, as every error of the station.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Iterable
from typing import Any

MAX_BODY = 1 << 20
"""Bytes a request body may hold (1 MiB: a verdict or a drawn box is well under 1 KiB)."""
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
_WILDCARDS = ("0.0.0.0", "::", "")

Scope = dict[str, Any]


def _normal(host: str) -> str:
    """A host name or address as compared: lower case, without brackets, without a trailing dot."""
    return host.strip().lower().strip("[]").rstrip(".")


def machine_names() -> set[str]:
    """This machine's host name, fully qualified name and the addresses they resolve to (whatever of it resolves)."""
    names = {socket.gethostname(), socket.getfqdn()}
    found = set(names)
    for name in names:
        try:
            found |= {str(info[4][0]) for info in socket.getaddrinfo(name, None)}
        except OSError:
            continue
    return {_normal(n) for n in found if n}


def allowed_hosts(bind: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The ``Host`` names the station answers to when bound to ``bind``: the loopback names, ``bind`` itself (this
    machine's names and addresses for a wildcard bind) and ``extra`` (``*`` allows any)."""
    names = {_normal(h) for h in (*LOCAL_HOSTS, *extra) if h.strip()}
    if _normal(bind) in _WILDCARDS:
        names |= machine_names()
    else:
        names.add(_normal(bind))
    return frozenset(names)


def host_of(header: str) -> str:
    """The host part of a ``Host`` header (``name:port``, ``[v6]:port``, ``v6``), normalised."""
    text = header.strip()
    if text.startswith("["):
        return _normal(text[1 : text.find("]")] if "]" in text else text)
    if text.count(":") == 1:
        text = text.split(":", 1)[0]
    else:
        try:  # a bare IPv6 address
            return str(ipaddress.ip_address(text))
        except ValueError:
            pass
    return _normal(text)


async def _answer(send: Any, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class RequestGuard:
    """ASGI middleware: the ``Host`` check and the body limit (module docstring). ``hosts``: the allowed names (None or
    containing ``*``: any); ``max_body``: bytes."""

    def __init__(self, app: Any, hosts: Iterable[str] | None = LOCAL_HOSTS, max_body: int = MAX_BODY) -> None:
        self.app = app
        self.hosts = None if hosts is None or "*" in hosts else frozenset(_normal(h) for h in hosts)
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.hosts is not None and host_of(headers.get("host", "")) not in self.hosts:
            shown = headers.get("host", "")[:64]
            await _answer(send, 400, f"Host {shown!r} is not one this station answers to (start it with --allowed-host NAME)")
            return
        declared = headers.get("content-length", "").strip()
        if declared and (not declared.isdigit() or int(declared) > self.max_body):
            await _answer(send, 413, f"request body over {self.max_body} bytes (Content-Length {declared[:24]})")
            return
        await _Counted(self.app, self.max_body)(scope, receive, send)


class _Counted:
    """One request whose body is counted as it arrives: past ``max_body`` the station answers 413 itself, the app sees
    the client gone (``http.disconnect``), and whatever the app then answers is dropped."""

    def __init__(self, app: Any, max_body: int) -> None:
        self.app, self.max_body = app, max_body
        self.seen = 0
        self.started = self.answered = False

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        async def counted() -> dict[str, Any]:
            if self.answered:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                self.seen += len(message.get("body", b""))
                if self.seen > self.max_body and not self.started:
                    self.answered = True
                    await _answer(send, 413, f"request body over {self.max_body} bytes")
                    return {"type": "http.disconnect"}
            return message

        async def guarded(message: dict[str, Any]) -> None:
            if self.answered:
                return
            self.started = True
            await send(message)

        await self.app(scope, counted, guarded)
