"""Smoke test of ``benchmarks/hidden_roc.py`` on the sample boards: every condition is measured, glare over a defect
on a sample board is refused, and the boards themselves are not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from design_boards import write_sample_pairs

from benchmarks import hidden_roc

pytestmark = pytest.mark.usefixtures("one_thread")


def test_hidden_roc_measures_every_condition_and_refuses_glare_over_a_defect(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pairs = write_sample_pairs(tmp_path)
    hidden_roc.main(["--data", str(pairs), "--max-images", "2", "--out", str(tmp_path / "roc.json")])
    assert "glare 3%" in capsys.readouterr().out
    report = json.loads((tmp_path / "roc.json").read_text())
    assert set(report["roc"]) == {"board", "good", "motion blur", *(f"{f} {s:.0%}" for f in hidden_roc.FAULTS for s in hidden_roc.SIZES)}
    assert report["roc"]["board"]["0.005"] == 0.0 and report["roc"]["glare 10%"]["0.005"] == 0.0
    assert all(row["hidden_share"] > 0.005 for row in report["rows"]["glare 10%"])
