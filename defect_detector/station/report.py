"""The shift report: per shift, boards, calls, reviewed calls (confirmed, false) and the false-call rate per class,
drawn misses and drift alerts.

Shifts start at whole hours of the station's local time (:data:`DEFAULT_SHIFTS`: 06:00, 14:00, 22:00); a shift is
counted from its start up to the next one. A call belongs to the shift of its frame's inspection, whenever it was
reviewed. The false-call rate of a class is false calls / reviewed calls (defect or false call) of the class the model
called.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.engine import Connection

from defect_detector.station.db import iso, to_db_time
from defect_detector.station.schema import calls, class_tallies, drift_events, inspections, tallies, verdicts

DEFAULT_SHIFTS = (6, 14, 22)
MAX_SHIFTS = 93
"""A report covers at most this many shifts (a month of three shifts a day)."""
CSV_FIELDS = (
    "shift_start",
    "shift_end",
    "class",
    "boards",
    "calls",
    "confirmed",
    "false_calls",
    "false_call_rate",
    "missed",
    "drift_alerts",
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
    calls: int = 0
    confirmed: int = 0
    false_calls: int = 0
    missed: int = 0

    @property
    def false_call_rate(self) -> float | None:
        reviewed = self.confirmed + self.false_calls
        return round(self.false_calls / reviewed, 4) if reviewed else None


@dataclass
class ShiftSummary:
    start: datetime
    end: datetime
    boards: int = 0
    calls: int = 0
    drift_alerts: int = 0
    classes: dict[str, ClassRow] = field(default_factory=dict)

    def total(self) -> ClassRow:
        rows = self.classes.values()
        return ClassRow(self.calls, sum(r.confirmed for r in rows), sum(r.false_calls for r in rows), sum(r.missed for r in rows))


def summarize(conn: Connection, start: datetime, end: datetime) -> ShiftSummary:
    """The summary of one shift ``[start, end)`` (aware UTC)."""
    s, e = to_db_time(start), to_db_time(end)
    out = ShiftSummary(start, end)
    boards, total = conn.execute(
        select(func.coalesce(func.sum(tallies.c.boards), 0), func.coalesce(func.sum(tallies.c.calls), 0)).where(
            tallies.c.minute >= s, tallies.c.minute < e
        )
    ).one()
    out.boards, out.calls = int(boards), int(total)
    window = and_(class_tallies.c.minute >= s, class_tallies.c.minute < e)
    for name, n in conn.execute(
        select(class_tallies.c.class_name, func.sum(class_tallies.c.calls)).where(window).group_by(class_tallies.c.class_name)
    ):
        out.classes.setdefault(name, ClassRow()).calls = int(n)
    reviewed = (
        select(calls.c.class_name, calls.c.verdict, func.count())
        .where(calls.c.verdict.in_(("defect", "false_call")), calls.c.time >= s, calls.c.time < e)
        .group_by(calls.c.class_name, calls.c.verdict)
    )
    for name, verdict, n in conn.execute(reviewed):
        row = out.classes.setdefault(name, ClassRow())
        if verdict == "defect":
            row.confirmed = int(n)
        else:
            row.false_calls = int(n)
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


def report(conn: Connection, since: datetime, now: datetime, starts: tuple[int, ...] = DEFAULT_SHIFTS) -> list[ShiftSummary]:
    """One :class:`ShiftSummary` per shift from the one holding ``since`` to the current one (aware UTC times)."""
    return [summarize(conn, s, e) for s, e in shift_windows(since, now, starts)]


def _row(summary: ShiftSummary, name: str, row: ClassRow) -> dict[str, Any]:
    rate = row.false_call_rate
    return {
        "shift_start": iso(to_db_time(summary.start)),
        "shift_end": iso(to_db_time(summary.end)),
        "class": name,
        "boards": summary.boards,
        "calls": row.calls,
        "confirmed": row.confirmed,
        "false_calls": row.false_calls,
        "false_call_rate": "" if rate is None else rate,
        "missed": row.missed,
        "drift_alerts": summary.drift_alerts,
    }


def report_rows(summaries: list[ShiftSummary]) -> list[dict[str, Any]]:
    """Flat rows (:data:`CSV_FIELDS`): per shift one ``all`` row, then one per class, by name."""
    rows = []
    for s in summaries:
        rows.append(_row(s, "all", s.total()))
        rows += [_row(s, name, s.classes[name]) for name in sorted(s.classes)]
    return rows


def report_csv(summaries: list[ShiftSummary]) -> str:
    """The report as CSV text with a header line."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(report_rows(summaries))
    return buffer.getvalue()
