"""Smoke test of ``benchmarks/line_captures.py``: a built set moves each board with its boxes, adds a defect-free
capture of each golden image, and scores what an inspector counts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from design_boards import write_sample_pairs

from benchmarks import line_captures
from defect_detector.core.capture import CaptureGeometry, CaptureModel

pytestmark = pytest.mark.usefixtures("one_thread")


def test_count_calls_reads_one_call_per_defect_and_every_other_as_false() -> None:
    truth = torch.tensor([[0.0, 0, 10, 10], [50, 50, 60, 60]])
    calls = torch.tensor([[1.0, 1, 9, 9], [2, 2, 8, 8], [100, 100, 110, 110]])  # two on the first defect, one on none
    assert line_captures.count_calls(calls, truth) == (1, 1, 1)


def test_build_captures_boards_through_the_capture_model_and_moves_their_boxes(tmp_path: Path) -> None:
    pairs = write_sample_pairs(tmp_path)
    raw = json.loads(pairs.read_text())
    model = CaptureModel.only(shift=(12.0, 12.0), scale=(1.005, 1.005))
    built = json.loads(line_captures.build(pairs, tmp_path / "line", seed=0, model=model).read_text())
    geometry = CaptureGeometry.make((640, 640), shift=(12.0, 12.0), scale=1.005)
    first = raw["annotations"][0]
    x, y, w, h = first["bbox"]
    want, _ = geometry.boxes(np.array([[x, y, x + w, y + h]]))
    got = built["annotations"][0]["bbox"]
    assert np.allclose([got[0], got[1], got[0] + got[2], got[1] + got[3]], want[0], atol=0.02)


def test_a_missing_json_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert line_captures.main(["build", "--data", str(tmp_path / "none.json"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("line_captures build: error:") and "none.json" in err and "\n" not in err
    assert line_captures.main(["build", "--data", str(tmp_path / "none.json"), "--out", str(tmp_path), "--capture", "zoom"]) == 2


def test_build_and_score_a_set_of_two_boards(tmp_path: Path) -> None:
    pairs = write_sample_pairs(tmp_path)
    raw = json.loads(pairs.read_text())
    built = line_captures.build(pairs, tmp_path / "line", seed=0)
    made = json.loads(built.read_text())
    assert [e["file_name"].split("/")[0] for e in made["images"]] == ["boards", "good", "boards", "good"]
    assert 0 < len(made["annotations"]) <= len(raw["annotations"])
    report = line_captures.score(built, None)
    assert report["defects"] == len(made["annotations"]) and 0.0 <= report["caught"] <= 1.0
    assert sum(report["verdicts"]["good"].values()) == 2 and report["refused"]["boards"] + report["counts"]["boards_inspected"] == 2
