"""align/golden_build.py and ``defect-detector golden build|verify``: a golden image from several good boards, and one
that carries a board's defect found by them (issue 44)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from defect_detector.align.golden_build import build_golden, golden_disagreements
from defect_detector.cli.main import main
from defect_detector.data.synth import generate_board_pair

SPOTS = [(120, 120), (500, 140), (180, 380), (480, 400), (320, 80)]


def _design(seed: int = 1) -> np.ndarray:
    return generate_board_pair(480, 640, np.random.default_rng(seed), (3, 4))[1]


def _with_defect(image: np.ndarray, x: int, y: int) -> np.ndarray:
    out = image.copy()
    cv2.circle(out, (x, y), 6, int(255 - out[y, x]), -1)
    return out


def _boards(design: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Five good boards of ``design``, moved 0-2 px, each with its own small defect elsewhere."""
    boards = []
    for i, (x, y) in enumerate(SPOTS):
        moved = cv2.warpAffine(design, np.float64([[1, 0, i % 3], [0, 1, (2 * i) % 3]]), (640, 480), borderMode=cv2.BORDER_REPLICATE)
        boards.append((f"b{i}.png", _with_defect(moved, x, y)))
    return boards


def test_the_median_of_good_boards_outvotes_each_ones_defect() -> None:
    design = _design()
    boards = _boards(design)
    golden, aligned = build_golden(boards)
    assert aligned.names == [name for name, _ in boards] and not aligned.left_out
    assert golden.shape == design.shape
    for x, y in SPOTS:  # no board's own defect survives in the golden image
        assert abs(int(golden[y, x]) - int(design[y, x])) < 40
    assert golden_disagreements(golden, boards)[0] == []


def test_a_golden_image_with_a_defect_is_found_and_a_clean_one_passes() -> None:
    design = _design()
    boards = _boards(design)
    found, aligned = golden_disagreements(_with_defect(design, 320, 240), boards)
    assert len(aligned.names) == 5 and len(found) == 1
    x, y, w, h = found[0].box
    assert x <= 320 < x + w and y <= 240 < y + h and found[0].words().startswith("x 32")
    assert golden_disagreements(design, boards)[0] == []


def test_too_few_boards_of_the_design_is_one_line() -> None:
    design, other = _design(1), _design(7)
    boards = [*_boards(design)[:2], ("other.png", other)]
    with pytest.raises(ValueError, match=r"^2 boards registered, 3 or more needed to outvote a defect \(left out: other\.png: "):
        build_golden(boards)


def test_the_cli_builds_and_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    design = _design()
    (tmp_path / "boards").mkdir()
    for name, board in _boards(design):
        assert cv2.imwrite(str(tmp_path / "boards" / name), board)
    assert cv2.imwrite(str(tmp_path / "taken.png"), _with_defect(design, 320, 240))
    assert main(["golden", "build", str(tmp_path / "boards"), "--out", str(tmp_path / "golden.png")]) == 0
    assert "the median of 5 boards in b0.png's pixels" in capsys.readouterr().out
    assert main(["golden", "verify", str(tmp_path / "golden.png"), str(tmp_path / "boards")]) == 0
    assert main(["golden", "verify", str(tmp_path / "taken.png"), str(tmp_path / "boards")]) == 2
    err = capsys.readouterr().err
    assert "taken.png differs from what 5 good boards agree on in 1 places (x 32" in err and "golden build" in err
    assert main(["golden", "build", str(tmp_path / "taken.png"), "--out", str(tmp_path / "x.png")]) == 2
    assert "take a folder or glob of good boards, not a image" in capsys.readouterr().err
