"""The recorder: every frame (inspected or not) into the station database, without ever slowing or failing inspection.

:meth:`Recorder.record` only puts the :class:`~defect_detector.station.records.FrameRecord` on a bounded queue (a full
queue drops the frame and counts it); one writer thread takes up to ``batch_size`` frames at a time and writes them in
one transaction: the PNGs of the frames queued for review first (each written to a temp file and renamed), then the
rows. A killed process therefore loses at most the frames not yet committed (the frame in flight, or the batch being
written), and the database only ever refers to complete files. When the database is unreachable the batch is counted
in :attr:`Recorder.unrecorded`, a WARNING is logged at most once per ``warn_every`` seconds, and the next batch tries
again; what was committed stays.

A frame is queued for review when it has a call scoring at least its threshold (the record's ``conf``: the threshold
that decided the frame, its design's taught point or the operating point of the weights that inspected it; else the
recorder's ``conf``) or its drift state is ``warning`` / ``critical``; its calls at or above that threshold (all of
them while drift is raised) wait in the review queue. Each inspected frame is marked as its board's first inspection
or not (``core/board_yield.py``: by its serial, one indexed query per batch), and the per-minute tallies count frames
by verdict and first passes, so the pages read first-pass yield from sums.
A frame that was not inspected is recorded with its reason (and counted per reason kind in ``refusal_tallies``), and its
picture is kept, so the station can list it. Frames against one golden image in a row fold into a design run
(:mod:`~defect_detector.station.designs`).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from defect_detector.core.board_yield import BoardCounts, is_first_inspection
from defect_detector.core.safe_text import show_controls
from defect_detector.station.db import (
    check_file,
    describe,
    file_identity,
    insert_ignore,
    make_engine,
    parse_time,
    parse_url,
    to_db_time,
    upsert_add,
)
from defect_detector.station.designs import DesignRuns, FrameDesign, design_of
from defect_detector.station.images import new_names, write_png
from defect_detector.station.migrations import ensure_schema
from defect_detector.station.records import RAISED, REGISTRATION_KEYS, FrameRecord
from defect_detector.station.schema import (
    YIELD_COLUMNS,
    calls,
    class_tallies,
    classes,
    drift_events,
    inspections,
    refusal_tallies,
    set_meta,
    tallies,
    yield_values,
)
from defect_detector.station.store import images_root

log = logging.getLogger("defect_detector.station")

_STOP = object()
_INSERT_RETURNING_ID = inspections.insert().returning(inspections.c.id, sort_by_parameter_order=True)
_INSERT_CALLS = calls.insert()
_INSERT_EVENTS = drift_events.insert()


@dataclass
class _Prepared:
    """A record ready to insert: its ``inspections`` row and whether its picture is the live page's (not kept)."""

    record: FrameRecord
    row: dict[str, Any]
    live_only: bool = False
    id: int | None = None
    review: list[bool] = field(default_factory=list)


@dataclass(frozen=True)
class RecorderTiming:
    """When a :class:`Recorder` speaks up: ``warn_every`` seconds between WARNINGs about unrecorded frames, ``live_every``
    seconds between pictures of frames that are not kept (for the live page), both on ``clock`` (monotonic seconds;
    tests replace it)."""

    warn_every: float = 60.0
    live_every: float = 0.25
    clock: Callable[[], float] = time.monotonic


