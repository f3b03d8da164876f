"""Smoke test of benchmarks/station_bench.py on tiny inputs: it runs end to end and reports every number (no timing
is asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy", reason="station extra not installed (sqlalchemy)")

from benchmarks import station_bench  # noqa: E402


def test_station_bench_runs_on_tiny_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    argv = ["--frames", "6", "--fps", "200", "--size", "96", "--queued", "0.5", "--history", "300", "--iters", "2", "--serials"]
    result = station_bench.main([*argv, "--out", str(out)])
    rec = result["recording"]
    assert rec["serials"] and rec["recorded"] == 6 and rec["unrecorded"] == 0
    assert rec["caller_median_ms"] > 0 and rec["cpu_ms_per_frame"] >= 0 and 0 <= rec["caller_fraction"] < 1
    assert set(result["pages"]["pages"]) == set(station_bench.PAGES) and result["pages"]["history"] == 300
    assert all(t["n"] == 2 and 0 < t["median_ms"] <= t["p90_ms"] for t in result["pages"]["pages"].values())
    assert json.loads(out.read_text())["targets"] == station_bench.TARGETS
    assert "GET /api/review/next" in capsys.readouterr().out
