"""Smoke test of ``benchmarks/golden_check.py`` on a tiny DeepPCB-like folder of synthetic boards."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
from golden_pairs import BOARDS, golden_pairs

from benchmarks import golden_check
from defect_detector.align.register import check_pair
from defect_detector.data.synth import generate_board_pair
from defect_detector.export import GOLDEN_CHECK


def _deeppcb_like(root: Path) -> None:
    names = []
    for group, seed in (("group1", 0), ("group2", 1)):
        rng = np.random.default_rng(seed)
        for k in range(2):
            image, template = generate_board_pair(320, 320, rng)[:2]
            stem = root / group / group[-1] / f"{group[-1]}00{k}"
            stem.parent.mkdir(parents=True, exist_ok=True)
            cv2.imwrite(f"{stem}_test.jpg", image)
            cv2.imwrite(f"{stem}_temp.jpg", template)
            names.append(f"{group}/{group[-1]}/{group[-1]}00{k}.jpg {group}/{group[-1]}_not/{group[-1]}00{k}.txt")
    (root / "trainval.txt").write_text("\n".join(names) + "\n")


def test_golden_check_benchmark_separates_true_and_wrong_pairs(tmp_path: Path, capsys) -> None:
    _deeppcb_like(tmp_path)
    assert golden_check.main(["--root", str(tmp_path), "--out", str(tmp_path / "report.json")]) == 0
    printed = capsys.readouterr().out
    assert "true" in printed and "other design" in printed and "max_spread" in printed
    report = golden_check.run(golden_check.load_pairs(tmp_path, "trainval.txt", None), progress=False)
    true = report["table"]["true"]
    assert (true["pairs"], true["registered"], true["accepted"]) == (4, 4, 4)
    painted = report["table"]["painted"]  # 8 blobs of 60 px on a 320x320 board: 32 per 640x640 px, more than a board's defects
    assert painted["pairs"] == 4 and painted["spread"] > report["table"]["true"]["spread"]
    assert report["table"]["blank"]["accepted"] == 0 and report["table"]["stretched 800x600"]["accepted"] == 0
    assert report["table"]["other design"]["accepted"] == 0
    agreeing = report["agreement"]  # the C++ correlation check on the same pairs: its ZNCC reaches nothing blank
    assert agreeing["true"]["cpp_refused"] == 0 and agreeing["blank"]["cpp_refused"] == 1 and agreeing["blank"]["correlation"] == 0.0
    for kind, row in agreeing.items():
        assert row["python_refused"] - row["both_refused"] == len(row["python_only"]), kind
        assert row["cpp_refused"] - row["both_refused"] == len(row["cpp_only"]), kind
    assert "C++ correlation check" in printed


def test_the_correlation_check_passes_misregistered_golden_images_that_the_golden_check_refuses() -> None:
    """The relation deploy/cpp/README.md states, on shipped DeepPCB pairs (golden images already in the board's
    pixels): both checks accept a board's own registered golden image and refuse another design's; a golden image
    6 px off its registration passes the correlation check (ZNCC >= the artifact's min_zncc) and the golden check
    (``check_pair``) refuses it."""
    for board_id, other_id in BOARDS:
        board, kinds = golden_pairs(board_id, other_id)
        decisions = {k: (check_pair(g, board).ok, golden_check.correlation(board, g) >= GOLDEN_CHECK["min_zncc"]) for k, g in kinds.items()}
        assert decisions == {"true": (True, True), "misregistered": (False, True), "other design": (False, False)}, board_id
