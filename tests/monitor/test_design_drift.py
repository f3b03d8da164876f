"""A design's own drift level learnt from its good boards (monitor/design_drift.py, issue 56 item 2): a design that
does not cancel out against its golden image raises no alert on its own good boards, a camera fault on it still does,
and a level read with another baseline is not used."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from defect_detector.core.config import MonitorConfig
from defect_detector.core.taught import TaughtEntry, entry_problem
from defect_detector.monitor.baseline import Baseline, calibrate
from defect_detector.monitor.design_drift import DesignDrift
from defect_detector.monitor.drift import DriftDetector
from defect_detector.monitor.golden import Golden

LAYERS = ["backbone.stem", "backbone.stage1", "backbone.stage2"]
SHIFT = 0.1
"""How far (log) a photographed design's frames sit from its golden image's statistics on a clean camera: five
single-frame spreads per statistic, beyond the critical threshold together."""


def _frames(rng: np.random.Generator, golden: np.ndarray, count: int, shift: float = 0.0) -> np.ndarray:
    """``count`` frames' statistics ``[count, L, 2]``: the golden image's, times the camera's noise, shifted by ``shift`` (log)."""
    return golden * np.exp(shift + rng.normal(0.0, 0.01, (count, *golden.shape)))


@pytest.fixture(scope="module")
def line() -> dict:
    """A relative baseline calibrated on designs that cancel out, and a design that does not (its golden image's
    statistics and its good boards')."""
    rng = np.random.default_rng(0)
    goldens = rng.uniform(0.5, 2.0, (200, len(LAYERS), 2))
    frames = np.stack([_frames(rng, g, 1)[0] for g in goldens])
    baseline = calibrate([frames], LAYERS, golden=[goldens], space="log")
    baseline.model["weights_sha256"] = "a" * 64
    golden = rng.uniform(0.5, 2.0, (len(LAYERS), 2))
    return {"baseline": baseline, "golden": golden, "good": _frames(rng, golden, 8, SHIFT), "rng": rng}


def _alerts(baseline: Baseline, golden: Golden, frames: np.ndarray) -> list[str]:
    detector = DriftDetector(baseline, MonitorConfig(reference=0))
    return [e.severity for e in detector.update(frames, 0, "line", golden=golden) if e.event == "drift"]


def test_a_design_that_does_not_cancel_out_alerts_on_its_own_good_boards_without_its_level(line: dict) -> None:
    frames = _frames(line["rng"], line["golden"], 40, SHIFT)
    assert _alerts(line["baseline"], Golden("design", line["golden"]), frames) == ["critical"]


def test_its_own_level_quietens_its_good_boards_and_a_camera_fault_still_alerts(line: dict) -> None:
    baseline, golden = line["baseline"], line["golden"]
    level = DesignDrift.learn(baseline, list(line["good"]), [golden] * len(line["good"]))
    assert level.boards == 8 and level.weights == "a" * 64
    own = Golden("design", golden, own=level)
    clean = _frames(line["rng"], golden, 40, SHIFT)
    assert _alerts(baseline, own, clean) == []
    faulty = np.concatenate([clean[:20], _frames(line["rng"], golden, 20, SHIFT - 0.1)])  # contrast lost from frame 20
    assert "critical" in _alerts(baseline, own, faulty)


def test_a_level_read_with_another_baseline_is_not_used_and_said_once(line: dict, caplog: pytest.LogCaptureFixture) -> None:
    baseline, golden = line["baseline"], line["golden"]
    level = DesignDrift.learn(baseline, list(line["good"]), [golden] * len(line["good"]))
    other = DesignDrift(level.mean, level.layers, level.space, "b" * 64, level.boards)  # the weights were fine-tuned since
    assert level.fits(baseline) and not other.fits(baseline)
    with caplog.at_level(logging.WARNING, logger="defect_detector.monitor"):
        alerts = _alerts(baseline, Golden("design", golden, name="board.png", own=other), _frames(line["rng"], golden, 40, SHIFT))
    assert alerts == ["critical"]
    assert sum("board.png's own level was learnt with another baseline" in r.getMessage() for r in caplog.records) == 1


def test_the_level_is_stored_in_a_taught_entry_and_read_back(line: dict) -> None:
    baseline, golden = line["baseline"], line["golden"]
    level = DesignDrift.learn(baseline, list(line["good"]), [golden] * len(line["good"]))
    entry = {"name": "board.png", "key": "k"} | level.to_entry()
    TaughtEntry.model_validate(entry)
    back = DesignDrift.from_entry(entry)
    assert back is not None and np.allclose(back.mean, level.mean) and back.layers == level.layers and back.boards == 8
    short = {"name": "board.png", "key": "k", "drift": entry["drift"] | {"mean": entry["drift"]["mean"][:2]}}
    assert entry_problem(short) == "drift"
