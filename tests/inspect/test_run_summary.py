"""What a run counts (``inspect/run_summary.py``): verdicts, calls and drift events, held per run, never per frame."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from defect_detector.core.types import Detections
from defect_detector.inspect.capture import SourceStats
from defect_detector.inspect.frame import Frame
from defect_detector.inspect.prepare import Prepared
from defect_detector.inspect.record import Inspection
from defect_detector.inspect.run_summary import Tally
from defect_detector.monitor.drift import DriftEvent


def _record(index: int, events: list[DriftEvent]) -> Inspection:
    empty = torch.zeros(0)
    timings = {"preprocess": 1.0, "model": 2.0, "postprocess": 0.5}
    detections = Detections(empty.reshape(0, 4), empty, empty.long(), [], torch.zeros(4, 2), timings, None)
    frame = Frame(index, np.zeros((8, 8), np.uint8), "line", f"b{index}.png", 0.0)
    return Inspection.finish(Prepared(frame), detections, events=events)


def _event(event: str, frame: int) -> DriftEvent:
    return DriftEvent(event=event, frame=frame, source="line", severity="info", score=0.0, layers=[], reason=f"{event} {frame}")


def test_a_changeover_every_frame_is_counted_not_kept() -> None:
    """Issue 58 item 11: the tally kept every drift event of the run for the summary, so a line whose every board has
    its own golden image (a changeover every frame) held one more event a frame. Changeovers are counted; the alerts
    (drift, recovered, rebaseline) are kept, as few as they are."""
    tally = Tally()
    for index in range(3000):
        tally.add(_record(index, [_event("changeover", index)] + ([_event("drift", index)] if index == 1500 else [])))
    assert len(tally.events) == 1 and tally.changeovers == 3000
    frames = SimpleNamespace(kind="folder", stats=SourceStats())
    inspector = SimpleNamespace(runtime=SimpleNamespace(path=Path("w.pt"), device="cpu"), monitoring=True)
    summary = tally.summary("line", frames, inspector, {}, False)
    assert summary["changeovers"] == 3000 and [e["event"] for e in summary["drift_events"]] == ["drift"]
