"""Smoke test of benchmarks/bench_cached.py on a small siamese model: both paths of each kind are timed and compared."""

from pathlib import Path

import pytest
from small_checkpoint import write_small_checkpoint

from benchmarks.bench_cached import run


def test_run_times_infer_and_infer_cached_for_each_kind(tmp_path: Path, one_thread: None) -> None:
    siamese = write_small_checkpoint(tmp_path / "siamese.pt", 64, in_channels=2, model={"fusion": "siamese"})
    result = run(siamese, imgsz=64, threads=[1], kinds=["checkpoint", "torchscript"], iters=2)
    (entry,) = result["runs"]
    assert entry["threads"] == 1
    assert sorted(entry["rows"]) == ["checkpoint_cached", "checkpoint_infer", "torchscript_cached", "torchscript_infer"]
    assert all(row["n"] == 2 and row["median_ms"] > 0 for row in entry["rows"].values())
    assert set(entry["cached_over_infer"]) == {"checkpoint", "torchscript"}


def test_a_model_that_cannot_cache_is_refused(tmp_path: Path, one_thread: None) -> None:
    early = write_small_checkpoint(tmp_path / "early.pt", 64, in_channels=2)
    with pytest.raises(ValueError, match="caches_golden False"):
        run(early, imgsz=64, threads=[1], kinds=["checkpoint"], iters=1)
