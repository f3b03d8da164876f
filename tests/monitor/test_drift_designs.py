"""Drift across board designs: the golden-template model read against each frame's golden image, the single-image
model on a stream whose design changes every 20 frames, warm-up and blank frames (issues 24 and 27)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from defect_detector.core.config import MonitorConfig
from defect_detector.data.synth import generate_board_pair
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, load_checkpoint
from defect_detector.monitor import faults
from defect_detector.monitor.baseline import Baseline, calibrate
from defect_detector.monitor.drift import DriftDetector
from defect_detector.monitor.golden import Golden
from defect_detector.monitor.hooks import ActivationMonitor
from defect_detector.screens.blank import blank_reason, image_levels

pytestmark = pytest.mark.usefixtures("one_thread")

SIZE = 256
RUN = 20  # frames per design


class _Stats:
    """Layer statistics of a bundled model (single-image, or golden-template with its golden image) on synthetic boards."""

    def __init__(self, weights: object) -> None:
        self.model = load_checkpoint(weights).model.eval()
        self.monitor = ActivationMonitor(self.model)
        self.channels = self.model.backbone.in_channels

    def __call__(self, frames: list[np.ndarray], goldens: list[np.ndarray] | None = None) -> np.ndarray:
        planes = [frames] if self.channels == 1 else [frames, goldens]
        x = torch.from_numpy(np.stack([np.stack(p) for p in zip(*planes)])).float().div(255.0)
        with torch.inference_mode():
            self.model(x)
        return self.monitor.stats().double().numpy()


def _designs(first: int, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``count`` board designs: a board with a defect or two (as sparse as on DeepPCB boards) and its golden image each
    (different layouts, seeded)."""
    return [generate_board_pair(SIZE, SIZE, np.random.default_rng(first + k), (1, 2))[:2] for k in range(count)]


def _noisy(image: np.ndarray, seed: int) -> np.ndarray:
    """The board as the camera delivers it frame after frame: a little sensor noise."""
    noise = np.random.default_rng(seed).normal(0.0, 2.0, image.shape)
    return np.clip(image + noise, 0, 255).astype(np.uint8)


def _baseline(stats: _Stats, relative: bool) -> Baseline:
    """Calibrated on 40 designs (none of them streamed) as the camera delivers them, with each simulated fault at its
    calibration strengths on 16 of them."""
    pairs = _designs(0, 40)
    boards, goldens = [_noisy(b, k) for k, (b, _) in enumerate(pairs)], [g for _, g in pairs]
    golden = [stats(goldens, goldens)] if relative else None
    baseline = calibrate(
        [stats(boards, goldens)], stats.monitor.layer_names, SIZE, golden=golden, image_levels=[image_levels(b) for b in boards]
    )
    kept = boards[:16]
    baseline.faults = {"clean": np.concatenate([stats(kept, goldens[:16])] * 3)}
    for name, strengths in faults.CALIBRATION_STRENGTHS.items():
        faulty = [stats([faults.apply_fault(b, name, s, i) for i, b in enumerate(kept)], goldens[:16]) for s in strengths]
        baseline.faults[name] = np.concatenate(faulty)
    return baseline


