import types
from pathlib import Path

import pytest
import torch
from small_checkpoint import write_small_checkpoint

from benchmarks import timing
from benchmarks.bench import run_bench
from benchmarks.bench_stages import bench_registration, bench_tta
from benchmarks.timing import measure_interleaved, paired_ratio
from defect_detector.inspect.runtime import Runtime
from defect_detector.model.checkpoint import load_checkpoint
from defect_detector.model.tta import TTA_MODES, orientations


def test_paired_ratio_cancels_drift_between_rounds() -> None:
    reference = [10.0, 12.0, 9.0, 11.0, 10.0]
    per_round = [1.1, 1.3, 1.1, 1.0, 1.2]  # the candidate's true slowdown in each round; median 1.1
    times = [r * q for r, q in zip(reference, per_round)]
    assert paired_ratio(times, reference) == pytest.approx(1.1)
    slowdown = [1.0, 8.0, 1.0, 8.0, 8.0]  # the machine is 8x slower in some rounds, for both candidates alike
    drifted = paired_ratio([t * s for t, s in zip(times, slowdown)], [r * s for r, s in zip(reference, slowdown)])
    assert drifted == pytest.approx(1.1)  # per-round ratios: the drift cancels exactly
    assert paired_ratio([1.0, 3.0, 2.0], [2.0, 1.0, 2.0]) == pytest.approx(1.0)  # median of 0.5, 3, 1
    assert paired_ratio([4.0, 4.0], [2.0, 1.0]) == pytest.approx(3.0)  # even count: mean of the middle two (2, 4)


def test_measure_interleaved_reports_every_call() -> None:
    calls: list[str] = []
    raw: dict[str, list[float]] = {}
    summary = measure_interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, iters=4, warmup=1, raw=raw)
    assert calls == ["a", "b"] + ["a", "b"] * 4  # warm-up, then one call of each per round
    assert set(raw) == {"a", "b"} and all(len(v) == 4 and min(v) >= 0 for v in raw.values())
    assert summary["a"]["n"] == 4 and summary["a"]["min_ms"] <= summary["a"]["median_ms"] <= summary["a"]["p90_ms"]


def test_bench_tta_times_each_mode_with_its_own_passes(tmp_path: Path, one_thread: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # A fake clock that advances 1 ms per model pass: each mode must take exactly its number of orientations,
    # which holds only if bench_tta really switches the runtime's mode per candidate and times them apart.
    clock = [0.0]
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    real_infer = Runtime.infer

    def infer(self: Runtime, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        clock[0] += 1e-3 * len(orientations(self.tta))
        return real_infer(self, batch)

    monkeypatch.setattr(Runtime, "infer", infer)
    loaded = load_checkpoint(write_small_checkpoint(tmp_path / "small.pt", imgsz=64))
    timings = bench_tta(loaded, imgsz=64, iters=3)
    assert list(timings) == list(TTA_MODES)
    for mode, passes in {"none": 1, "flip2": 2, "flip4": 4, "d8": 8}.items():
        assert timings[mode]["median_ms"] == pytest.approx(passes) and timings[mode]["n"] == 3
        assert timings[mode]["paired_vs_none"] == pytest.approx(passes)


def test_bench_registration_against_the_model(tmp_path: Path, one_thread: None) -> None:
    loaded = load_checkpoint(write_small_checkpoint(tmp_path / "ref.pt", imgsz=128, in_channels=2))
    result = bench_registration(loaded, imgsz=128, iters=3)
    assert result["frame"] == "128x128" and result["model_channels"] == 2 and result["torch_threads"] == 1
    assert result["ok"] is True and result["score"] > 0.5  # the bench pair registers
    assert result["reused_fraction"] == 1.0  # the reuse candidate really reuses the cached transform
    for name in ("model", "register_full", "register_fixed", "register_reuse"):
        assert result[name]["n"] == 3 and result[name]["median_ms"] > 0
    assert all(result[f"register_{k}_ratio"] > 0 for k in ("full", "fixed", "reuse"))


def test_run_bench_feeds_a_reference_model_two_channels(tmp_path: Path, one_thread: None) -> None:
    loaded = load_checkpoint(write_small_checkpoint(tmp_path / "ref.pt", imgsz=64, in_channels=2))
    result = run_bench(loaded, "test", imgsz=64, batches=(1,), threads=(1,), iters=2, pipeline_sizes=((64, 96),))
    # a 1-channel input anywhere (latency candidates, pipeline, TTA, registration's model) would have raised
    assert {row["candidate"] for row in result["latency"]} >= {"eager_model", "torchscript_stats", "torchscript_nostats"}
    assert result["pipeline"][0]["frame"] == "96x64" and result["registration"]["model_channels"] == 2
    assert set(result["derived"]["registration_ratio"]) == {"full", "fixed", "reuse"}
    assert result["derived"]["registration_ratio"]["reuse"] == result["registration"]["register_reuse_ratio"]
    assert result["targets"]["registration_full_ratio_max"] == 0.25 and result["targets"]["registration_reuse_ratio_max"] == 0.05


def test_bench_shared_late_competitor_schedule_runs_and_stops_its_competitor(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import bench_shared

    started: list[object] = []
    real = bench_shared.start_competitor
    monkeypatch.setattr(bench_shared, "start_competitor", lambda: started.append(real()) or started[-1])
    before = torch.get_num_threads()
    try:
        times = bench_shared._run_schedule(lambda frame: None, [0], "adaptive", 0.4, [0.1, 0.2, 0.3])
    finally:
        torch.set_num_threads(before)
    assert times and times == sorted(times)
    assert len(started) == 2 and all(p.poll() is not None for p in started)  # started twice, none left running


def test_bench_kinds_times_every_artifact_kind(small_pt2: dict, monkeypatch: pytest.MonkeyPatch, one_thread: None) -> None:
    pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install '.[onnx]')")
    import shutil

    from benchmarks import bench_kinds

    # the session's .pt2 of the same checkpoint and size stands in for a second AOTInductor compile (about a minute)
    monkeypatch.setattr(bench_kinds, "export_pt2", lambda loaded, out, imgsz: shutil.copy(small_pt2["path"], out))
    loaded = load_checkpoint(small_pt2["checkpoint"])
    result = bench_kinds.bench_kinds(loaded, imgsz=small_pt2["report"]["meta"]["imgsz"], threads=1, iters=2, calib_images=4)
    assert list(result["latency"]) == ["torchscript", "pt2", "onnx", "int8"]
    assert all(row["n"] == 2 and row["median_ms"] > 0 for row in result["latency"].values())
    assert result["latency"]["torchscript"]["vs_torchscript"] == 1.0 and result["ratios"]["int8_vs_torchscript"] > 0
    assert result["targets"] == {"int8_vs_torchscript_max": 0.6, "pt2_vs_torchscript_max": 1.0}
