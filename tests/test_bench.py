from pathlib import Path

from small_checkpoint import write_small_checkpoint

from defect_detector.deploy.bench import bench_tta, measure_interleaved, paired_ratio
from defect_detector.model.checkpoint import load_checkpoint
from defect_detector.model.tta import TTA_MODES


def test_paired_ratio_cancels_drift_between_rounds() -> None:
    reference = [10.0, 20.0, 40.0, 80.0, 160.0]  # the machine slows down round after round
    times = [11.0, 22.0, 44.0, 88.0, 176.0]  # always 10% slower than the reference in the same round
    assert abs(paired_ratio(times, reference) - 1.1) < 1e-12
    assert sorted(times)[2] / sorted(reference)[2] == 1.1 and max(times) / max(reference) == 1.1
    assert abs(paired_ratio([1.0, 3.0, 2.0], [2.0, 1.0, 2.0]) - 1.0) < 1e-12  # median of 0.5, 3, 1


def test_measure_interleaved_reports_every_call() -> None:
    calls: list[str] = []
    raw: dict[str, list[float]] = {}
    summary = measure_interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, iters=4, warmup=1, raw=raw)
    assert calls == ["a", "b"] + ["a", "b"] * 4  # warm-up, then one call of each per round
    assert set(raw) == {"a", "b"} and all(len(v) == 4 and min(v) >= 0 for v in raw.values())
    assert summary["a"]["n"] == 4 and summary["a"]["min_ms"] <= summary["a"]["median_ms"] <= summary["a"]["p90_ms"]


def test_bench_tta_times_every_mode_against_one_pass(tmp_path: Path, one_thread: None) -> None:
    loaded = load_checkpoint(write_small_checkpoint(tmp_path / "small.pt", imgsz=64))
    timings = bench_tta(loaded, imgsz=64, iters=2)
    assert list(timings) == list(TTA_MODES)
    assert timings["none"]["paired_vs_none"] == 1.0
    assert all(t["median_ms"] > 0 and t["paired_vs_none"] > 0 for t in timings.values())
