import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
import torch

from defect_detector.core.config import MonitorConfig
from defect_detector.core.constants import DEFAULT_LAYERS
from defect_detector.data.synth import generate_board
from defect_detector.model.checkpoint import load_checkpoint
from defect_detector.monitor import faults
from defect_detector.monitor.baseline import Baseline, BaselineError, calibrate
from defect_detector.monitor.drift import DriftDetector
from defect_detector.monitor.explain import ACTIONS, HINTS
from defect_detector.monitor.hooks import ActivationMonitor

pytestmark = pytest.mark.usefixtures("one_thread")

SIZE = 256
LAYERS = [f"layer{i}" for i in range(4)]
DESIGN_KEYS = ["event", "frame", "source", "time", "severity", "score", "layers", "reason"]


def _model() -> torch.nn.Module:
    """The bundled DeepPCB model: the detector's defaults are meant for a trained model's statistics."""
    return load_checkpoint().model.eval()


def _boards(seeds: range) -> list[np.ndarray]:
    return [generate_board(SIZE, SIZE, np.random.default_rng(seed))[0] for seed in seeds]


def _stats(model: torch.nn.Module, monitor: ActivationMonitor, frames: list[np.ndarray]) -> np.ndarray:
    x = torch.from_numpy(np.stack(frames)).unsqueeze(1).float().div(255.0)
    with torch.inference_mode():
        model(x)
    return monitor.stats().double().numpy()


@pytest.fixture(scope="module")
def streams() -> dict:
    """Baseline (with simulated-fault statistics) from 32 synthetic boards; stats of 16 other boards, clean and
    with each fault."""
    model = _model()
    monitor = ActivationMonitor(model)
    boards = _boards(range(32))
    baseline = calibrate(_stats(model, monitor, boards), monitor.layer_names, imgsz=SIZE)
    strengths = faults.CALIBRATION_STRENGTHS
    baseline.faults = {"clean": np.concatenate([_stats(model, monitor, boards)] * 3)}
    for name, levels in strengths.items():
        faulty = [_stats(model, monitor, [faults.apply_fault(b, name, s, i) for i, b in enumerate(boards)]) for s in levels]
        baseline.faults[name] = np.concatenate(faulty)
    fresh = _boards(range(1000, 1016))
    clean = _stats(model, monitor, fresh)
    faulted = {
        "defocus": _stats(model, monitor, [faults.defocus(b) for b in fresh]),
        "contrast_loss": _stats(model, monitor, [faults.contrast_loss(b) for b in fresh]),
        "lighting_drop": _stats(model, monitor, [faults.lighting_drop(b) for b in fresh]),
        "salt_and_pepper": _stats(model, monitor, [faults.salt_and_pepper(b, rng=np.random.default_rng(i)) for i, b in enumerate(fresh)]),
    }
    monitor.detach()
    return {"baseline": baseline, "clean": clean, "faulted": faulted}


def _stream(detector: DriftDetector, clean: np.ndarray, faulted: np.ndarray | None, onset: int, length: int, start: int = 0) -> list:
    events = []
    for t in range(start, start + length):
        source = faulted if faulted is not None and t >= onset else clean
        events += detector.update(source[t % len(clean)], t, "synthetic")
    return events


def _synthetic_baseline(n: int = 200, seed: int = 0) -> tuple[Baseline, np.ndarray]:
    rng = np.random.default_rng(seed)
    frames = rng.normal([[1.0, 0.5]] * len(LAYERS), 0.1, size=(n, len(LAYERS), 2))
    return calibrate([frames], LAYERS, space="linear"), frames


