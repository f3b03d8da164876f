"""Reviewers' verdicts: on a call (``defect``, optionally with another class; ``false_call``; ``skip``) and on a defect
the model missed (a box the reviewer drew, xyxy in frame pixels). Each is kept with who gave it and when; a call's
latest verdict takes it out of the review queue."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from defect_detector.station.db import iso, to_db_time
from defect_detector.station.schema import CALL_VERDICTS, calls, verdicts


class NotFound(LookupError):
    """No call or inspection of that id."""


def record_verdict(conn: Connection, call_id: int, verdict: str, class_name: str | None, reviewer: str, now: datetime) -> dict[str, Any]:
    """Store ``verdict`` on call ``call_id`` by ``reviewer`` at ``now``; a ``defect`` keeps the call's class unless
    ``class_name`` corrects it (other verdicts carry no class). :class:`NotFound` for an unknown call."""
    if verdict not in CALL_VERDICTS:
        raise ValueError(f"verdict must be one of {', '.join(CALL_VERDICTS)}, got {verdict!r}")
    call = conn.execute(select(calls.c.id, calls.c.inspection_id, calls.c.class_name).where(calls.c.id == call_id)).first()
    if call is None:
        raise NotFound(f"no call {call_id}")
    confirmed = (class_name or call.class_name) if verdict == "defect" else None
    when = to_db_time(now)
    conn.execute(
        verdicts.insert().values(
            call_id=call.id, inspection_id=call.inspection_id, verdict=verdict, class_name=confirmed, reviewer=reviewer, time=when
        )
    )
    conn.execute(calls.update().where(calls.c.id == call.id).values(pending=False, verdict=verdict, verdict_class=confirmed))
    return {
        "call": call.id,
        "inspection": call.inspection_id,
        "verdict": verdict,
        "class": confirmed,
        "reviewer": reviewer,
        "time": iso(when),
    }


def record_missed(
    conn: Connection, inspection_id: int, box: Sequence[float], class_name: str, reviewer: str, now: datetime
) -> dict[str, Any]:
    """Store a defect the model missed on inspection ``inspection_id``: ``box`` xyxy in its frame pixels (checked by the
    caller), ``class_name``, ``reviewer``, ``now``. Returns the stored verdict with its id."""
    x1, y1, x2, y2 = (float(v) for v in box)
    when = to_db_time(now)
    result = conn.execute(
        verdicts.insert().values(
            call_id=None,
            inspection_id=inspection_id,
            verdict="defect",
            class_name=class_name,
            x1=x1,
            y1=y1,
            x2=x2,
            y2=y2,
            reviewer=reviewer,
            time=when,
        )
    )
    return {
        "id": int(result.inserted_primary_key[0]),
        "inspection": inspection_id,
        "class": class_name,
        "box": [x1, y1, x2, y2],
        "reviewer": reviewer,
        "time": iso(when),
    }


def missed_of(conn: Connection, inspection_id: int) -> list[dict[str, Any]]:
    """The missed defects drawn on an inspection: ``{"id", "class", "box", "reviewer", "time"}``, oldest first."""
    stmt = select(verdicts).where(verdicts.c.inspection_id == inspection_id, verdicts.c.call_id.is_(None)).order_by(verdicts.c.id)
    return [
        {"id": r.id, "class": r.class_name, "box": [r.x1, r.y1, r.x2, r.y2], "reviewer": r.reviewer, "time": iso(r.time)}
        for r in conn.execute(stmt)
    ]
