"""Reviewers' verdicts: on a call (``defect``, optionally with another class; ``false_call``; ``skip``) and on a defect
the model missed (a box the reviewer drew, xyxy in frame pixels). Each is kept with who gave it and when; a call's
latest verdict takes it out of the review queue.

Two reviewers at once:

- :func:`lease_next` hands the oldest waiting call to one reviewer for :data:`LEASE_S` seconds; while the lease holds,
  the next reviewer gets the next call. The claim is one conditional ``UPDATE``, so two requests never both win it.
- A call's ``version`` counts its verdicts. :func:`record_verdict` stores a verdict only when the version the reviewer
  saw is still the call's (a first verdict may omit it: it expects 0); otherwise :class:`Conflict`, and nothing is
  written. The check is part of the ``UPDATE`` itself, so of two reviewers posting at once exactly one wins.
- A lease is kept: while a call is leased to one reviewer, a verdict by another is a :class:`Conflict` (issue 44: the
  lease was advisory, and a second reviewer could post the first verdict on a leased call).

A whole board at once (:func:`record_board_verdict`, issue 58: 1,088 calls were queued one at a time): every call of
one inspection still waiting for review gets one verdict, ``defect`` (each under its called class) or ``false_call``,
in one conditional ``UPDATE``; calls another reviewer holds a lease on are left to them (and counted).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select, true
from sqlalchemy.engine import Connection

from defect_detector.station.db import iso, to_db_time
from defect_detector.station.schema import CALL_VERDICTS, calls, inspections, verdicts

LEASE_S = 120.0
"""Seconds a call handed out by ``/api/review/next`` is held for its reviewer."""
_CLAIM_TRIES = 16


class NotFound(LookupError):
    """No call or inspection of that id."""


class Conflict(RuntimeError):
    """The call changed since the reviewer saw it (another verdict came first): one line saying what it holds now."""


def lease_next(conn: Connection, reviewer: str | None, now: datetime, lease_s: float = LEASE_S) -> Any | None:
    """The ``calls`` row of the call to show ``reviewer`` next, leased to them until ``now + lease_s``: the call they
    already hold, else the oldest waiting call nobody holds. Without a ``reviewer`` nothing is leased (the oldest free
    call is only looked at). None when no call is free."""
    when = to_db_time(now)
    until = when + timedelta(seconds=lease_s)
    free = or_(calls.c.lease_until.is_(None), calls.c.lease_until <= when)
    waiting = calls.c.pending == true()
    if reviewer is None:
        return conn.execute(select(calls).where(waiting, free).order_by(calls.c.id).limit(1)).first()
    mine = or_(free, calls.c.lease_reviewer == reviewer)
    held = (
        select(calls.c.id)
        .where(waiting, calls.c.lease_reviewer == reviewer, calls.c.lease_until > when)
        .order_by(calls.c.id)
        .limit(1)
        .scalar_subquery()
    )
    oldest_free = select(calls.c.id).where(waiting, free).order_by(calls.c.id).limit(1).scalar_subquery()
    for target in (held, oldest_free):
        for _ in range(_CLAIM_TRIES):  # a claim lost to another reviewer: try the next free call
            claim = (
                calls.update()
                .where(calls.c.id == target, waiting, mine)
                .values(lease_reviewer=reviewer, lease_until=until)
                .returning(calls.c.id)
            )
            claimed = conn.execute(claim).scalar()
            if claimed is not None:
                return conn.execute(select(calls).where(calls.c.id == claimed)).first()
            if conn.execute(select(target)).scalar() is None:
                break
    return None


def record_verdict(
    conn: Connection,
    call_id: int,
    verdict: str,
    class_name: str | None,
    reviewer: str,
    now: datetime,
    version: int | None = None,
) -> dict[str, Any]:
    """Store ``verdict`` on call ``call_id`` by ``reviewer`` at ``now``; a ``defect`` keeps the call's class unless
    ``class_name`` corrects it (other verdicts carry no class). ``version``: the call's version the reviewer saw (None:
    this is the call's first verdict). :class:`NotFound` for an unknown call, :class:`Conflict` when the call's version
    is another, or the call is leased to another reviewer until after ``now`` (nothing written). Releases the lease."""
    if verdict not in CALL_VERDICTS:
        raise ValueError(f"verdict must be one of {', '.join(CALL_VERDICTS)}, got {verdict!r}")
    call = conn.execute(select(calls.c.id, calls.c.inspection_id, calls.c.class_name).where(calls.c.id == call_id)).first()
    if call is None:
        raise NotFound(f"no call {call_id}")
    expected = 0 if version is None else version
    confirmed = (class_name or call.class_name) if verdict == "defect" else None
    when = to_db_time(now)
    free = or_(calls.c.lease_until.is_(None), calls.c.lease_until <= when, calls.c.lease_reviewer == reviewer)
    done = conn.execute(
        calls.update()
        .where(calls.c.id == call.id, calls.c.version == expected, free)
        .values(pending=False, verdict=verdict, verdict_class=confirmed, version=calls.c.version + 1, lease_reviewer=None, lease_until=None)
    ).rowcount
    if not done:
        raise Conflict(_conflict(conn, call.id, version, when))
    conn.execute(
        verdicts.insert().values(
            call_id=call.id, inspection_id=call.inspection_id, verdict=verdict, class_name=confirmed, reviewer=reviewer, time=when
        )
    )
    return {
        "call": call.id,
        "inspection": call.inspection_id,
        "verdict": verdict,
        "class": confirmed,
        "reviewer": reviewer,
        "time": iso(when),
        "version": expected + 1,
    }


BOARD_VERDICTS = ("defect", "false_call")
"""The verdicts a whole board may be given at once (a skip is a call's own)."""


def record_board_verdict(conn: Connection, inspection_id: int, verdict: str, reviewer: str, now: datetime) -> dict[str, Any]:
    """Give every call of inspection ``inspection_id`` still waiting for review ``verdict`` (:data:`BOARD_VERDICTS`; a
    ``defect`` under each call's called class) by ``reviewer`` at ``now``, except the calls another reviewer holds a
    lease on. Returns ``{"inspection", "verdict", "reviewer", "time", "calls": [{"call", "class", "version"}], "left"}``
    (``left``: waiting calls leased to others). :class:`NotFound` for an unknown inspection, :class:`Conflict` when no
    call of it is waiting, or every waiting one is leased to another reviewer (nothing written)."""
    if verdict not in BOARD_VERDICTS:
        raise ValueError(f"verdict must be one of {', '.join(BOARD_VERDICTS)}, got {verdict!r}")
    if conn.execute(select(inspections.c.id).where(inspections.c.id == inspection_id)).first() is None:
        raise NotFound(f"no inspection {inspection_id}")
    when = to_db_time(now)
    free = or_(calls.c.lease_until.is_(None), calls.c.lease_until <= when, calls.c.lease_reviewer == reviewer)
    mine = (calls.c.inspection_id == inspection_id, calls.c.pending == true())
    confirmed = calls.c.class_name if verdict == "defect" else None
    done = conn.execute(
        calls.update()
        .where(*mine, free)
        .values(pending=False, verdict=verdict, verdict_class=confirmed, version=calls.c.version + 1, lease_reviewer=None, lease_until=None)
        .returning(calls.c.id, calls.c.verdict_class, calls.c.version)
    ).all()
    left = int(conn.execute(select(func.count()).select_from(calls).where(*mine)).scalar() or 0)
    if not done:
        if left:
            raise Conflict(f"inspection {inspection_id}: its {left} waiting call(s) are leased to other reviewers; try again later")
        raise Conflict(f"inspection {inspection_id} has no call waiting for review")
    rows = [{"call_id": r.id, "inspection_id": inspection_id, "verdict": verdict, "class_name": r.verdict_class} for r in done]
    conn.execute(verdicts.insert(), [r | {"reviewer": reviewer, "time": when} for r in rows])
    return {
        "inspection": inspection_id,
        "verdict": verdict,
        "reviewer": reviewer,
        "time": iso(when),
        "calls": [{"call": r.id, "class": r.verdict_class, "version": r.version} for r in sorted(done, key=lambda r: r.id)],
        "left": left,
    }


def _conflict(conn: Connection, call_id: int, version: int | None, when: datetime) -> str:
    """The one line of a :class:`Conflict`: who holds the call's lease, or what the call holds now, and what to send."""
    columns = (calls.c.verdict, calls.c.version, calls.c.lease_reviewer, calls.c.lease_until)
    now = conn.execute(select(*columns).where(calls.c.id == call_id)).first()
    if now is not None and now.version == (version or 0) and now.lease_until is not None and now.lease_until > when:
        return f"call {call_id} is leased to {now.lease_reviewer} until {iso(now.lease_until)}: take the next one from /api/review/next"
    last = conn.execute(
        select(verdicts.c.reviewer).where(verdicts.c.call_id == call_id).order_by(verdicts.c.id.desc()).limit(1)
    ).scalar()
    held = f"{now.verdict} by {last}" if now is not None and last else (now.verdict if now is not None else "none")
    current = now.version if now is not None else 0
    if version is None:
        return f"call {call_id} already has a verdict ({held}, version {current}): reload it and send \"version\": {current} to change it"
    return f"call {call_id} is at version {current} ({held}), not {version}: another verdict came first; reload it"


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


def _rejected(*columns: Any) -> Any:
    """``columns`` of the calls reviewers rejected (latest verdict ``false_call``) that carry a place in their golden
    image's pixels (schema 7), joined to their inspections."""
    found = select(*columns).select_from(calls.join(inspections, calls.c.inspection_id == inspections.c.id))
    return found.where(calls.c.verdict == "false_call", calls.c.golden_x.is_not(None), inspections.c.golden_key.is_not(None))


def false_calls_by_design(conn: Connection) -> dict[str, list[tuple[float, float, float]]]:
    """The calls reviewers rejected (latest verdict ``false_call``), per golden-image key: ``(x, y, score)`` with
    ``x, y`` the call's box centre in its golden image's pixels (``calls.golden_x`` / ``golden_y``, schema 7). Calls
    of frames without a golden image, or recorded before schema 7, carry no centre and are left out."""
    rows = conn.execute(_rejected(inspections.c.golden_key, calls.c.golden_x, calls.c.golden_y, calls.c.score).order_by(calls.c.id))
    out: dict[str, list[tuple[float, float, float]]] = {}
    for key, x, y, score in rows:
        out.setdefault(str(key), []).append((float(x), float(y), float(score)))
    return out


def rejections_by_design(conn: Connection) -> list[dict[str, Any]]:
    """Per design (golden-image key), the calls reviewers rejected that ``teach --station`` can apply (with a place in
    golden-image pixels): ``{"design": its golden image's name (the latest recorded), "key", "rejected": count}``,
    most rejected first."""
    counted = _rejected(inspections.c.golden_key, func.max(inspections.c.reference), func.count())
    rows = conn.execute(counted.group_by(inspections.c.golden_key)).all()
    found = [{"design": name, "key": str(key), "rejected": int(n)} for key, name, n in rows]
    return sorted(found, key=lambda d: (-d["rejected"], d["key"]))
