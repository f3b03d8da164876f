"""Smoke test of benchmarks/bench_arch.py on a tiny input: candidates build, count and time; no timing is asserted."""

import pytest

from benchmarks.bench_arch import BASE_CONFIG, CANDIDATES, candidate_config, markdown, run
from defect_detector.core.config import load_config
from defect_detector.model.detector import build_model


def test_every_candidate_is_a_valid_config_and_the_first_is_the_bundled_one() -> None:
    assert candidate_config(CANDIDATES["bundled"]) == load_config(BASE_CONFIG).model
    for changes in CANDIDATES.values():
        build_model(candidate_config(changes), 6)


def test_run_counts_and_times_the_deployed_graphs(one_thread: None) -> None:
    result = run(imgsz=64, threads=(1,), iters=2, only=["bundled", "patch4_rep12", "bundled_early"], yolo=False)
    rows, timings = result["rows"], result["timings"][1]
    assert result["reference"] == "bundled" and timings["bundled"]["ratio"] == 1.0
    assert list(rows) == ["bundled", "patch4_rep12", "bundled_early"] and rows["bundled"]["changes"] == {}
    for row in rows.values():
        assert row["flops"] == 2 * row["macs"] > 0
    assert rows["patch4_rep12"]["params_deploy"] < rows["patch4_rep12"]["params_train"]  # branches fused
    assert rows["bundled"]["timed"].startswith("frame") and rows["bundled_early"]["timed"].startswith("forward")
    assert all(t["median_ms"] > 0 for t in timings.values())
    table = markdown(result).splitlines()
    assert len(table) == 2 + 3 and table[2].startswith("| bundled | - |")


def test_an_unknown_candidate_is_refused() -> None:
    with pytest.raises(KeyError):
        run(imgsz=64, threads=(1,), iters=1, only=["nope"], yolo=False)
