"""Smoke test of benchmarks/bench_frame_cost.py on a small siamese model and the bundled sample boards."""

from pathlib import Path

from small_checkpoint import write_small_checkpoint

from benchmarks.bench_frame_cost import run


def test_every_frame_candidate_is_timed(tmp_path: Path, one_thread: None) -> None:
    siamese = write_small_checkpoint(tmp_path / "siamese.pt", 64, in_channels=2, model={"fusion": "siamese"})
    result = run(str(siamese), None, boards=2, threads=1, iters=2)
    assert result["caches_golden"] and result["boards"] == 2
    expected = {"line_golden_view", "line_frame_view", "new_golden_golden_view", "new_golden_frame_view", "model_infer", "model_cached"}
    assert expected <= set(result["timings"])
    assert all(row["n"] == 2 and row["median_ms"] > 0 for name, row in result["timings"].items() if name in expected)
