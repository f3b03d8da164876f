"""`defect-detector demo` end to end on the bundled samples: outputs written, scores sane, the dirty lens alerted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from defect_detector.cli.demo import CLEAN_FRAMES, FAULT_FRAMES, run_demo

pytestmark = pytest.mark.usefixtures("one_thread")


def test_demo_runs_offline_and_alerts_the_dirty_lens(tmp_path: Path) -> None:
    result = run_demo(tmp_path, threads=1)
    assert result["predict"]["boards"]["processed"] == 8 and result["predict"]["frames"]["processed"] == 2
    assert result["samples_metrics"]["map50"] > 0.7 and result["golden_metrics"]["map50"] > result["samples_metrics"]["map50"]
    for name in ("boards.json", "frames.json", "boards_golden.json", "alerts.jsonl"):
        assert (tmp_path / name).is_file(), name
    events = [json.loads(line) for line in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    assert events == result["events"]
    drift = [e for e in events if e["event"] == "drift"]
    assert drift and CLEAN_FRAMES <= drift[0]["frame"] < CLEAN_FRAMES + 30 and drift[0]["cause"] == "defocus"
    recovered = [e for e in events if e["event"] == "recovered"]
    end = CLEAN_FRAMES + FAULT_FRAMES
    assert len(recovered) == 1 and end <= recovered[0]["frame"] < end + 30  # held while the lens was dirty