def test_baseline_json_round_trip(tmp_path: Path, streams: dict) -> None:
    baseline = streams["baseline"]
    assert baseline.layer_names == list(DEFAULT_LAYERS) and baseline.count == 32 and baseline.imgsz == SIZE
    path = tmp_path / "sub" / "baseline.json"
    baseline.save(path)
    raw = json.loads(path.read_text())
    assert raw["statistics"] == ["mean", "std"] and len(raw["quantiles"][0][0]) == len(raw["quantile_levels"])
    loaded = Baseline.load(path)
    assert loaded.to_dict() == baseline.to_dict()
    for key in ("mean", "std", "quantiles", "min", "max"):
        np.testing.assert_array_equal(getattr(loaded, key), getattr(baseline, key))
    assert Baseline.from_dict(json.loads(json.dumps(baseline.to_dict()))).to_dict() == baseline.to_dict()
    assert set(loaded.faults) == {"clean", "defocus", "contrast_loss", "lighting_drop", "salt_and_pepper"}
    assert {v.shape for v in loaded.faults.values()} == {(3 * 32, len(DEFAULT_LAYERS), 2)}  # 3 strengths of each fault


def test_version_3_baselines_still_load_without_fault_statistics() -> None:
    raw = _synthetic_baseline()[0].to_dict()
    raw["version"] = 3
    raw.pop("faults")
    assert Baseline.from_dict(raw).faults is None


def test_calibrate_matches_numpy() -> None:
    baseline, frames = _synthetic_baseline()
    np.testing.assert_allclose(baseline.mean, frames.mean(0))
    np.testing.assert_allclose(baseline.std, frames.std(0, ddof=1))
    np.testing.assert_allclose(baseline.min, frames.min(0))
    np.testing.assert_allclose(baseline.max, frames.max(0))
    np.testing.assert_allclose(baseline.quantiles[..., 2], np.median(frames, 0))
    assert baseline.quantiles.shape == (len(LAYERS), 2, len(baseline.quantile_levels))


def test_calibrate_skips_nonfinite_frames_and_needs_two() -> None:
    frames = np.ones((3, len(LAYERS), 2))
    frames[1, 0, 0] = np.nan
    assert calibrate([torch.from_numpy(frames)], LAYERS).count == 2
    with pytest.raises(ValueError, match="at least 2"):
        calibrate([frames[:1]], LAYERS)
    with pytest.raises(ValueError, match="shape"):
        calibrate([np.ones((3, len(LAYERS) + 1, 2))], LAYERS)


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda raw: raw.pop("mean"), "missing keys"),
        (lambda raw: raw.update(version=99), "version"),
        (lambda raw: raw.update(version=1, covariance=None) or raw.pop("covariance"), "version 1 .*calibrate` again"),
        (lambda raw: raw.pop("covariance"), r"missing keys \['covariance'\]"),
        (lambda raw: raw.update(covariance=np.eye(2 * len(LAYERS)).tolist() + [[0.0] * 8]), "covariance: must have shape"),
        (lambda raw: raw.update(mean=raw["mean"][:-1]), "mean: must have shape"),
        (lambda raw: raw["std"][0].__setitem__(0, "x"), "std"),
        (lambda raw: raw.update(layer_names=["a", "a", "b", "c"]), "layer_names"),
        (lambda raw: raw.update(count=1), "count"),
        (lambda raw: raw.update(count="40"), r"bad\.json: count: must be an integer, got '40'$"),
        (lambda raw: raw.update(sample_every=2), r"bad\.json: sample_every: unknown key \(known: count, covariance, "),
        (lambda raw: raw.update(quantile_levels=[0.1, "x"]), r"quantile_levels\[1\]: must be a number, got 'x'$"),
        (lambda raw: raw.update(faults={"defocus": [[[0.0, 0.0]] * 4] * 3}), "faults: must map 'clean'"),
        (
            lambda raw: raw.update(faults={"clean": [[[0.0, 0.0]] * 4] * 3, "defocus": [[[0.0, 0.0]] * 3] * 3}),
            "faults.defocus: must have shape",
        ),
    ],
)
def test_malformed_baseline_is_rejected(tmp_path: Path, mutate, match: str) -> None:
    raw = _synthetic_baseline()[0].to_dict()
    mutate(raw)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(BaselineError, match=match) as info:
        Baseline.load(path)
    assert "\n" not in str(info.value)


def test_missing_or_unparsable_baseline_file(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="not found"):
        Baseline.load(tmp_path / "nope.json")
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(BaselineError, match="malformed baseline JSON"):
        Baseline.load(tmp_path / "broken.json")
    with pytest.raises(BaselineError, match="must be a JSON object"):
        Baseline.from_dict([1, 2])


