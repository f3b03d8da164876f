"""``defect-detector station``: serve the station app with uvicorn (one process; the pages poll, nothing streams)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from defect_detector.station.db import describe
from defect_detector.station.limits import allowed_hosts as allowed_hosts_for
from defect_detector.station.security import check_bind, read_token

log = logging.getLogger("defect_detector.station")


def serve(
    url: str,
    host: str = "127.0.0.1",
    port: int = 8080,
    token: str | None = None,
    images: str | Path | None = None,
    shifts: tuple[int, ...] | None = None,
    token_file: str | Path | None = None,
    allowed_hosts: Sequence[str] = (),
) -> None:
    """Open the database at ``url`` and serve the station on ``host:port`` until interrupted. The token (``token``, else
    the first line of ``token_file``, else the environment variable ``DEFECT_DETECTOR_TOKEN``) is required on any
    address but a loopback one. ``allowed_hosts``: ``Host`` names answered besides the loopback names and ``host``
    (:mod:`~defect_detector.station.limits`). ``ValueError`` / ``OSError`` with one line for a bad URL, a database that
    cannot be opened, or a missing token."""
    import uvicorn

    from defect_detector.station.app import create_app
    from defect_detector.station.report import DEFAULT_SHIFTS
    from defect_detector.station.store import Store

    token = read_token(token, token_file)
    check_bind(host, token)
    if not 0 <= port <= 65535:
        raise ValueError(f"--port must be 0-65535, got {port}")
    store = Store(url, images)
    try:
        hosts = allowed_hosts_for(host, allowed_hosts)
        app = create_app(store, token=token, shifts=shifts or DEFAULT_SHIFTS, allowed_hosts=hosts)
        shown = f"[{host}]" if ":" in host else host
        print(f"station: {describe(store.url)}, images {store.images}")
        print(f"serving on http://{shown}:{port}/ (live), /review, /report" + ("; token required" if token else ""))
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    finally:
        store.close()


@contextmanager
def running(app: Any, host: str = "127.0.0.1", port: int = 0, timeout: float = 30.0) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a background thread (tests, benchmarks, embedding); yields its base URL
    (``port`` 0: a free one) and stops it on exit. ``RuntimeError`` when it does not start within ``timeout`` s."""
    import uvicorn

    if port == 0:
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = int(probe.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, name="station-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the station server did not start on {host}:{port}")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
