"""data/line_capture.py: a line capture changes the board, and the photometric match brings it back."""

from __future__ import annotations

import numpy as np

from defect_detector.data.line_capture import LineCapture


def _pair() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    golden = np.full((256, 256), 60, np.uint8)
    for _ in range(12):
        x, y = rng.integers(0, 220, 2)
        golden[y : y + 30, x : x + 8] = 200
    return golden.copy(), golden


def test_the_capture_changes_the_board_and_the_match_brings_it_back() -> None:
    board, golden = _pair()
    capture = LineCapture(p=1.0)
    changed, matched = [], []
    for seed in range(6):
        capture.set_random_state(np.random.default_rng(seed))
        changed.append(np.abs(capture.capture(board).astype(float) - board).mean())
        capture.set_random_state(np.random.default_rng(seed))
        matched.append(np.abs(capture(board, golden).astype(float) - board).mean())
    assert np.mean(changed) > 3.0
    assert np.mean(matched) < 0.5 * np.mean(changed)


def test_p_zero_leaves_the_board_as_read() -> None:
    board, golden = _pair()
    assert LineCapture(p=0.0)(board, golden) is board
