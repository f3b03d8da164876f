"""The reads behind the pages and the JSON API, written for a long history (100,000 frames and more).

Every query here is served by an index: newest inspections by primary key with keyset pagination (``before=ID``), the
review queue by ``calls(pending, id)``, counts per class and per board from the per-minute ``tallies`` the recorder adds
up (a shift is at most a few hundred rows, whatever the frame rate), events by ``time``, not-inspected frames by
``inspections(verdict, id)``. Boxes are xyxy in frame pixels.

Changeovers never crowd out a drift alert: the live page's alert history holds drift, recovered and rebaseline events
only, with the design runs (:mod:`~defect_detector.station.designs`) beside it, and ``/api/events`` applies its limit
to changeovers and to the other events separately.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import func, select, true
from sqlalchemy.engine import Connection, Row

from defect_detector.station.db import iso
from defect_detector.station.designs import recent_runs
from defect_detector.station.review import LEASE_S, lease_next
from defect_detector.station.schema import (
    YIELD_COLUMNS,
    calls,
    class_tallies,
    drift_events,
    get_meta,
    inspections,
    refusal_tallies,
    tallies,
)

MAX_LIMIT = 500
"""Most inspections one ``/api/inspections`` page returns."""
DRIFT_POINTS = 300
"""Frames in the live page's drift chart."""
ALERTS = 50
"""Events in the live page's alert history (drift, recovered, rebaseline; changeovers are folded into design runs)."""
REFUSED = 10
"""Not-inspected frames the live page lists."""
MAX_EVENTS = 2000
"""Most events one ``/api/events`` answer returns (the oldest after ``since``)."""


def call_dict(row: Row[Any]) -> dict[str, Any]:
    """A ``calls`` row as the API gives it: ``{"id", "class", "score", "box": [x1, y1, x2, y2]}`` (+ review state: the
    latest ``verdict`` and ``verdict_class``, ``version``, the number of verdicts so far, which a verdict on a call
    that has one must send, and ``waiting``: in the review queue without a verdict; + ``board``: the panel board it
    lies on, None without one)."""
    return {
        "id": row.id,
        "class": row.class_name,
        "score": round(float(row.score), 4),
        "box": [float(row.x1), float(row.y1), float(row.x2), float(row.y2)],
        "verdict": row.verdict,
        "verdict_class": row.verdict_class,
        "version": row.version,
        "waiting": bool(row.pending),
        "board": row.board,
    }


def inspection_dict(row: Row[Any], call_rows: list[Row[Any]]) -> dict[str, Any]:
    """An ``inspections`` row and its calls as ``/api/inspections`` items (DESIGN.md "Line station")."""
    return {
        "id": row.id,
        "source": row.source,
        "frame": row.frame,
        "name": row.name,
        "time": iso(row.time),
        "model": row.model,
        "reference": row.reference,
        "verdict": row.verdict,
        "reason": row.reason,
        "reason_kind": row.reason_kind,
        "drift": row.drift,
        "score": None if row.score is None else round(float(row.score), 4),
        "width": row.width,
        "height": row.height,
        "image": row.image is not None,
        "golden": row.reference_image is not None,
        "design_warning": row.design_warning,
        "design_taught": row.design_taught,
        "golden_key": row.golden_key,
        "registration": None if row.reg_score is None else {k: row._mapping[f"reg_{k}"] for k in ("shift", "angle", "score", "difference")},
        "serial": row.serial,
        "lot": row.lot,
        "order": row.work_order,
        "conf": None if row.conf is None else round(float(row.conf), 5),
        "first_inspection": row.first_inspection,
        "boards": json.loads(row.boards) if row.boards else [],
        "calls": [call_dict(c) for c in call_rows],
    }


def _calls_of(conn: Connection, ids: list[int]) -> dict[int, list[Row[Any]]]:
    by_id: dict[int, list[Row[Any]]] = {i: [] for i in ids}
    if ids:
        for row in conn.execute(select(calls).where(calls.c.inspection_id.in_(ids)).order_by(calls.c.score.desc(), calls.c.id)):
            by_id[row.inspection_id].append(row)
    return by_id


def list_inspections(conn: Connection, limit: int = 50, before: int | None = None, verdict: str | None = None) -> list[dict[str, Any]]:
    """Up to ``limit`` inspections, newest first, with ids below ``before`` when given (keyset pagination), only those of
    ``verdict`` when given (``not_inspected``: the frames that were not inspected, each with its ``reason``)."""
    stmt = select(inspections).order_by(inspections.c.id.desc()).limit(max(1, min(limit, MAX_LIMIT)))
    if before is not None:
        stmt = stmt.where(inspections.c.id < before)
    if verdict is not None:
        stmt = stmt.where(inspections.c.verdict == verdict)
    rows = conn.execute(stmt).all()
    by_id = _calls_of(conn, [r.id for r in rows])
    return [inspection_dict(r, by_id[r.id]) for r in rows]


