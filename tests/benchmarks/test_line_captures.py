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

pytestmark = pytest.mark.usefixtures("one_thread")


def test_moved_boxes_follow_the_move_and_those_mostly_out_of_the_frame_are_dropped() -> None:
    shift = np.array([[1.0, 0, 30], [0, 1.0, -5]])
    boxes, keep = line_captures.moved_boxes(np.array([[10.0, 10, 20, 20], [600, 10, 30, 30]]), shift, (640, 640))
    assert keep.tolist() == [True, False] and np.allclose(boxes[0], [40, 5, 20, 20])


def test_count_reads_one_call_per_defect_and_every_other_as_false() -> None:
    truth = torch.tensor([[0.0, 0, 10, 10], [50, 50, 60, 60]])
    calls = torch.tensor([[1.0, 1, 9, 9], [2, 2, 8, 8], [100, 100, 110, 110]])  # two on the first defect, one on none
    assert line_captures._count(calls, truth) == (1, 2)


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
