"""The shift report: per shift, frames (inspected boards and not-inspected frames, these per reason kind), yield
(frames passed, passed as suspect and failed, boards inspected, passed on their first inspection and first-pass yield:
``core/board_yield.py``), calls, reviewed calls (confirmed, reclassified, false) and the false-call rate per class,
drawn misses and drift alerts; and for the whole window the drift alerts, the design runs and the not-inspected frames
(:func:`window_lists`).

Shifts start at whole hours of the station's local time (:data:`DEFAULT_SHIFTS`: 06:00, 14:00, 22:00); a shift is
counted from its start up to the next one. A call belongs to the shift of its frame's inspection, whenever it was
reviewed. A confirmed defect counts under the class the reviewer confirmed (the model's unless the reviewer chose
another); under the model's class it is then ``reclassified``. The false-call rate of a class is false calls / reviewed
calls (defect or false call) of the class the model called.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from defect_detector.core.safe_text import csv_cell
from defect_detector.station.db import iso, to_db_time
from defect_detector.station.designs import runs_between
from defect_detector.station.queries import counts_since, event_dict
from defect_detector.station.schema import calls, drift_events, inspections, verdicts

DEFAULT_SHIFTS = (6, 14, 22)
MAX_SHIFTS = 93
"""A report covers at most this many shifts (a month of three shifts a day)."""
LISTED = 200
"""Most drift alerts and not-inspected frames the report page lists (the newest; the counts cover every one)."""
YIELD_FIELDS = ("passed", "pass_suspect", "failed", "first_inspected", "first_passed", "first_pass_yield")
"""The report's yield columns (the ``all`` row of each shift; ``/api/live``'s counts name them alike)."""
CSV_FIELDS = (
    "shift_start",
    "shift_end",
    "class",
    "reason",
    "frames",
    "boards",
    "not_inspected",
    "calls",
    "confirmed",
    "reclassified",
    "false_calls",
    "false_call_rate",
    "missed",
    "drift_alerts",
    *YIELD_FIELDS,
)


def parse_shifts(text: str) -> tuple[int, ...]:
    """``"6,14,22"`` -> ``(6, 14, 22)``: the local hours shifts start at; ``ValueError`` for anything else."""
    try:
        hours = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError as exc:
        raise ValueError(f"--shifts must be comma-separated hours 0-23, got {text!r}") from exc
    if not hours or hours[0] < 0 or hours[-1] > 23:
        raise ValueError(f"--shifts must be comma-separated hours 0-23, got {text!r}")
    return tuple(hours)


def _boundaries(day: datetime, starts: tuple[int, ...]) -> list[datetime]:
    """The shift starts of the local calendar day of ``day`` (aware), as aware UTC times."""
    local = day.astimezone()
    return [datetime(local.year, local.month, local.day, h).astimezone().astimezone(timezone.utc) for h in starts]


def shift_start(now: datetime, starts: tuple[int, ...] = DEFAULT_SHIFTS) -> datetime:
    """The start (aware UTC) of the shift ``now`` (aware) falls in."""
    candidates = _boundaries(now - timedelta(days=1), starts) + _boundaries(now, starts)
    return max(c for c in candidates if c <= now)


def shift_windows(since: datetime, now: datetime, starts: tuple[int, ...] = DEFAULT_SHIFTS) -> list[tuple[datetime, datetime]]:
    """``(start, end)`` (aware UTC) of every shift from the one holding ``since`` to the one holding ``now``;
    ``ValueError`` when that is more than :data:`MAX_SHIFTS`."""
    start = shift_start(since, starts)
    out = []
    while start <= now:
        following = [c for d in (start, start + timedelta(days=1)) for c in _boundaries(d, starts) if c > start]
        end = min(following)
        out.append((start, end))
        if len(out) > MAX_SHIFTS:
            raise ValueError(f"since: at most {MAX_SHIFTS} shifts per report; give a later time")
        start = end
    return out


@dataclass
class ClassRow:
    """One class in one shift: the model's ``calls``; ``confirmed`` defects of this class (whatever the model called);
    ``reclassified`` calls of this class confirmed as another; ``false_calls``; ``reviewed`` calls of this class with a
    defect or false-call verdict; ``missed`` defects of this class reviewers drew."""

    calls: int = 0
    confirmed: int = 0
    reclassified: int = 0
    false_calls: int = 0
    reviewed: int = 0
    missed: int = 0

    @property
    def false_call_rate(self) -> float | None:
        return round(self.false_calls / self.reviewed, 4) if self.reviewed else None


@dataclass
class ShiftSummary:
    """One shift ``[start, end)`` (aware UTC): ``boards`` inspected, ``not_inspected`` frames (``reasons``: per reason
    kind), ``calls``, ``drift_alerts``, the per-class rows and ``yields`` (:data:`YIELD_FIELDS`)."""

    start: datetime
    end: datetime
    boards: int = 0
    not_inspected: int = 0
    calls: int = 0
    drift_alerts: int = 0
    classes: dict[str, ClassRow] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    yields: dict[str, Any] = field(default_factory=dict)

    @property
    def frames(self) -> int:
        return self.boards + self.not_inspected

    def total(self) -> ClassRow:
        rows = self.classes.values()
        out = ClassRow(self.calls)
        for name in ("confirmed", "reclassified", "false_calls", "reviewed", "missed"):
            setattr(out, name, sum(getattr(r, name) for r in rows))
        return out


def summarize(conn: Connection, start: datetime, end: datetime) -> ShiftSummary:
    """The summary of one shift ``[start, end)`` (aware UTC)."""
    s, e = to_db_time(start), to_db_time(end)
    out = ShiftSummary(start, end)
    counts = counts_since(conn, s, e)
    out.boards, out.calls, out.not_inspected, out.reasons = counts["boards"], counts["calls"], counts["not_inspected"], counts["reasons"]
    out.yields = {name: counts[name] for name in YIELD_FIELDS}
    for name, n in counts["per_class"].items():
        out.classes.setdefault(name, ClassRow()).calls = n
    _add_reviewed(conn, out, s, e)
    missed = (
        select(verdicts.c.class_name, func.count())
        .select_from(verdicts.join(inspections, verdicts.c.inspection_id == inspections.c.id))
        .where(verdicts.c.call_id.is_(None), inspections.c.time >= s, inspections.c.time < e)
        .group_by(verdicts.c.class_name)
    )
    for name, n in conn.execute(missed):
        out.classes.setdefault(name, ClassRow()).missed = int(n)
    out.drift_alerts = int(
        conn.execute(
            select(func.count())
            .select_from(drift_events)
            .where(drift_events.c.event == "drift", drift_events.c.time >= s, drift_events.c.time < e)
        ).scalar()
        or 0
    )
    return out


def _add_reviewed(conn: Connection, out: ShiftSummary, s: datetime, e: datetime) -> None:
    """Reviewed calls of the shift ``[s, e)`` (naive UTC): a defect under the class the reviewer confirmed."""
    reviewed = (
        select(calls.c.class_name, calls.c.verdict, calls.c.verdict_class, func.count())
        .where(calls.c.verdict.in_(("defect", "false_call")), calls.c.time >= s, calls.c.time < e)
        .group_by(calls.c.class_name, calls.c.verdict, calls.c.verdict_class)
    )
    for name, verdict, chosen, n in conn.execute(reviewed):
        row = out.classes.setdefault(name, ClassRow())
        row.reviewed += int(n)
        if verdict == "false_call":
            row.false_calls += int(n)
            continue
        target = chosen or name
        out.classes.setdefault(target, ClassRow()).confirmed += int(n)
        if target != name:
            row.reclassified += int(n)


def window_lists(conn: Connection, since: datetime, now: datetime, limit: int = LISTED) -> dict[str, list[dict[str, Any]]]:
    """What the report page lists for ``[since, now]`` (aware UTC): ``alerts`` the drift, recovered and rebaseline
    events, ``designs`` the design runs (changeovers folded), ``not_inspected`` the frames not inspected with their
    reason; each oldest first, at most the newest ``limit``."""
    s, e = to_db_time(since), to_db_time(now)
    events = (
        select(drift_events)
        .where(drift_events.c.event != "changeover", drift_events.c.time >= s, drift_events.c.time <= e)
        .order_by(drift_events.c.id.desc())
        .limit(limit)
    )
    cols = (inspections.c.id, inspections.c.source, inspections.c.frame, inspections.c.name, inspections.c.time, inspections.c.reason)
    refused = (
        select(*cols, inspections.c.reason_kind, inspections.c.image)
        .where(inspections.c.verdict == "not_inspected", inspections.c.time >= s, inspections.c.time <= e)
        .order_by(inspections.c.id.desc())
        .limit(limit)
    )
    frames = [
        {"id": r.id, "source": r.source, "frame": r.frame, "name": r.name, "time": iso(r.time), "reason": r.reason}
        | {"reason_kind": r.reason_kind, "image": r.image is not None}
        for r in conn.execute(refused)
    ]
    return {
        "alerts": [event_dict(r) for r in reversed(conn.execute(events).all())],
        "designs": runs_between(conn, s, e + timedelta(microseconds=1), limit),
        "not_inspected": frames[::-1],
    }


def report(conn: Connection, since: datetime, now: datetime, starts: tuple[int, ...] = DEFAULT_SHIFTS) -> list[ShiftSummary]:
    """One :class:`ShiftSummary` per shift from the one holding ``since`` to the current one (aware UTC times)."""
    return [summarize(conn, s, e) for s, e in shift_windows(since, now, starts)]


def _row(summary: ShiftSummary, name: str, row: ClassRow) -> dict[str, Any]:
    rate = row.false_call_rate
    return {
        "shift_start": iso(to_db_time(summary.start)),
        "shift_end": iso(to_db_time(summary.end)),
        "class": name,
        "reason": "",
        "frames": summary.frames,
        "boards": summary.boards,
        "not_inspected": summary.not_inspected,
        "calls": row.calls,
        "confirmed": row.confirmed,
        "reclassified": row.reclassified,
        "false_calls": row.false_calls,
        "false_call_rate": "" if rate is None else rate,
        "missed": row.missed,
        "drift_alerts": summary.drift_alerts,
        **(_yield_cells(summary) if name == "all" else {}),
    }


def _yield_cells(summary: ShiftSummary) -> dict[str, Any]:
    """The :data:`YIELD_FIELDS` of a shift's ``all`` row (``first_pass_yield`` empty before any board was inspected)."""
    rate = summary.yields.get("first_pass_yield")
    return {name: summary.yields.get(name, 0) for name in YIELD_FIELDS} | {"first_pass_yield": "" if rate is None else rate}


def _reason_row(summary: ShiftSummary, kind: str, frames: int) -> dict[str, Any]:
    return {
        "shift_start": iso(to_db_time(summary.start)),
        "shift_end": iso(to_db_time(summary.end)),
        "class": "not_inspected",
        "reason": kind,
        "not_inspected": frames,
    }


def report_rows(summaries: list[ShiftSummary]) -> list[dict[str, Any]]:
    """Flat rows (:data:`CSV_FIELDS`): per shift one ``all`` row (every frame: ``frames`` = ``boards`` inspected +
    ``not_inspected``; the shift's yield), one per class by name, then one ``not_inspected`` row per reason kind, most
    frames first."""
    rows = []
    for s in summaries:
        rows.append(_row(s, "all", s.total()))
        rows += [_row(s, name, s.classes[name]) for name in sorted(s.classes)]
        rows += [_reason_row(s, kind, n) for kind, n in s.reasons.items()]
    return rows


def report_csv(summaries: list[ShiftSummary]) -> str:
    """The report as CSV text with a header line (cells that a spreadsheet would run as a formula escaped)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n", restval="")
    writer.writeheader()
    writer.writerows({k: csv_cell(v) for k, v in row.items()} for row in report_rows(summaries))
    return buffer.getvalue()