def get_inspection(conn: Connection, inspection_id: int) -> Row[Any] | None:
    """The ``inspections`` row of ``inspection_id`` (None when there is none)."""
    return conn.execute(select(inspections).where(inspections.c.id == inspection_id)).first()


def inspection_with_calls(conn: Connection, inspection_id: int) -> dict[str, Any] | None:
    row = get_inspection(conn, inspection_id)
    return None if row is None else inspection_dict(row, _calls_of(conn, [row.id])[row.id])


def queue_length(conn: Connection) -> int:
    """Calls waiting for a verdict."""
    return int(conn.execute(select(func.count()).select_from(calls).where(calls.c.pending == true())).scalar() or 0)


def queue_frames(conn: Connection) -> int:
    """Frames with a call waiting for a verdict (the queue's calls are per call: a board with five defects called
    queues five)."""
    waiting = select(func.count(func.distinct(calls.c.inspection_id))).where(calls.c.pending == true())
    return int(conn.execute(waiting).scalar() or 0)


def review_next(
    conn: Connection, reviewer: str | None = None, now: datetime | None = None, lease_s: float = LEASE_S
) -> dict[str, Any] | None:
    """The call to show ``reviewer`` next (:func:`~defect_detector.station.review.lease_next`: leased to them until
    ``now`` (naive UTC, default the current time) + ``lease_s``) with its inspection, the queue's length and the lease
    (``{"reviewer", "until"}``, None without a reviewer); None when no call is free."""
    when = now if now is not None else datetime.now(timezone.utc).replace(tzinfo=None)
    call = lease_next(conn, reviewer, when, lease_s)
    if call is None:
        return None
    lease = None if reviewer is None else {"reviewer": call.lease_reviewer, "until": iso(call.lease_until)}
    item = inspection_with_calls(conn, call.inspection_id)
    return {"call": call_dict(call), "inspection": item, "queue": queue_length(conn), "lease": lease}


def event_dict(row: Row[Any]) -> dict[str, Any]:
    """A ``drift_events`` row: the event as the alerts file has it, plus ``id`` and the ``inspection`` that raised it.
    ``frame`` is the 0-based index of the frame it was raised on (the alerts file's ``frame``): the live page and the
    report both show it as "raised at frame"; a drift event's ``since`` (the first frame flagged) stays in its words."""
    details = json.loads(row.details) if row.details else {}
    return {
        **details,
        "id": row.id,
        "event": row.event,
        "source": row.source,
        "frame": row.frame,
        "time": iso(row.time),
        "severity": row.severity,
        "score": row.score,
        "cause": row.cause,
        "reason": row.reason,
        "inspection": row.inspection_id,
    }


def events_since(conn: Connection, since: datetime, limit: int = MAX_EVENTS) -> list[dict[str, Any]]:
    """Drift and changeover events at or after ``since`` (naive UTC), oldest first: at most ``limit`` changeovers and at
    most ``limit`` other events, so a flood of changeovers never pushes a drift alert out of the answer."""
    order = (drift_events.c.time, drift_events.c.id)
    base = select(drift_events).where(drift_events.c.time >= since).order_by(*order).limit(limit)
    rows = conn.execute(base.where(drift_events.c.event != "changeover")).all()
    rows += conn.execute(base.where(drift_events.c.event == "changeover")).all()
    return [event_dict(r) for r in sorted(rows, key=lambda r: (r.time, r.id))]