def test_clean_boards_never_alert_and_set_the_line_reference_once(streams: dict) -> None:
    cfg = MonitorConfig()
    detector = DriftDetector(streams["baseline"], cfg)
    events = _stream(detector, streams["clean"], None, 0, 1000)
    assert [e.event for e in events] == ["rebaseline"]  # the line reference, set once and logged
    assert events[0].frame == cfg.window - 1 + cfg.reference - 1 and "line reference set" in events[0].reason
    assert detector.line_reference is not None and detector.state == "normal"
    assert detector.score < cfg.z_warn


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ("defocus", "image blurred (fine detail"),
        ("contrast_loss", "the model's activation contrast (std) fell"),
        ("lighting_drop", "the model's"),
        ("salt_and_pepper", "speckle noise in the image"),
    ],
)
def test_each_fault_alerts_within_30_frames_and_names_its_cause(streams: dict, fault: str, words: str) -> None:
    cfg = MonitorConfig()
    for onset in (300, 307):
        detector = DriftDetector(streams["baseline"], cfg)
        events = _stream(detector, streams["clean"], streams["faulted"][fault], onset, onset + 30)
        drift = [e for e in events if e.event == "drift"]
        assert drift, f"{fault}: no alert within 30 frames of onset {onset}"
        first = drift[0]
        assert onset <= first.frame < onset + 30
        assert first.severity in ("warning", "critical") and first.score >= cfg.z_warn
        assert first.layers and set(first.layers) <= set(DEFAULT_LAYERS)
        assert first.reason.startswith(words), first.reason
        assert first.cause == fault and f": {HINTS[fault]} {ACTIONS[fault]}; " in first.reason, first.reason
        assert first.since is not None and onset <= first.since <= first.frame  # the first frame flagged
        assert f"inspection results since frame {first.since} are suspect (first frame flagged)" in first.reason
        line = first.to_dict()
        assert list(line)[: len(DESIGN_KEYS)] == DESIGN_KEYS
        assert line["statistic"] in ("mean", "std") and set(line["observed"]) == set(line["baseline"])
        assert line["cause"] == fault
        assert datetime.fromisoformat(line["time"].replace("Z", "+00:00")).tzinfo is not None
        json.dumps(line)


@pytest.mark.parametrize("fault", ["defocus", "lighting_drop"])
def test_the_per_frame_drift_field_agrees_with_the_alerts_since(streams: dict, fault: str) -> None:
    """Issue 33: "results since frame 61 are suspect" while frames 60-67 read "normal". Every frame from ``since`` on
    is flagged, none before it; the alert also says where the window shows the change beginning."""
    detector = DriftDetector(streams["baseline"], MonitorConfig())
    clean, faulted, onset = streams["clean"], streams["faulted"][fault], 300
    flags, events = {}, []
    for t in range(onset + 40):
        events += detector.update((faulted if t >= onset else clean)[t % len(clean)], t, "synthetic")
        flags[t] = detector.flag
    alert = next(e for e in events if e.event == "drift")
    assert all(flags[t] in ("normal", "warming_up") for t in range(alert.since))
    assert all(flags[t] in ("warning", "critical") for t in range(alert.since, onset + 40))
    assert alert.since > onset and "the change shows from about frame " in alert.reason


@pytest.mark.parametrize("fault", ["defocus", "lighting_drop", "salt_and_pepper"])
def test_a_persistent_fault_stays_alerted_until_it_ends(streams: dict, fault: str) -> None:
    cfg = MonitorConfig()
    detector = DriftDetector(streams["baseline"], cfg)
    clean, faulted = streams["clean"], streams["faulted"][fault]
    onset, end = 300, 500
    events = [e for e in _stream(detector, clean, faulted, onset, end) if e.event != "rebaseline"]
    assert events and events[0].event == "drift" and events[0].frame < onset + 30
    assert all(e.event == "drift" for e in events), [(e.event, e.frame) for e in events]  # no recovered while faulty
    assert detector.state in ("warning", "critical")
    after = _stream(detector, clean, None, 10**9, 100, start=end)
    assert [e.event for e in after] == ["recovered"] and after[0].frame < end + 30


