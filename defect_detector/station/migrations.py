"""The schema version and its migrations: :func:`ensure_schema` creates the tables a database lacks and runs
``MIGRATIONS[v]``, which brings a station database at schema version ``v`` to ``v + 1`` in place, inside its
transaction (new tables are already created by then).

- 1 -> 2: every frame counted, inspected or not (issue 33). Adds ``inspections.reason_kind`` and the index on
  ``inspections(verdict, id)``, ``tallies.not_inspected``; fills them, ``refusal_tallies`` and ``design_runs`` in from
  the frames already recorded (one pass over the inspections, streamed).
- 2 -> 3: two reviewers (issue 36). Adds ``calls.version`` (1 for a call that already has a verdict, else 0) and the
  lease columns ``calls.lease_reviewer`` / ``calls.lease_until``.
- 3 -> 4: designs unlike the model's training images, and taught ones (issue 34). Adds ``inspections.design_warning``,
  ``design_runs.design_warning``, ``inspections.design_taught`` and ``design_runs.design_taught`` (null for the frames
  recorded before: they were not checked).
- 4 -> 5: the golden image's fingerprint and registration (``inspections.golden_key``, ``reg_*``; null before).
- 5 -> 6: yield and traceability (issue 58). Adds ``inspections.serial``, ``lot``, ``work_order``, ``conf``,
  ``first_inspection``, ``boards`` and the index on ``inspections(serial, id)``, ``calls.board`` and the ``tallies``
  yield columns; the frames already recorded had no serial, so each inspected one is its board's first inspection, and
  the tallies' yield is filled in from their verdicts (one pass over the inspections, streamed).
- 6 -> 7: operators' rejections teach the design's tolerance (issue 56). Adds ``calls.golden_x`` / ``golden_y``, each
  call's box centre in its golden image's pixels (null for the calls recorded before: their registration was not kept).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import bindparam, select, text
from sqlalchemy.engine import Connection, Engine

from defect_detector.core.board_yield import BoardCounts
from defect_detector.station.db import upsert_add
from defect_detector.station.designs import DesignRuns, FrameDesign
from defect_detector.station.records import KIND_CHARS
from defect_detector.station.schema import (
    SCHEMA_VERSION,
    YIELD_COLUMNS,
    calls,
    inspections,
    metadata,
    refusal_tallies,
    station_meta,
    tallies,
    yield_values,
)

_BATCH = 1000


def ensure_schema(engine: Engine) -> None:
    """Create the tables a database lacks and check (or migrate) its schema version. ``ValueError`` for a database of
    a newer version than this program's."""
    metadata.create_all(engine, checkfirst=True)
    with engine.begin() as conn:
        stored = conn.execute(select(station_meta.c.value).where(station_meta.c.key == "schema_version")).scalar()
        if stored is None:
            conn.execute(station_meta.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
            return
        version = int(stored)
        if version > SCHEMA_VERSION:
            raise ValueError(f"the station database has schema version {version}; this program knows up to {SCHEMA_VERSION}: upgrade it")
        while version < SCHEMA_VERSION:
            MIGRATIONS[version](conn)
            version += 1
        conn.execute(station_meta.update().where(station_meta.c.key == "schema_version").values(value=str(version)))


def legacy_reason_kind(reason: str | None) -> str:
    """The kind of a not-inspected reason recorded before schema 2 kept kinds (such rows have only the text): the text
    after the frame's name and before any detail in parentheses (``"b.png: no golden image (a golden-template model)"``
    -> ``"no golden image"``); ``unknown`` for none. New records carry their ``RefusalKind``."""
    if not reason or not reason.strip():
        return "unknown"
    text = " ".join(reason.split()).split(": ", 1)[-1]
    return text.split(" (", 1)[0][:KIND_CHARS] or "unknown"


def _add_column(conn: Connection, table: str, column: str, ddl: str) -> None:
    """``ALTER TABLE table ADD COLUMN column ddl`` unless the column is there (both dialects)."""
    from sqlalchemy import inspect

    if column not in {c["name"] for c in inspect(conn).get_columns(table)}:
        conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}"))


def _create_index(conn: Connection, name: str) -> None:
    """Create the ``inspections`` index ``name`` unless it is there (its columns must be)."""
    next(index for index in inspections.indexes if index.name == name).create(conn, checkfirst=True)


