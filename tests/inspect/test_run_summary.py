"""What a run counts (``inspect/run_summary.py``): verdicts, calls and drift events, held per run, never per frame."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from defect_detector.core.frame import Frame
from defect_detector.core.frame_record import Prepared
from defect_detector.core.types import Detections
from defect_detector.inspect.capture import SourceStats
from defect_detector.inspect.record import Inspection
from defect_detector.inspect.run_summary import Tally, summary_line
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


def test_the_summary_names_each_model_and_threshold_that_decided_frames_and_counts_tolerated_calls() -> None:
    """Issue 56 item 4: after a design was routed to other bundled weights, the run still named the first weights and
    their point. The summary counts the inspected frames per (weights, threshold) and the calls a tolerance dropped."""
    tally = Tally()
    decided = [("deeppcb_ref.pt", 0.4), ("photo_ref.pt", 0.21), ("photo_ref.pt", 0.21), ("photo_ref.pt", 0.107)]
    for index, (weights, conf) in enumerate(decided):
        record = _record(index, [])
        counted = dataclasses.replace(record.detections, tolerated=2, off_area=index)
        tally.add(dataclasses.replace(record, weights=weights, conf=conf, detections=counted))
    frames = SimpleNamespace(kind="folder", stats=SourceStats())
    inspector = SimpleNamespace(runtime=SimpleNamespace(path=Path("deeppcb_ref.pt"), device="cpu"), monitoring=False)
    summary = tally.summary("line", frames, inspector, {}, False)
    assert summary["points_used"] == [
        {"weights": "deeppcb_ref.pt", "conf": 0.4, "frames": 1},
        {"weights": "photo_ref.pt", "conf": 0.107, "frames": 1},
        {"weights": "photo_ref.pt", "conf": 0.21, "frames": 2},
    ]
    assert summary["calls_tolerated"] == 8 and summary["calls_off_area"] == 6
    line = summary_line(summary)
    assert "weights deeppcb_ref.pt x1 at score >= 0.4, photo_ref.pt x1 at score >= 0.107, photo_ref.pt x2 at score >= 0.21" in line
    assert "(8 more at places its design tolerates) (6 more off the boards' inspection areas)" in line