def test_fault_from_the_first_frame_alerts_on_the_baseline_test_and_never_becomes_normal(streams: dict) -> None:
    detector = DriftDetector(streams["baseline"], MonitorConfig())
    events = _stream(detector, streams["clean"], streams["faulted"]["lighting_drop"], 0, 600)
    assert [e.event for e in events] == ["drift"]  # no line reference is ever taken from faulty frames
    assert detector.line_reference is None and detector.state != "normal"


def test_rebaseline_is_deliberate_and_logged(streams: dict, caplog: pytest.LogCaptureFixture) -> None:
    cfg = MonitorConfig(reference=32)
    detector = DriftDetector(streams["baseline"], cfg)
    clean, faulted = streams["clean"], streams["faulted"]["defocus"]
    _stream(detector, clean, faulted, 100, 150)
    assert detector.state != "normal"
    with caplog.at_level("INFO", logger="defect_detector.monitor"):
        event = detector.rebaseline(150, "cam0", "new board design")
    assert event.event == "rebaseline" and "new board design" in event.reason and detector.line_reference is None
    assert any("line reference cleared" in r.getMessage() for r in caplog.records)
    assert detector.state == "normal"


def test_debounce_needs_consecutive_frames() -> None:
    baseline, frames = _synthetic_baseline()
    cfg = MonitorConfig(window=1, reference=0, z_warn=3.0, z_alert=20.0, baseline_margin=0.0, debounce=3, recover=2)
    detector = DriftDetector(baseline, cfg)
    normal = baseline.mean
    high = baseline.mean + 5 * baseline.std
    frame = 0
    for _ in range(4):
        for stats in (high, high, normal):
            assert detector.update(stats, frame) == []
            frame += 1
    assert detector.update(high, frame) == [] and detector.update(high, frame + 1) == []
    events = detector.update(high, frame + 2)
    assert [e.event for e in events] == ["drift"] and events[0].frame == frame + 2 and events[0].severity == "warning"
    assert "rose" in events[0].reason and events[0].cause is None  # a baseline without fault statistics names no cause


def test_escalation_and_recovery() -> None:
    baseline, _ = _synthetic_baseline()
    cfg = MonitorConfig(window=2, reference=0, z_warn=3.0, z_alert=6.0, baseline_margin=0.0, debounce=2, recover=3)
    detector = DriftDetector(baseline, cfg)
    warn = baseline.mean - np.array([0.0, 4.0]) * baseline.std
    crit = baseline.mean - np.array([0.0, 8.0]) * baseline.std
    sequence = [baseline.mean] * 4 + [warn] * 5 + [crit] * 5 + [baseline.mean] * 8
    events = []
    for t, stats in enumerate(sequence):
        events += detector.update(stats, t, "cam0")
    assert [(e.event, e.severity) for e in events] == [("drift", "warning"), ("drift", "critical"), ("recovered", "info")]
    assert "contrast (std) fell" in events[0].reason
    recovered = events[-1]
    assert recovered.frame == 14 + 1 + 3 - 1 and recovered.source == "cam0"
    assert detector.state == "normal"


def test_recovery_needs_the_clean_level_not_just_below_the_alert_threshold() -> None:
    baseline, _ = _synthetic_baseline()
    cfg = MonitorConfig(window=1, reference=0, z_warn=4.0, z_alert=20.0, z_clear=2.0, baseline_margin=0.0, debounce=1, recover=2)
    detector = DriftDetector(baseline, cfg)
    off = baseline.mean.copy()
    off[0, 1] -= 5.0 * baseline.std[0, 1]
    near = baseline.mean.copy()
    near[0, 1] -= 3.0 * baseline.std[0, 1]  # under z_warn, above z_clear: still faulty
    events = [e.event for t, x in enumerate([off] + [near] * 20) for e in detector.update(x, t)]
    assert events == ["drift"] and detector.state == "warning"
    assert [e.event for t in range(3) for e in detector.update(baseline.mean, 30 + t)] == ["recovered"]


