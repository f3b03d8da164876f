"""``defect-detector station --db URL [--host 127.0.0.1] [--port 8080] [--token-file F] [--create]``: the line station's
web app (live page, review queue, shift report) over a station database that ``predict --db URL`` records into; a
SQLite file that does not exist is an error unless ``--create`` (a mistyped path served an empty station)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    """Register the ``station`` subcommand."""
    p = sub.add_parser("station", help="serve the line station: live page, review queue and shift report over a --db history")
    p.add_argument("--db", required=True, help="station database: a file path or sqlite:///PATH (default kind), or postgresql://...")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other needs --token)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument(
        "--token",
        help="require this bearer token on every request (default: --token-file, else $DEFECT_DETECTOR_TOKEN); visible in ps: "
        "prefer --token-file or the variable. A browser opens /?token=T once and keeps it in an HttpOnly cookie",
    )
    p.add_argument("--token-file", metavar="FILE", help="read the token from the first line of FILE (not visible in ps)")
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="answer requests whose Host is NAME (repeatable; default: localhost names and the bound address, on 0.0.0.0 this "
        "machine's names too; * answers any)",
    )
    p.add_argument("--images", help="folder of the stored frames (default: beside a SQLite file, else the one the database names)")
    p.add_argument(
        "--shifts", default="6,14,22", help="local hours at which shifts start, for the live counts and the report (default 6,14,22)"
    )
    p.add_argument(
        "--create", action="store_true", help="create the SQLite file when it does not exist (default: a missing file is an error)"
    )


def run(args: argparse.Namespace) -> None:
    """Serve until interrupted; ``ValueError`` / ``OSError`` with one line for bad input."""
    from defect_detector.station.db import parse_url
    from defect_detector.station.report import parse_shifts
    from defect_detector.station.server import serve

    url = parse_url(args.db)
    if url.drivername == "sqlite" and not args.create and not Path(url.database).is_file():
        raise FileNotFoundError(
            f"--db {url.database}: no such station database; record into it first (predict --db), or pass --create to serve an empty one"
        )
    shifts = parse_shifts(args.shifts)
    options = {"token_file": args.token_file, "allowed_hosts": args.allowed_host}
    serve(args.db, host=args.host, port=args.port, token=args.token, images=args.images, shifts=shifts, **options)