class Recorder:
    """Records frames into the database at ``url`` (see :func:`~defect_detector.station.db.parse_url`).

    ``conf``: the operating point (module docstring). ``classes``: the model's class names, recorded as the database's
    known classes (the review page offers them). ``images``: the folder for stored PNGs (default: beside a SQLite file,
    else the one the database names, else ``./<database>.images``). ``queue_size``: frames waiting before new ones are
    dropped. ``timing``: how often it warns and stores live pictures (:class:`RecorderTiming`).
    Raises ``ValueError`` only for a malformed URL; connecting happens in the writer thread.
    """

    def __init__(
        self,
        url: str,
        conf: float = 0.25,
        classes: Iterable[str] = (),
        images: str | Path | None = None,
        queue_size: int = 64,
        batch_size: int = 32,
        timing: RecorderTiming = RecorderTiming(),
    ) -> None:
        self.url = parse_url(url)
        self.conf = float(conf)
        self.batch_size = max(1, batch_size)
        self.warn_every, self.live_every, self._clock = timing.warn_every, timing.live_every, timing.clock
        self._classes = list(dict.fromkeys(classes))
        self._explicit_images = Path(images).resolve() if images is not None else None
        self._engine = make_engine(self.url, pool_size=1)
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, queue_size))
        self._dropped = self._failed = self._recorded = self._not_inspected = 0
        self._designs = DesignRuns()
        self._last_warning: float | None = None
        self._warn_lock = threading.Lock()
        self._ready = False
        self._conn: Connection | None = None  # the writer thread's own
        self._known: set[str] = set()
        self.images: Path | None = None
        self._last_live: float | None = None
        self._live_only: tuple[int, str] | None = None  # (inspection id, picture) of the live page's not-kept frame
        self._closed = False
        self._identity: tuple[int, int] | None = None  # the SQLite file written to (station/db.py file_identity)
        self._thread = threading.Thread(target=self._run, name="station-recorder", daemon=True)
        self._thread.start()

    @property
    def unrecorded(self) -> int:
        """Frames not recorded: dropped on a full queue, or in a batch the database did not take."""
        return self._dropped + self._failed

    @property
    def recorded(self) -> int:
        """Frames committed to the database, inspected or not."""
        return self._recorded

    @property
    def not_inspected(self) -> int:
        """Of :attr:`recorded`, the frames that were not inspected."""
        return self._not_inspected

    def record(self, record: FrameRecord) -> bool:
        """Hand one frame to the writer; never blocks and never raises. False (and counted) when it is dropped."""
        try:
            if self._closed:
                raise queue.Full
            self._queue.put_nowait(record)
            return True
        except queue.Full:
            self._dropped += 1
            self._warn("the recording queue is full (the database is slow or unreachable)")
        except Exception as exc:  # recording never fails inspection
            self._dropped += 1
            self._warn(_one_line(exc))
        return False

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every frame handed over so far is written (or counted as unrecorded); False on timeout."""
        if not self._thread.is_alive():
            return self._queue.empty()
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, stop the writer and release the database (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            log.warning("station recorder: could not stop the writer within %.0f s", timeout)
        self._thread.join(timeout)
        if self.unrecorded:
            log.warning("station database %s: %d frames unrecorded (%d recorded)", describe(self.url), self.unrecorded, self.recorded)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _warn(self, why: str) -> None:
        """Log a WARNING about unrecorded frames, at most once per ``warn_every`` seconds."""
        with self._warn_lock:
            now = self._clock()
            if self._last_warning is not None and now - self._last_warning < self.warn_every:
                return
            self._last_warning = now
        log.warning("station database %s: %d frames unrecorded so far (%s); inspection goes on", describe(self.url), self.unrecorded, why)

    def _run(self) -> None:
        stop = False
        while not stop:
            batch = [self._queue.get()]
            while len(batch) < self.batch_size and batch[-1] is not _STOP:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            records = [b for b in batch if isinstance(b, FrameRecord)]
            if records:
                self._write_counted(records)
            for item in batch:
                if isinstance(item, threading.Event):
                    item.set()
                stop = stop or item is _STOP
        self._disconnect()

    def _write_counted(self, records: list[FrameRecord]) -> None:
        try:
            self._write(records)
            self._recorded += len(records)
            self._not_inspected += sum(r.verdict == "not_inspected" for r in records)
        except Exception as exc:  # the database (or disk) failing is counted, never raised
            self._failed += len(records)
            self._designs.reset()
            self._ready = False
            self._disconnect()
            self._warn(_one_line(exc))

    def _disconnect(self) -> None:
        """Drop the writer's connection (and the pool): the next batch connects afresh."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # a broken connection may fail to close; it is dropped all the same
                pass
        self._engine.dispose()

    def _setup(self) -> None:
        """On the first connection: the folder of a SQLite file, the schema, the images root, the known classes."""
        if self.url.get_backend_name() == "sqlite":
            Path(self.url.database).parent.mkdir(parents=True, exist_ok=True)
        ensure_schema(self._engine)
        with self._engine.begin() as conn:
            self.images = images_root(conn, self.url, self._explicit_images, store=True)
            insert_ignore(conn, classes, [{"name": n} for n in self._classes], ["name"])
        self._known = set(self._classes)
        self._identity = self._identity or file_identity(self.url)
        self._ready = True

    def _check_file(self) -> None:
        """``OSError`` when the SQLite file went away under the recorder: the frames recorded in it are counted as
        unrecorded (once), and no new empty file is made in its place."""
        try:
            check_file(self.url, self._identity)
        except OSError:
            if self._recorded:
                self._failed, self._recorded, self._not_inspected = self._failed + self._recorded, 0, 0
            raise

    def _write(self, records: list[FrameRecord]) -> None:
        self._check_file()
        if not self._ready:
            self._setup()
        if self._conn is None:
            self._conn = self._engine.connect()  # reach the database before writing any file; kept while it works
        prepared = self._prepare(records)
        with self._conn.begin():
            self._insert(self._conn, prepared)
            previous = self._update_live(self._conn, prepared)
        self._designs.commit()
        if previous is not None and self.images is not None:
            (self.images / previous).unlink(missing_ok=True)

    def _prepare(self, records: list[FrameRecord]) -> list[_Prepared]:
        """Rows for ``records``; the PNGs of queued frames (and of the live picture, when due) written."""
        out = []
        for record in records:
            queued, conf = record.queued(self.conf), record.threshold(self.conf)
            raised = record.drift in RAISED
            review = [queued and (raised or c.score >= conf) for c in record.calls]
            out.append(_Prepared(record, _row(record, queued, conf), review=review))
            if (queued or record.verdict == "not_inspected") and record.image is not None:
                self._store(out[-1], live=False)
        newest = out[-1] if out else None
        now = self._clock()
        due = self._last_live is None or now - self._last_live >= self.live_every
        if newest is not None and newest.record.image is not None and newest.row["image"] is None and due:
            self._store(newest, live=True)
            newest.live_only = True
            self._last_live = now
        return out

    def _store(self, item: _Prepared, live: bool) -> None:
        assert self.images is not None and item.record.image is not None
        frame_name, reference_name = new_names(item.row["time"], live=live)
        write_png(self.images, frame_name, item.record.image, live=live)
        item.row["image"] = frame_name
        if not live and item.record.reference_image is not None:
            write_png(self.images, reference_name, item.record.reference_image)
            item.row["reference_image"] = reference_name

    def _insert(self, conn: Connection, prepared: list[_Prepared]) -> None:
        _mark_first_inspections(conn, prepared)
        ids = conn.execute(_INSERT_RETURNING_ID, [p.row for p in prepared])
        for item, inspection_id in zip(prepared, ids.scalars().all()):
            item.id = int(inspection_id)
        call_rows, event_rows = [], []
        for item in prepared:
            record, when = item.record, item.row["time"]
            for call, review in zip(record.calls, item.review):
                x1, y1, x2, y2 = (float(v) for v in call.box)
                call_rows.append(
                    {"inspection_id": item.id, "class_name": call.class_name, "score": float(call.score), "x1": x1, "y1": y1, "x2": x2}
                    | {"y2": y2, "time": when, "review": review, "pending": review, "verdict": None, "verdict_class": None}
                    | {"board": None if call.board is None else show_controls(call.board)}
                    | {"golden_x": None if call.golden is None else float(call.golden[0])}
                    | {"golden_y": None if call.golden is None else float(call.golden[1])}
                )
            event_rows += [_event_row(e, item.id, record) for e in record.events]
        if call_rows:
            conn.execute(_INSERT_CALLS, call_rows)
        if event_rows:
            conn.execute(_INSERT_EVENTS, event_rows)
        new = sorted({r["class_name"] for r in call_rows} - self._known)
        insert_ignore(conn, classes, [{"name": n} for n in new], ["name"])
        self._known.update(new)
        _add_tallies(conn, prepared)
        self._designs.add(conn, [_frame_design(p) for p in prepared])

    def _update_live(self, conn: Connection, prepared: list[_Prepared]) -> str | None:
        """Point ``live`` at the newest frame with a picture; returns the superseded live-only picture to delete."""
        pictured = [p for p in prepared if p.row["image"] is not None]
        if not pictured:
            return None
        newest = pictured[-1]
        set_meta(conn, "live", str(newest.id))
        previous = self._live_only
        self._live_only = (newest.id, newest.row["image"]) if newest.live_only else None
        if previous is None or previous[0] == newest.id:
            return None
        conn.execute(inspections.update().where(inspections.c.id == previous[0]).values(image=None))
        return previous[1]


