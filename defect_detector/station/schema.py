"""The station's tables (SQLAlchemy Core) and their schema version.

Times are naive UTC. Boxes are xyxy float in the frame's pixels. Names (sources, frames, models, classes) are
unbounded text, so no input is ever too long for PostgreSQL; enumerations (verdict, drift state) are short strings.

The indexes serve the pages' queries on a large history: ``inspections`` newest first by primary key (keyset
pagination), ``calls.pending`` for the review queue, ``tallies`` / ``class_tallies`` (per-minute counts the recorder
adds up as it writes) for the live page's counts, and the ``time`` indexes for the report and ``/api/events``.

``station_meta`` holds ``schema_version`` (:data:`SCHEMA_VERSION`), ``images_root`` (where stored PNGs live, for a
server database) and ``live`` (the id of the newest inspection with a picture). A database written by a newer version
is refused; an older one is migrated in place by :mod:`~defect_detector.station.migrations` (added columns, indexes
and tables, and the counts a new table holds filled in from the rows already recorded).

Every frame is an inspection row, inspected or not: ``tallies.boards`` counts the inspected ones, ``tallies.not_inspected``
the others (``refusal_tallies`` per ``reason_kind``). ``design_runs`` folds the frames of one source inspected against
one golden image in a row into one line (what a run of ``changeover`` events would be otherwise). A call's ``version``
counts its verdicts (a verdict on a call that has one must name it), and ``lease_reviewer`` / ``lease_until`` hold it
for the reviewer ``/api/review/next`` handed it to (schema 3). ``design_warning`` (inspections and design runs, schema 4):
the frame's golden image looks unlike the model's training images (``inspect/design_check.py``), else null;
``design_taught`` (the same, schema 4): whether the weights were taught it (``teach``), null for rows recorded before.
``inspections.golden_key`` (schema 5): the fingerprint of the golden image's pixels (``inspect/designs.py``), and
``reg_shift`` / ``reg_angle`` / ``reg_score`` / ``reg_difference``: how it was registered into the frame (shift px,
angle degrees, ZNCC score, the golden check's differing share), null without a golden image or before schema 5.

Schema 6 (yield and traceability, issue 58): ``inspections.serial`` / ``lot`` / ``work_order`` (null when unknown),
``conf`` (the score threshold that decided the frame: its calls at or above it were queued for review; null before),
``first_inspection`` (the frame is its board's first inspection, ``core/board_yield.py``: a board is its serial's frames,
or the frame alone without one) and ``boards`` (a panel frame's boards as JSON ``[{"name", "verdict", "calls"}]``, null
for a frame of one board); ``calls.board`` (the panel board a call lies on); ``tallies.passed`` / ``suspect`` /
``failed`` (inspected frames by verdict) and ``first_boards`` / ``first_passed`` (boards inspected, and of those
passed, on their first inspection), so first-pass yield over any window is two sums.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    select,
)
from sqlalchemy.engine import Connection

from defect_detector.core.board_yield import BoardCounts

SCHEMA_VERSION = 7
ID = BigInteger().with_variant(Integer(), "sqlite")  # SQLite: INTEGER PRIMARY KEY, the rowid
CALL_VERDICTS = ("defect", "false_call", "skip")

metadata = MetaData()

station_meta = Table(
    "station_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

classes = Table(
    "classes",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("name", Text, nullable=False, unique=True),
)

inspections = Table(
    "inspections",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("source", Text, nullable=False),
    Column("frame", BigInteger, nullable=False),
    Column("name", Text, nullable=False),
    Column("time", DateTime, nullable=False),
    Column("model", Text, nullable=False),
    Column("reference", Text),
    Column("verdict", String(16), nullable=False),
    Column("reason", Text),
    Column("reason_kind", Text),  # the short kind of ``reason`` for counting (not_inspected only; schema 2)
    Column("drift", String(16), nullable=False),
    Column("score", Float),
    Column("width", Integer),
    Column("height", Integer),
    Column("image", String(255)),  # stored PNG, relative to the images root (None: not kept)
    Column("reference_image", String(255)),  # stored registered golden image, same frame and folder
    Column("queued", Boolean, nullable=False),
    Column("design_warning", Text),  # its golden image looks unlike the model's training images (schema 4)
    Column("design_taught", Boolean),  # the weights were taught its golden image (schema 4; null: recorded before)
    Column("golden_key", String(64)),  # the fingerprint of its golden image's pixels (schema 5)
    Column("reg_shift", Float),  # how its golden image was registered (schema 5): shift px, angle degrees,
    Column("reg_angle", Float),  # ZNCC score, and the golden check's differing share of the covered area
    Column("reg_score", Float),
    Column("reg_difference", Float),
    Column("serial", Text),  # the board's serial (schema 6), its lot and its work order; null when unknown
    Column("lot", Text),
    Column("work_order", Text),
    Column("conf", Float),  # the score threshold that decided the frame (schema 6)
    Column("first_inspection", Boolean),  # its board's first inspection (schema 6)
    Column("boards", Text),  # a panel frame's boards, JSON [{"name", "verdict", "calls"}] (schema 6)
    Index("ix_inspections_time", "time"),
    Index("ix_inspections_verdict", "verdict", "id"),
    Index("ix_inspections_serial", "serial", "id"),
)

calls = Table(
    "calls",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("inspection_id", ID, ForeignKey("inspections.id", ondelete="CASCADE"), nullable=False),
    Column("class_name", Text, nullable=False),
    Column("score", Float, nullable=False),
    Column("x1", Float, nullable=False),
    Column("y1", Float, nullable=False),
    Column("x2", Float, nullable=False),
    Column("y2", Float, nullable=False),
    Column("time", DateTime, nullable=False),  # the inspection's time, for the report by shift
    Column("review", Boolean, nullable=False),  # it went to the review queue
    Column("pending", Boolean, nullable=False),  # in the queue and without a verdict yet
    Column("verdict", String(16)),  # the latest verdict (history in ``verdicts``)
    Column("verdict_class", Text),  # the class the reviewer confirmed (defect only)
    Column("version", Integer, nullable=False, server_default="0"),  # verdicts given so far (schema 3)
    Column("lease_reviewer", String(64)),  # who /api/review/next handed it to (schema 3)
    Column("lease_until", DateTime),  # ... until when (naive UTC)
    Column("board", Text),  # the panel board it lies on (schema 6)
    Column("golden_x", Float),  # its box centre in its golden image's pixels (schema 7; null: no golden image, or before)
    Column("golden_y", Float),
    Index("ix_calls_inspection", "inspection_id"),
    Index("ix_calls_pending", "pending", "id"),
    Index("ix_calls_verdict_time", "verdict", "time"),
)

verdicts = Table(
    "verdicts",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("call_id", ID, ForeignKey("calls.id", ondelete="CASCADE")),  # None: a missed defect the reviewer drew
    Column("inspection_id", ID, ForeignKey("inspections.id", ondelete="CASCADE"), nullable=False),
    Column("verdict", String(16), nullable=False),
    Column("class_name", Text),
    Column("x1", Float),
    Column("y1", Float),
    Column("x2", Float),
    Column("y2", Float),
    Column("reviewer", String(64), nullable=False),
    Column("time", DateTime, nullable=False),
    CheckConstraint(f"verdict IN ({', '.join(repr(v) for v in CALL_VERDICTS)})", name="ck_verdicts_verdict"),
    Index("ix_verdicts_inspection", "inspection_id"),
    Index("ix_verdicts_call", "call_id"),
)

drift_events = Table(
    "drift_events",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("inspection_id", ID, ForeignKey("inspections.id", ondelete="SET NULL")),  # the frame that raised it
    Column("event", String(32), nullable=False),  # drift, recovered, rebaseline, changeover
    Column("source", Text, nullable=False),
    Column("frame", BigInteger, nullable=False),
    Column("time", DateTime, nullable=False),
    Column("severity", String(16)),
    Column("score", Float),
    Column("cause", String(128)),
    Column("reason", Text),
    Column("details", Text, nullable=False),  # the whole event as JSON
    Index("ix_drift_events_time", "time"),
)

tallies = Table(
    "tallies",
    metadata,
    Column("minute", DateTime, primary_key=True),
    Column("boards", Integer, nullable=False),  # inspected frames
    Column("calls", Integer, nullable=False),
    Column("not_inspected", Integer, nullable=False, server_default="0"),  # schema 2
    Column("passed", Integer, nullable=False, server_default="0"),  # inspected frames by verdict (schema 6)
    Column("suspect", Integer, nullable=False, server_default="0"),
    Column("failed", Integer, nullable=False, server_default="0"),
    Column("first_boards", Integer, nullable=False, server_default="0"),  # boards inspected (first inspections)
    Column("first_passed", Integer, nullable=False, server_default="0"),  # ... of those, passed
)

YIELD_COLUMNS = ("passed", "suspect", "failed", "first_boards", "first_passed")
"""The ``tallies`` columns of yield (schema 6)."""


def yield_values(counts: BoardCounts) -> dict[str, int]:
    """The :data:`YIELD_COLUMNS` of ``counts`` (its ``boards`` are ``first_boards``)."""
    named = {"first_boards": counts.boards}
    return {column: named.get(column, getattr(counts, column, 0)) for column in YIELD_COLUMNS}

refusal_tallies = Table(
    "refusal_tallies",
    metadata,
    Column("minute", DateTime, primary_key=True),
    Column("reason_kind", Text, primary_key=True),
    Column("frames", Integer, nullable=False),
)

design_runs = Table(
    "design_runs",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("source", Text, nullable=False),
    Column("design", Text, nullable=False),  # the golden image's name
    Column("first_frame", BigInteger, nullable=False),
    Column("last_frame", BigInteger, nullable=False),
    Column("frames", Integer, nullable=False),
    Column("not_inspected", Integer, nullable=False),
    Column("inspection_id", ID, ForeignKey("inspections.id", ondelete="SET NULL")),  # its first frame
    Column("started", DateTime, nullable=False),
    Column("ended", DateTime, nullable=False),
    Column("design_warning", Text),  # the design looks unlike the model's training images (schema 4)
    Column("design_taught", Boolean),  # the weights were taught the design (schema 4; null: recorded before)
    Index("ix_design_runs_ended", "ended"),
)

class_tallies = Table(
    "class_tallies",
    metadata,
    Column("minute", DateTime, primary_key=True),
    Column("class_name", Text, primary_key=True),
    Column("calls", Integer, nullable=False),
)

def get_meta(conn: Connection, key: str) -> str | None:
    """The ``station_meta`` value of ``key`` (None when unset)."""
    return conn.execute(select(station_meta.c.value).where(station_meta.c.key == key)).scalar()


def set_meta(conn: Connection, key: str, value: str) -> None:
    """Set ``station_meta[key]`` (insert or update)."""
    done = conn.execute(station_meta.update().where(station_meta.c.key == key).values(value=value)).rowcount
    if not done:
        conn.execute(station_meta.insert().values(key=key, value=value))
