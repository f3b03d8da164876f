"""Smoke test of ``benchmarks/hidden_roc.py`` on the sample boards: every condition is measured, glare over a defect
on a sample board is refused, and the boards themselves are not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks import hidden_roc

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"

pytestmark = pytest.mark.usefixtures("one_thread")


def test_hidden_roc_measures_every_condition_and_refuses_glare_over_a_defect(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    raw = json.loads((SAMPLES / "deeppcb" / "annotations.json").read_text())
    for entry in raw["images"][:2]:
        name = Path(entry["file_name"]).name
        shutil.copy(SAMPLES / "deeppcb" / name, tmp_path / name)
        shutil.copy(SAMPLES / "golden" / name, tmp_path / f"golden_{name}")
        entry.update(file_name=name, reference=f"golden_{name}")
    ids = {e["id"] for e in raw["images"][:2]}
    raw.update(images=raw["images"][:2], annotations=[a for a in raw["annotations"] if a["image_id"] in ids])
    (tmp_path / "boards.json").write_text(json.dumps(raw))
    hidden_roc.main(["--data", str(tmp_path / "boards.json"), "--max-images", "2", "--out", str(tmp_path / "roc.json")])
    assert "glare 3%" in capsys.readouterr().out
    report = json.loads((tmp_path / "roc.json").read_text())
    assert set(report["roc"]) == {"board", "good", "motion blur", *(f"{f} {s:.0%}" for f in hidden_roc.FAULTS for s in hidden_roc.SIZES)}
    assert report["roc"]["board"]["0.005"] == 0.0 and report["roc"]["glare 10%"]["0.005"] == 0.0
    assert all(row["hidden_share"] > 0.005 for row in report["rows"]["glare 10%"])