def _row(record: FrameRecord, queued: bool, conf: float) -> dict[str, Any]:
    """The ``inspections`` row of ``record`` (no picture yet; ``first_inspection`` set when it is inserted)."""
    height, width = record.image.shape if record.image is not None else (None, None)
    boards = [{"name": b.name, "verdict": b.verdict, "calls": sum(c.board == b.name for c in record.calls)} for b in record.boards]
    return {
        "source": show_controls(record.source),
        "frame": record.frame,
        "name": show_controls(record.name),
        "time": to_db_time(record.time),
        "model": record.model,
        "reference": None if record.reference is None else show_controls(record.reference),
        "verdict": record.verdict,
        "reason": None if record.reason is None else show_controls(record.reason),
        "reason_kind": record.kind,
        "drift": record.drift[:16],
        "score": record.score,
        "width": width,
        "height": height,
        "image": None,
        "reference_image": None,
        "queued": queued,
        "design_warning": record.design_warning,
        "design_taught": record.design_taught,
        "golden_key": record.golden_key,
        **{f"reg_{k}": v for k, v in (record.registration or dict.fromkeys(REGISTRATION_KEYS)).items()},
        **{column: None if value is None else show_controls(value) for column, value in _trace(record).items()},
        "conf": float(conf),
        "first_inspection": None,
        "boards": json.dumps(boards) if boards else None,
    }


