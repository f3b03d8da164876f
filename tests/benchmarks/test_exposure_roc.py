"""Smoke test of ``benchmarks/exposure_roc.py`` on a tiny DeepPCB-like folder of synthetic boards."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from benchmarks import exposure_roc
from defect_detector.data.synth import generate_board_pair


def _deeppcb_like(root: Path) -> None:
    rng = np.random.default_rng(0)
    for k in range(2):
        image, template = generate_board_pair(160, 160, rng)[:2]
        stem = root / "group1" / "1" / f"100{k}"
        stem.parent.mkdir(parents=True, exist_ok=True)
        assert cv2.imwrite(f"{stem}_test.jpg", image) and cv2.imwrite(f"{stem}_temp.jpg", template)


def test_exposure_roc_sweeps_and_scores_a_range(tmp_path: Path, capsys) -> None:
    _deeppcb_like(tmp_path)
    out = tmp_path / "roc.json"
    argv = ["--root", str(tmp_path), "--groups", "1", "--max-midtones", "0.2", "--out", str(out)]
    assert exposure_roc.main(argv) == 0
    printed = capsys.readouterr().out
    assert "[golden] light" in printed and "[levels] chosen range" in printed
    report = json.loads(out.read_text())
    assert report["boards"] == 2
    for mode in ("golden", "levels"):
        chosen = report[mode]["chosen"]
        assert chosen["normal"] == 0.0 and chosen["light 20%"] == 1.0 and chosen["pure noise"] == 1.0
        assert report[mode]["sweeps"]["light"]["0.5"]["light 40%"] == 1.0


def test_light_conditions_are_the_faults_lighting_drop_above_and_below_normal() -> None:
    board = np.array([[0, 100, 200, 250]], np.uint8)
    frames = dict(exposure_roc.conditions(board, np.random.default_rng(0)))
    np.testing.assert_array_equal(frames["light 50%"], [[0, 50, 100, 125]])
    np.testing.assert_array_equal(frames["light 150%"], [[0, 150, 255, 255]])  # brighter, clipped at 255