def test_batches_equal_single_frames_and_bad_shapes(streams: dict) -> None:
    clean, faulted = streams["clean"], streams["faulted"]["lighting_drop"]
    frames = np.concatenate([np.tile(clean, (10, 1, 1)), faulted, faulted])
    single = DriftDetector(streams["baseline"])
    one_by_one = [e.to_dict() for t, f in enumerate(frames) for e in single.update(torch.from_numpy(f), t)]
    batched = DriftDetector(streams["baseline"])
    in_batches = [e.to_dict() for start in range(0, len(frames), 16) for e in batched.update(frames[start : start + 16], start)]
    for a, b in zip(one_by_one, in_batches, strict=True):
        assert {k: v for k, v in a.items() if k != "time"} == {k: v for k, v in b.items() if k != "time"}
    assert one_by_one
    with pytest.raises(ValueError, match="shape"):
        single.update(np.ones((3, 2)), 0)


def test_nonfinite_frames_are_skipped() -> None:
    baseline, frames = _synthetic_baseline()
    detector = DriftDetector(baseline, MonitorConfig(window=4, reference=8))
    bad = np.full((len(LAYERS), 2), np.nan)
    for t in range(40):
        assert [e.event for e in detector.update(bad if t % 5 == 0 else frames[t], t)] in ([], ["rebaseline"])
    assert detector.nonfinite_frames == 8


def test_monitor_config_validation() -> None:
    from defect_detector.core.config import ConfigError

    with pytest.raises(ConfigError, match=r"^monitor\.z_warn: must be > 0 and <= monitor\.z_alert, got 5\.0$"):
        MonitorConfig(z_warn=5.0, z_alert=2.0)
    with pytest.raises(ConfigError, match=r"^monitor\.reference: must be >= 0, got -1$"):
        MonitorConfig(reference=-1)
    with pytest.raises(ConfigError, match="monitor.z_clear"):
        MonitorConfig(z_warn=4.0, z_clear=4.5)
    with pytest.raises(ConfigError, match=r"^monitor\.window: must be an integer, got '4'$"):
        MonitorConfig(window="4")
    assert MonitorConfig().model_copy(update={"reference": 0}).reference == 0


def test_small_baseline_ignores_correlations(caplog: pytest.LogCaptureFixture) -> None:
    baseline, _ = _synthetic_baseline(n=10)  # 10 frames for 8 statistics: too few for a covariance
    cfg = MonitorConfig(window=1, reference=0, baseline_margin=0.0, z_warn=2.0, z_alert=4.0)
    with caplog.at_level("WARNING", logger="defect_detector.monitor"):
        detector = DriftDetector(baseline, cfg)
    assert any("correlations are ignored" in r.getMessage() for r in caplog.records)
    shifted = baseline.mean.copy()
    shifted[0, 1] += 3.0 * baseline.std[0, 1]  # one statistic 3 spreads off: a diagonal R scores exactly 3
    detector.update(shifted, 0)
    assert detector.score == pytest.approx(3.0, rel=1e-3)


def test_a_baselines_pixel_levels_are_shares_per_bin_of_a_width_that_divides_256() -> None:
    """The single-image hidden-area screen indexes ``pixel_levels`` by grey level // (256 / bins): a baseline whose bins
    do not divide 256 is refused naming the key, and the shares round-trip."""
    stats = np.random.default_rng(0).random((40, 2, 2)) + 0.5
    counts = np.arange(32, dtype=np.float64)
    baseline = calibrate(stats, ["a", "b"], pixel_levels=counts)
    assert np.allclose(baseline.pixel_levels, counts / counts.sum())
    raw = baseline.to_dict()
    assert np.allclose(Baseline.from_dict(raw).pixel_levels, baseline.pixel_levels)
    with pytest.raises(BaselineError, match="pixel_levels: must be a list of 8, 16, 32"):
        Baseline.from_dict({**raw, "pixel_levels": [0.1] * 10})