def _to_2(conn: Connection) -> None:
    _add_column(conn, "inspections", "reason_kind", "TEXT")
    _add_column(conn, "tallies", "not_inspected", "INTEGER NOT NULL DEFAULT 0")
    _create_index(conn, "ix_inspections_verdict")
    cols = (inspections.c.id, inspections.c.source, inspections.c.frame, inspections.c.time)
    cols += (inspections.c.reference, inspections.c.verdict, inspections.c.reason)
    runs = DesignRuns()
    kinds: list[dict[str, object]] = []
    refused: Counter[datetime] = Counter()
    per_kind: Counter[tuple[datetime, str]] = Counter()
    last = 0
    while True:
        page = conn.execute(select(*cols).where(inspections.c.id > last).order_by(inspections.c.id).limit(_BATCH)).all()
        if not page:
            break
        last = page[-1].id
        runs.add(conn, [FrameDesign(r.id, r.source, r.frame, r.time, r.reference, r.verdict != "not_inspected") for r in page])
        runs.commit()
        for row in (r for r in page if r.verdict == "not_inspected"):
            kind = legacy_reason_kind(row.reason)
            kinds.append({"row_id": row.id, "kind": kind})
            minute = row.time.replace(second=0, microsecond=0)
            refused[minute] += 1
            per_kind[(minute, kind)] += 1
    if kinds:
        conn.execute(inspections.update().where(inspections.c.id == bindparam("row_id")).values(reason_kind=bindparam("kind")), kinds)
    minutes = [{"minute": m, "boards": 0, "calls": 0, "not_inspected": n} for m, n in refused.items()]
    upsert_add(conn, tallies, minutes, ["minute"], ["not_inspected"])
    rows_kind = [{"minute": m, "reason_kind": k, "frames": n} for (m, k), n in per_kind.items()]
    upsert_add(conn, refusal_tallies, rows_kind, ["minute", "reason_kind"], ["frames"])


def _to_3(conn: Connection) -> None:
    _add_column(conn, "calls", "version", "INTEGER NOT NULL DEFAULT 0")
    _add_column(conn, "calls", "lease_reviewer", "VARCHAR(64)")
    _add_column(conn, "calls", "lease_until", "DATETIME" if conn.dialect.name == "sqlite" else "TIMESTAMP WITHOUT TIME ZONE")
    conn.execute(calls.update().where(calls.c.verdict.is_not(None), calls.c.version == 0).values(version=1))


def _to_4(conn: Connection) -> None:
    _add_column(conn, "inspections", "design_warning", "TEXT")
    _add_column(conn, "design_runs", "design_warning", "TEXT")
    _add_column(conn, "inspections", "design_taught", "BOOLEAN")
    _add_column(conn, "design_runs", "design_taught", "BOOLEAN")


def _to_5(conn: Connection) -> None:
    _add_column(conn, "inspections", "golden_key", "VARCHAR(64)")
    for column in ("reg_shift", "reg_angle", "reg_score", "reg_difference"):
        _add_column(conn, "inspections", column, "FLOAT" if conn.dialect.name == "sqlite" else "DOUBLE PRECISION")


def _to_6(conn: Connection) -> None:
    for column in ("serial", "lot", "work_order", "boards"):
        _add_column(conn, "inspections", column, "TEXT")
    _add_column(conn, "inspections", "conf", "FLOAT" if conn.dialect.name == "sqlite" else "DOUBLE PRECISION")
    _add_column(conn, "inspections", "first_inspection", "BOOLEAN")
    _add_column(conn, "calls", "board", "TEXT")
    for column in YIELD_COLUMNS:
        _add_column(conn, "tallies", column, "INTEGER NOT NULL DEFAULT 0")
    _create_index(conn, "ix_inspections_serial")
    conn.execute(inspections.update().values(first_inspection=inspections.c.verdict != "not_inspected"))
    minutes: dict[datetime, BoardCounts] = {}
    last = 0
    while True:
        cols = (inspections.c.id, inspections.c.time, inspections.c.verdict)
        page = conn.execute(select(*cols).where(inspections.c.id > last).order_by(inspections.c.id).limit(_BATCH)).all()
        if not page:
            break
        last = page[-1].id
        for row in page:
            if row.verdict != "not_inspected":
                minutes.setdefault(row.time.replace(second=0, microsecond=0), BoardCounts()).add(row.verdict, True)
    rows = [{"minute": m, "boards": 0, "calls": 0, "not_inspected": 0, **yield_values(c)} for m, c in minutes.items()]
    upsert_add(conn, tallies, rows, ["minute"], list(YIELD_COLUMNS))


def _to_7(conn: Connection) -> None:
    for column in ("golden_x", "golden_y"):
        _add_column(conn, "calls", column, "FLOAT" if conn.dialect.name == "sqlite" else "DOUBLE PRECISION")


MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _to_2, 2: _to_3, 3: _to_4, 4: _to_5, 5: _to_6, 6: _to_7}
"""``version -> step`` bringing a database at ``version`` to ``version + 1``."""