@pytest.fixture(scope="module", params=["single", "golden"])
def line(request: pytest.FixtureRequest) -> dict:
    """A model, its baseline, and a stream of 9 designs x 20 frames (each frame clean, and blurred: sigma 2)."""
    relative = request.param == "golden"
    stats = _Stats(DEFAULT_REFERENCE_WEIGHTS if relative else None)
    baseline = _baseline(stats, relative)
    designs = _designs(1000, 9)
    frames = [_noisy(designs[t // RUN][0], t) for t in range(len(designs) * RUN)]
    goldens = [designs[t // RUN][1] for t in range(len(frames))]
    blurred = [faults.defocus(f) for f in frames]
    golden = [Golden(f"design{t // RUN}.png", s) for t, s in enumerate(stats(goldens, goldens))] if relative else None
    stats.monitor.detach()
    return {
        "baseline": baseline,
        "relative": relative,
        "frames": frames,
        "goldens": goldens,
        "blurred": blurred,
        "golden": golden,
        "stats": stats,
    }


def _feed(line: dict, detector: DriftDetector, which: list[np.ndarray], start: int = 0) -> list:
    stats = line["stats"]
    stats.monitor.attach()
    values = stats(which, line["goldens"])
    stats.monitor.detach()
    events = []
    for t in range(start, len(which)):
        golden = line["golden"][t] if line["relative"] else None
        events += detector.update(values[t], t, "line1", golden, image_levels(which[t]))
    return events


def test_a_stream_that_changes_design_every_20_frames_raises_no_alert(line: dict) -> None:
    detector = DriftDetector(line["baseline"], MonitorConfig())
    events = _feed(line, detector, line["frames"])
    assert not [e for e in events if e.event == "drift"], [e.reason for e in events if e.event == "drift"]
    changeovers = [e for e in events if e.event == "changeover"]
    if line["relative"]:  # a new golden image every 20 frames: logged, never an alarm
        assert [e.frame for e in changeovers] == list(range(RUN, len(line["frames"]), RUN))
        assert changeovers[0].to_dict() == {
            "event": "changeover",
            "frame": RUN,
            "source": "line1",
            "time": changeovers[0].time,
            "reference": "design1.png",
            "previous": "design0.png",
            "reason": changeovers[0].reason,
        }
    else:
        assert not changeovers
    assert detector.state == "normal"


def test_a_blur_across_three_design_changes_stays_alerted(line: dict) -> None:
    onset, end = 50, 50 + 4 * RUN  # frames 50-129: across the design changes at 60, 80, 100 and 120
    frames = [b if onset <= t < end else f for t, (f, b) in enumerate(zip(line["frames"], line["blurred"]))]
    detector = DriftDetector(line["baseline"], MonitorConfig())
    events = [e for e in _feed(line, detector, frames) if e.event in ("drift", "recovered")]
    assert events and events[0].event == "drift" and onset <= events[0].frame < onset + 30, [(e.event, e.frame) for e in events]
    assert events[0].cause == "defocus" and "lens" in events[0].reason
    assert not [e for e in events if e.event == "recovered" and e.frame < end]  # no design change clears it
    assert [e.event for e in events if e.frame >= end] == ["recovered"], [(e.event, e.frame) for e in events]


def test_the_golden_image_is_required_by_a_relative_baseline(line: dict) -> None:
    detector = DriftDetector(line["baseline"])
    values = np.ones((len(line["baseline"].layer_names), 2))
    if line["relative"]:
        with pytest.raises(ValueError, match="golden image"):
            detector.update(values, 0)
    else:
        assert detector.update(values, 0) == []


def test_warming_up_until_the_window_is_full_even_when_every_frame_is_blurred(line: dict) -> None:
    cfg = MonitorConfig()
    detector = DriftDetector(line["baseline"], cfg)
    states = []
    stats = line["stats"]
    stats.monitor.attach()
    values = stats(line["blurred"][: cfg.window + cfg.debounce], line["goldens"][: cfg.window + cfg.debounce])
    stats.monitor.detach()
    for t, v in enumerate(values):
        detector.update(v, t, "line1", line["golden"][t] if line["relative"] else None)
        states.append(detector.state)
    assert states[: cfg.window - 1] == ["warming_up"] * (cfg.window - 1)  # not "normal": nothing to judge yet
    assert states[-1] in ("warning", "critical")  # alerted as soon as the window is full and debounced


@pytest.mark.parametrize("make", [np.zeros_like, lambda b: (b * 0.1).astype(np.uint8), lambda b: np.full_like(b, 255)])
def test_a_blank_frame_alerts_at_once_whatever_the_statistics_say(line: dict, make) -> None:
    detector = DriftDetector(line["baseline"], MonitorConfig())
    _feed(line, detector, line["frames"][:40])
    assert detector.state == "normal"
    blank = make(line["frames"][40])
    reason = blank_reason(blank)
    assert reason is not None
    events = detector.blank(40, "line1", reason)
    assert [(e.event, e.severity, e.cause, e.since) for e in events] == [("drift", "critical", "blank", 40)]
    assert events[0].reason.startswith("blank frame: ") and detector.state == "critical"
    assert detector.blank(41, "line1", reason) == []  # held, not raised again
    after = _feed(line, detector, line["frames"][:80], start=42)
    assert [e.event for e in after if e.event in ("drift", "recovered")] == ["recovered"]  # the camera is back
