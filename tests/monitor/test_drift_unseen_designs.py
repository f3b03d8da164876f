"""Drift on a board design the calibration never saw (issue 35, item 5): a relative (golden-template) baseline whose
clean frames tie statistics together almost exactly must not turn a small loosening of that tie into an alert, while a
camera fault on the same design still alerts. Layer statistics are synthetic, built the way the bundled golden-template
model's behave on DeepPCB (two factors, what is on the board and how much it differs from its golden image, move every
statistic together; each statistic's own noise is tiny)."""

from __future__ import annotations

import numpy as np
import pytest

import defect_detector.monitor.drift as drift
from defect_detector.core.config import MonitorConfig
from defect_detector.core.constants import DEFAULT_LAYERS
from defect_detector.monitor.baseline import Baseline, calibrate
from defect_detector.monitor.drift import EIGEN_FLOOR, DriftDetector
from defect_detector.monitor.golden import Golden

LAYERS = list(DEFAULT_LAYERS)
ENTRIES = 2 * len(LAYERS)
FRAMES = 300
GOLDEN = np.full((len(LAYERS), 2), 0.5)  # every golden image's own statistics (mean, std per layer)


def _frames(count: int, seed: int, shift: np.ndarray | None = None) -> np.ndarray:
    """``[count, L, 2]`` frame statistics: the golden image's, times exp(log-ratio); the log-ratio moves along two
    shared factors (spread 0.05) with a little noise of its own (0.002), plus ``shift`` ``[L, 2]`` (a new design's offset,
    or a fault) when given."""
    rng = np.random.default_rng(seed)
    loadings = np.random.default_rng(99).normal(size=(2, ENTRIES))
    ratio = 0.05 * rng.normal(size=(count, 2)) @ loadings + 0.002 * rng.normal(size=(count, ENTRIES))
    ratio = ratio.reshape(count, len(LAYERS), 2) + (0.0 if shift is None else shift)
    return GOLDEN * np.exp(ratio)


def _baseline(relative: bool) -> Baseline:
    frames = _frames(FRAMES, 0)
    golden = [np.broadcast_to(GOLDEN, frames.shape)] if relative else None
    return calibrate([frames], LAYERS, golden=golden, space="log")


def _alerts(baseline: Baseline, stats: np.ndarray) -> list[str]:
    detector = DriftDetector(baseline, MonitorConfig())
    golden = Golden("design", GOLDEN, None) if baseline.relative else None
    events = [e for t, frame in enumerate(stats) for e in detector.update(frame, t, golden=golden)]
    return [e.severity for e in events if e.event == "drift"]


def _unseen_design(baseline: Baseline) -> np.ndarray:
    """A design's offset: one statistic (stage 3's spread) off by 0.6 of its single-frame spread, against the tie."""
    shift = np.zeros((len(LAYERS), 2))
    shift[3, 1] = 0.6 * float(np.sqrt(baseline.covariance[7, 7]))
    return shift


def test_a_relative_baselines_tied_statistics_gain_at_most_the_floor() -> None:
    baseline = _baseline(relative=True)
    detector = DriftDetector(baseline, MonitorConfig())
    covariance = np.linalg.inv(detector._precision)
    assert np.linalg.eigvalsh(covariance).min() >= EIGEN_FLOOR - 1e-9
    spread = np.sqrt(np.diag(baseline.covariance))
    measured = np.linalg.eigvalsh(baseline.covariance / np.outer(spread, spread))
    assert measured.min() < 0.01  # the calibration frames do tie statistics together: without the floor, a x10 gain


def test_a_stream_switching_to_an_unseen_design_raises_no_alert_while_a_blur_on_it_does(monkeypatch: pytest.MonkeyPatch) -> None:
    baseline = _baseline(relative=True)
    seen, unseen = _frames(100, 1), _frames(200, 2, _unseen_design(baseline))
    assert _alerts(baseline, np.concatenate([seen, unseen])) == []
    blur = _unseen_design(baseline)
    blur[1:, 1] -= 0.2  # defocus: the spread of the deeper layers falls by 20% against its golden image
    assert _alerts(baseline, np.concatenate([seen, unseen[:50], _frames(100, 3, blur)]))
    monkeypatch.setattr(drift, "EIGEN_FLOOR", 0.0)  # as before the floor: the new design alone was an alert
    assert _alerts(baseline, np.concatenate([seen, unseen]))


def test_a_single_image_baseline_keeps_its_small_eigenvalues() -> None:
    """There the board design moves the statistics along the large eigenvalues, and a fault shows in the small ones:
    the same offset against the tie is an alert."""
    baseline = _baseline(relative=False)
    assert _alerts(baseline, np.concatenate([_frames(100, 1), _frames(200, 2, _unseen_design(baseline))]))
