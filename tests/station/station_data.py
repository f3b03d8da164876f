"""Synthetic frames for the station tests and the benchmark (not a test module): boards with defects, their golden
images, calls on (and off) the defects, and a drift episode."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np

from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.data.synth import generate_board_pair
from defect_detector.station.records import CallRecord, FrameRecord
from defect_detector.station.report import shift_start
from defect_detector.station.schema import YIELD_COLUMNS


def board_record(index: int, height: int = 240, width: int = 320, seed: int = 0, calls: int | None = None, **fields: Any) -> FrameRecord:
    """Frame ``index``: a synthetic board with defects; the model calls its first defects at scores 0.9, 0.7, ... and
    adds one low-scoring call (0.1) off them; ``calls`` limits how many defects are called. ``fields``: the
    monitor's side of the record, ``drift`` (default ``"normal"``), ``score`` (0.5), ``events`` (none) and ``time`` (now)."""
    image, template, boxes, labels = generate_board_pair(height, width, np.random.default_rng([seed, index]), (2, 4))
    n = len(boxes) if calls is None else min(calls, len(boxes))
    found = [CallRecord(DEEPPCB_CLASSES[int(labels[i])], round(0.9 - 0.2 * i, 2), tuple(float(v) for v in boxes[i])) for i in range(n)]
    found.append(CallRecord(DEEPPCB_CLASSES[0], 0.1, (5.0, 5.0, 25.0, 25.0)))
    monitor = {"drift": "normal", "score": 0.5, "events": (), **fields}
    monitor["time"] = monitor.get("time") or datetime.now(timezone.utc)
    return FrameRecord(
        source="line 1",
        frame=index,
        name=f"board_{index:04d}.png",
        model="small.pt",
        verdict="fail" if n else "pass",
        reference="golden.png",
        calls=tuple(found),
        image=image,
        reference_image=template,
        **monitor,
    )


def drift_event(frame: int, event: str = "drift", severity: str = "warning", time: datetime | None = None) -> dict[str, Any]:
    """A drift event dict as ``DriftEvent.to_dict()`` gives it."""
    return {
        "event": event,
        "frame": frame,
        "source": "line 1",
        "time": (time or datetime.now(timezone.utc)).isoformat(),
        "severity": severity,
        "score": 7.5 if event == "drift" else 1.2,
        "layers": ["backbone.stem"],
        "reason": "the first layers' std dropped (blur)" if event == "drift" else "back within the calibrated spread",
        "statistic": "std",
        "cause": "defocus" if event == "drift" else None,
        "observed": {},
        "baseline": {},
        "z": {},
    }


def one_shift(span_s: float, ago_s: float) -> tuple[datetime, Callable[[], datetime]]:
    """``(start, clock)``: frames from ``start`` over ``span_s`` seconds, ``ago_s`` seconds before now, moved later
    where needed so that they and the station's clock (pinned one second after them) lie in one shift. Recorded
    across 06:00, 14:00 or 22:00, the frames fell in the previous shift and "this shift" counted none of them."""
    start = datetime.now(timezone.utc) - timedelta(seconds=ago_s)
    end = start + timedelta(seconds=span_s + 1)
    start = max(start, shift_start(end) + timedelta(seconds=1))
    pinned = start + timedelta(seconds=span_s + 1)
    return start, lambda: pinned


def frames_with_drift(n: int, start: datetime | None = None, step_s: float = 1.0, **kwargs: Any) -> list[FrameRecord]:
    """``n`` boards one ``step_s`` apart; frames n/2 .. 3n/4 drift (a warning raised at n/2, recovered at 3n/4)."""
    start = start or datetime.now(timezone.utc) - timedelta(seconds=n * step_s)
    out = []
    for i in range(n):
        when = start + timedelta(seconds=i * step_s)
        raised = n // 2 <= i < 3 * n // 4
        events: tuple[dict[str, Any], ...] = ()
        if i == n // 2:
            events = (drift_event(i, time=when),)
        elif i == 3 * n // 4:
            events = (drift_event(i, "recovered", "info", when),)
        score = (6.0 + (i % 3)) if raised else 0.5 + 0.1 * (i % 5)
        out.append(board_record(i, drift="warning" if raised else "normal", score=score, events=events, time=when, **kwargs))
    return out


def back_to_schema_5(conn: Any) -> None:
    """Drop what schemas 6 and 7 added (yield and traceability; calls' golden-image centres), so a test can migrate a
    database recorded before them."""
    from sqlalchemy import text

    for column in ("golden_x", "golden_y"):
        conn.execute(text(f"ALTER TABLE calls DROP COLUMN {column}"))

    conn.execute(text("DROP INDEX ix_inspections_serial"))
    for column in ("serial", "lot", "work_order", "conf", "first_inspection", "boards"):
        conn.execute(text(f"ALTER TABLE inspections DROP COLUMN {column}"))
    conn.execute(text("ALTER TABLE calls DROP COLUMN board"))
    for column in YIELD_COLUMNS:
        conn.execute(text(f"ALTER TABLE tallies DROP COLUMN {column}"))
