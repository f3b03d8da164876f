"""screens/blank.py: frames with nothing to inspect, and the gray levels alerts quote."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from defect_detector.core.constants import LEVELS
from defect_detector.data.images import load_image_gray
from defect_detector.data.synth import generate_board_pair
from defect_detector.screens.blank import blank_reason, image_levels

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def _boards() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    synthetic = [generate_board_pair(256, 320, rng)[0] for _ in range(4)]
    return synthetic + [load_image_gray(p) for p in sorted(SAMPLES.rglob("*.jpg"))]


def _almost_white_board() -> np.ndarray:
    """All copper but a few dark holes (2.3e-4 of the pixels), like DeepPCB's 20085168_test.jpg."""
    board = np.full((640, 640), 255, np.uint8)
    rng = np.random.default_rng(1)
    for y, x in rng.integers(20, 620, size=(12, 2)):
        board[y : y + 3, x : x + 3] = 0
    return board


def test_boards_are_not_blank() -> None:
    boards = _boards() + [_almost_white_board()]
    assert len(boards) >= 5
    for board in boards:
        assert blank_reason(board) is None


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda b, rng: np.zeros_like(b), "dark"),
        (lambda b, rng: np.clip(rng.normal(4, 2, b.shape), 0, 255).astype(np.uint8), "dark"),  # a camera with no light
        (lambda b, rng: (b * 0.1).astype(np.uint8), "dark"),  # 10% brightness
        (lambda b, rng: np.full_like(b, 255), "white"),
        (lambda b, rng: np.clip(b.astype(np.float64) + 250, 0, 255).astype(np.uint8), "white"),  # saturated
        (lambda b, rng: np.clip(rng.normal(250, 3, b.shape), 0, 255).astype(np.uint8), "white"),
        (lambda b, rng: np.full_like(b, 128), "flat"),
        (lambda b, rng: np.clip(rng.normal(128, 4, b.shape), 0, 255).astype(np.uint8), "flat"),  # grey with sensor noise
        (lambda b, rng: np.clip(128 + (b - 128.0) * 0.1, 0, 255).astype(np.uint8), "flat"),  # 10% contrast
    ],
)
def test_black_white_dim_and_flat_frames_are_blank(make, words: str) -> None:
    rng = np.random.default_rng(0)
    for board in _boards()[:2] + [np.zeros((1536, 2048), np.uint8) + _boards()[0][0, 0]]:
        reason = blank_reason(make(board, rng))
        assert reason is not None and reason.startswith("blank frame: ") and words in reason and "?" in reason


def test_a_dim_board_that_is_not_blank_is_left_to_the_drift_monitor() -> None:
    board = _boards()[0]
    assert blank_reason((board * 0.3).astype(np.uint8)) is None  # 70% darker: drift alerts it, the board is inspected


def test_levels_are_read_from_a_sample() -> None:
    board = _boards()[0]
    levels = image_levels(board)
    assert levels.shape == (len(LEVELS),) and levels.dtype == np.float64
    dark, median, bright, detail = levels
    assert dark <= median <= bright and 0 < detail <= 1
    half = image_levels((board * 0.5).astype(np.uint8))
    assert half[2] == pytest.approx(bright * 0.5, abs=1)
    with pytest.raises(ValueError, match="uint8"):
        image_levels(board.astype(np.float32))