def _trace(record: FrameRecord) -> dict[str, str | None]:
    """The trace columns of a record: ``serial``, ``lot``, ``work_order``."""
    return {"serial": record.serial, "lot": record.lot, "work_order": record.order}


def _mark_first_inspections(conn: Connection, prepared: list[_Prepared]) -> None:
    """Set each row's ``first_inspection`` (``core/board_yield.py``): an inspected frame whose serial no inspected frame
    before it has (in the database, or earlier in this batch); every inspected frame without a serial."""
    serials = {p.row["serial"] for p in prepared if p.row["serial"] is not None and p.record.verdict != "not_inspected"}
    seen: set[str] = set()
    if serials:
        earlier = select(inspections.c.serial).where(inspections.c.serial.in_(sorted(serials)), inspections.c.verdict != "not_inspected")
        seen = set(conn.execute(earlier.distinct()).scalars())
    for item in prepared:
        serial, verdict = item.row["serial"], item.record.verdict
        item.row["first_inspection"] = is_first_inspection(verdict, serial in seen)
        if serial is not None and verdict != "not_inspected":
            seen.add(serial)


def _add_tallies(conn: Connection, prepared: list[_Prepared]) -> None:
    """Add the written frames to the per-minute tallies: frames, calls, yield (``tallies``), calls per class and not
    inspected frames per reason kind."""
    minutes: dict[datetime, BoardCounts] = {}
    minute_calls: Counter[datetime] = Counter()
    per_class: Counter[tuple[datetime, str]] = Counter()
    per_kind: Counter[tuple[datetime, str]] = Counter()
    for item in prepared:
        record = item.record
        minute = item.row["time"].replace(second=0, microsecond=0)
        minutes.setdefault(minute, BoardCounts()).add(record.verdict, bool(item.row["first_inspection"]))
        if record.kind is not None:
            per_kind[(minute, record.kind)] += 1
        minute_calls[minute] += len(record.calls)
        for call in record.calls:
            per_class[(minute, call.class_name)] += 1
    rows = []
    for minute, counts in minutes.items():
        inspected = counts.passed + counts.suspect + counts.failed
        rows.append({"minute": minute, "boards": inspected, "calls": minute_calls[minute], "not_inspected": counts.not_inspected})
        rows[-1].update(yield_values(counts))
    upsert_add(conn, tallies, rows, ["minute"], ["boards", "calls", "not_inspected", *YIELD_COLUMNS])
    by_class = [{"minute": m, "class_name": c, "calls": n} for (m, c), n in per_class.items()]
    upsert_add(conn, class_tallies, by_class, ["minute", "class_name"], ["calls"])
    kinds = [{"minute": m, "reason_kind": k, "frames": n} for (m, k), n in per_kind.items()]
    upsert_add(conn, refusal_tallies, kinds, ["minute", "reason_kind"], ["frames"])


def _frame_design(item: _Prepared) -> FrameDesign:
    """What the design runs need of a written frame."""
    record = item.record
    assert item.id is not None
    inspected = record.verdict != "not_inspected"
    design = design_of(record.reference, record.events)
    noted = (record.design_warning, record.design_taught)
    return FrameDesign(item.id, record.source, record.frame, item.row["time"], design, inspected, *noted)


def _event_row(event: dict[str, Any], inspection_id: int | None, record: FrameRecord) -> dict[str, Any]:
    """The ``drift_events`` row of one event dict (``DriftEvent.to_dict()`` keys; a changeover's too)."""
    try:
        when = parse_time(str(event["time"])) if event.get("time") else to_db_time(record.time)
    except ValueError:
        when = to_db_time(record.time)
    score = event.get("score")
    return {
        "inspection_id": inspection_id,
        "event": str(event.get("event", "drift"))[:32],
        "source": str(event.get("source") or record.source),
        "frame": int(event.get("frame", record.frame)),
        "time": when,
        "severity": None if event.get("severity") is None else str(event["severity"])[:16],
        "score": float(score) if isinstance(score, (int, float)) else None,
        "cause": None if event.get("cause") is None else str(event["cause"])[:128],
        "reason": None if event.get("reason") is None else str(event["reason"]),
        "details": json.dumps(event, default=str),
    }


def _one_line(exc: BaseException) -> str:
    """The first line of an exception's message (a database driver's own message where SQLAlchemy wraps one)."""
    inner = getattr(exc, "orig", None) or exc
    text = str(inner).strip() or type(inner).__name__
    return f"{type(inner).__name__}: {text.splitlines()[0]}"