def counts_since(conn: Connection, since: datetime, until: datetime | None = None) -> dict[str, Any]:
    """Frames, inspected boards, not-inspected frames (and per reason kind), calls, calls per (inspected) board, calls
    per class and yield (``passed``, ``pass_suspect``, ``failed`` frames, ``first_inspected`` boards, ``first_passed``,
    ``first_pass_yield``: ``core/board_yield.py``) in the minutes from ``since`` (naive UTC) on, up to ``until``
    (exclusive; None: no end)."""
    start = since.replace(second=0, microsecond=0)

    def window(minute: Any) -> list[Any]:
        return [minute >= start] + ([minute < until] if until is not None else [])

    columns = ("boards", "calls", "not_inspected", *YIELD_COLUMNS)
    sums = conn.execute(select(*(func.coalesce(func.sum(tallies.c[c]), 0) for c in columns)).where(*window(tallies.c.minute))).one()
    total = dict(zip(columns, (int(v) for v in sums)))
    kind, frames = refusal_tallies.c.reason_kind, func.sum(refusal_tallies.c.frames)
    per_kind = conn.execute(select(kind, frames).where(*window(refusal_tallies.c.minute)).group_by(kind)).all()
    name, n_calls = class_tallies.c.class_name, func.sum(class_tallies.c.calls)
    per_class = conn.execute(select(name, n_calls).where(*window(class_tallies.c.minute)).group_by(name)).all()
    boards, calls_total, first = total["boards"], total["calls"], total["first_boards"]
    return {
        "frames": boards + total["not_inspected"],
        "boards": boards,
        "not_inspected": total["not_inspected"],
        "reasons": {kind: int(n) for kind, n in sorted(per_kind, key=lambda kn: (-int(kn[1]), kn[0]))},
        "calls": calls_total,
        "calls_per_board": round(calls_total / boards, 3) if boards else None,
        "per_class": {name: int(n) for name, n in per_class},
        "passed": total["passed"],
        "pass_suspect": total["suspect"],
        "failed": total["failed"],
        "first_inspected": first,
        "first_passed": total["first_passed"],
        "first_pass_yield": round(total["first_passed"] / first, 4) if first else None,
    }


def drift_series(conn: Connection, points: int = DRIFT_POINTS) -> list[dict[str, Any]]:
    """The drift score of the newest ``points`` frames, oldest first: ``{"id", "frame", "time", "score", "drift"}``."""
    cols = (inspections.c.id, inspections.c.frame, inspections.c.time, inspections.c.score, inspections.c.drift)
    rows = conn.execute(select(*cols).order_by(inspections.c.id.desc()).limit(points)).all()
    return [
        {
            "id": r.id,
            "frame": r.frame,
            "time": iso(r.time),
            "score": None if r.score is None else round(float(r.score), 3),
            "drift": r.drift,
        }
        for r in reversed(rows)
    ]


def recent_events(conn: Connection, limit: int = ALERTS) -> list[dict[str, Any]]:
    """The newest ``limit`` drift, recovered and rebaseline events (changeovers are in the design runs), newest first."""
    stmt = select(drift_events).where(drift_events.c.event != "changeover").order_by(drift_events.c.id.desc()).limit(limit)
    return [event_dict(r) for r in conn.execute(stmt)]


def recent_refused(conn: Connection, limit: int = REFUSED) -> list[dict[str, Any]]:
    """The newest ``limit`` frames that were not inspected, newest first: ``{"id", "source", "frame", "name", "time",
    "reason", "reason_kind", "image"}`` (``image``: whether its picture is stored)."""
    cols = (inspections.c.id, inspections.c.source, inspections.c.frame, inspections.c.name, inspections.c.time)
    cols += (inspections.c.reason, inspections.c.reason_kind, inspections.c.image)
    stmt = select(*cols).where(inspections.c.verdict == "not_inspected").order_by(inspections.c.id.desc()).limit(limit)
    return [
        {"id": r.id, "source": r.source, "frame": r.frame, "name": r.name, "time": iso(r.time), "reason": r.reason}
        | {"reason_kind": r.reason_kind, "image": r.image is not None}
        for r in conn.execute(stmt)
    ]


def live_summary(conn: Connection, now: datetime, shift_start: datetime) -> dict[str, Any]:
    """Everything the live page shows: the newest frame with a picture (and its calls), the counts of the last hour
    and of the shift, the drift chart's points, the alert history (drift events), the design runs, the newest
    not-inspected frames and the review queue's length (``queue``: calls, ``queue_frames``: the frames they are on)."""
    live = get_meta(conn, "live")
    latest = inspection_with_calls(conn, int(live)) if live else None
    newest = conn.execute(select(inspections.c.id, inspections.c.time).order_by(inspections.c.id.desc()).limit(1)).first()
    return {
        "now": iso(now),
        "shift_start": iso(shift_start),
        "latest": latest,
        "newest": None if newest is None else {"id": newest.id, "time": iso(newest.time)},
        "hour": counts_since(conn, now - timedelta(hours=1)),
        "shift": counts_since(conn, shift_start),
        "drift": drift_series(conn),
        "alerts": recent_events(conn),
        "designs": recent_runs(conn),
        "not_inspected": recent_refused(conn),
        "queue": queue_length(conn),
        "queue_frames": queue_frames(conn),
    }
