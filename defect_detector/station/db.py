"""Where the station's database and images live: URLs, engines and the few statements whose SQL differs by dialect.

A URL is a file path or ``sqlite:///PATH`` (SQLite, the default: one file, no server; opened in WAL mode with
``synchronous=NORMAL``, so a killed process loses no committed transaction) or ``postgresql://...`` (PostgreSQL through
the psycopg 3 driver; ``postgresql+psycopg://`` and ``postgres://`` are accepted too). Stored images live in a folder
beside a SQLite file (``station.db`` -> ``station.db.images/``); for PostgreSQL the first recorder stores the folder it
chose (``./<database>.images`` unless told) in the database, so the station finds it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, Table, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError

from defect_detector.core.safe_text import mask_url

_POSTGRES = ("postgresql", "postgresql+psycopg", "postgres")
CONNECT_TIMEOUT_S = 3
"""Seconds a PostgreSQL connection attempt may take before the database counts as unreachable."""
YEARS = (1970, 9000)
"""The years a time in a request may name."""
BUSY_TIMEOUT_MS = 5000
"""How long a SQLite writer waits for another writer's transaction (the recorder vs. the station's verdicts)."""


def parse_url(url: str | os.PathLike[str]) -> URL:
    """The SQLAlchemy URL of ``url``: a plain path becomes ``sqlite:///ABSOLUTE``, ``postgresql://`` gets the psycopg
    driver. ``ValueError`` (one line) for another scheme or a malformed URL; the password is never in the message."""
    text = os.fspath(url).strip()
    if not text:
        raise ValueError("--db: empty database URL")
    if "://" not in text:
        return URL.create("sqlite", database=str(Path(text).expanduser().resolve()))
    scheme = text.split("://", 1)[0].lower()
    try:
        parsed = make_url(text)
    except (ArgumentError, ValueError) as exc:
        raise ValueError(f"--db: malformed database URL ({scheme}://...)") from exc
    if scheme in _POSTGRES:
        return parsed.set(drivername="postgresql+psycopg")
    if scheme in ("sqlite", "sqlite+pysqlite"):
        if not parsed.database or parsed.database == ":memory:":
            raise ValueError("--db: a SQLite URL needs a file (sqlite:///station.db); an in-memory database is not shared")
        return parsed.set(drivername="sqlite", database=str(Path(parsed.database).expanduser().resolve()))
    raise ValueError(f"--db: unsupported database {scheme}:// (a file path, sqlite:///PATH or postgresql://...)")


def file_identity(url: URL) -> tuple[int, int] | None:
    """``(device, inode)`` of a SQLite database's file (None for a server database, or a file not there)."""
    if url.get_backend_name() != "sqlite":
        return None
    try:
        stat = os.stat(url.database)
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def check_file(url: URL, identity: tuple[int, int] | None) -> None:
    """``OSError`` when the SQLite file opened as ``identity`` (:func:`file_identity`) was deleted or replaced since:
    writes would go to a file no one can open again (issue 44: 30 records lost, exit 0). No check without an identity."""
    if identity is not None and file_identity(url) != identity:
        raise OSError(f"{url.database}: the station database file was deleted or replaced while it was open")


def describe(url: URL) -> str:
    """``url`` for messages and logs, its user info (user and password) and query values hidden (``core/safe_text.py``)."""
    return mask_url(url.render_as_string(hide_password=True))


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cursor.close()


def make_engine(url: URL, pool_size: int = 5) -> Engine:
    """An engine for ``url`` (from :func:`parse_url`). Creating it connects to nothing; a SQLite file is created on the
    first connection (its folder must exist)."""
    if url.get_backend_name() == "sqlite":
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(
        url,
        pool_size=pool_size,
        pool_pre_ping=True,
        connect_args={"connect_timeout": CONNECT_TIMEOUT_S, "application_name": "defect_detector station"},
    )


def default_images_dir(url: URL) -> Path | None:
    """The images folder beside a SQLite file (``station.db`` -> ``station.db.images``); None for a server database."""
    if url.get_backend_name() == "sqlite":
        return Path(f"{url.database}.images")
    return None


def insert_ignore(conn: Connection, table: Table, rows: list[dict[str, Any]], keys: Iterable[str]) -> None:
    """Insert ``rows``, skipping those whose ``keys`` already exist (``ON CONFLICT DO NOTHING`` in both dialects)."""
    if rows:
        conn.execute(_dialect_insert(conn, table).on_conflict_do_nothing(index_elements=list(keys)), rows)


_UPSERTS: dict[tuple[str, str, tuple[str, ...], tuple[str, ...]], Any] = {}


def upsert_add(conn: Connection, table: Table, rows: list[dict[str, Any]], keys: list[str], counters: list[str]) -> None:
    """Insert ``rows`` or, where ``keys`` exist, add their ``counters`` to the stored ones (the statement is built once)."""
    if not rows:
        return
    cache_key = (conn.dialect.name, table.name, tuple(keys), tuple(counters))
    stmt = _UPSERTS.get(cache_key)
    if stmt is None:
        stmt = _dialect_insert(conn, table)
        stmt = _UPSERTS[cache_key] = stmt.on_conflict_do_update(
            index_elements=keys, set_={c: table.c[c] + stmt.excluded[c] for c in counters}
        )
    conn.execute(stmt, rows)


def _dialect_insert(conn: Connection, table: Table) -> Any:
    return (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table)


def to_db_time(value: datetime) -> datetime:
    """``value`` as the database stores times: naive UTC (a naive ``value`` is taken as UTC)."""
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def iso(value: datetime | None) -> str | None:
    """A stored (naive UTC) time as ISO 8601 with its offset, e.g. ``2025-06-01T08:00:00.250000+00:00``."""
    return None if value is None else value.replace(tzinfo=timezone.utc).isoformat()


def parse_time(text: str, what: str = "since") -> datetime:
    """An ISO 8601 time (``Z`` or an offset; none means UTC) as naive UTC; ``ValueError`` with one line otherwise,
    also for a year outside :data:`YEARS` (so that no later date arithmetic can overflow)."""
    try:
        value = datetime.fromisoformat(text.strip())
        value = to_db_time(value)
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"{what}: not an ISO 8601 time: {text[:64]!r}") from exc
    if not YEARS[0] <= value.year <= YEARS[1]:
        raise ValueError(f"{what}: {text[:64]!r} is outside the years {YEARS[0]}-{YEARS[1]}")
    return value
