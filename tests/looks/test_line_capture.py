"""looks/line_capture.py: a line capture changes the board, and the photometric match brings it back."""

from __future__ import annotations

import numpy as np

from defect_detector.looks.line_capture import LineCapture


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


def test_the_seam_of_a_move_shows_the_golden_image_and_hidden_spots_keep_clear_of_every_box() -> None:
    """The golden view fills what a moved board does not cover with the golden image: training shows that band
    (``seam_p``) so the seam is not a defect; glare and occluders (``hidden_p``) are unlabelled, so they never touch a
    box (the defect would be hidden under an unlabelled spot)."""
    from defect_detector.looks.line_capture import CLEARANCE, seam_band

    board, golden = _pair()
    board[100:140, 100:140] = 250  # a defect
    box = np.array([[100, 100, 140, 140]], np.float32)
    band = seam_band(board.shape, 0, 20.0, 1.0)
    assert band[:, :10].all() and not band[:, 40:].any()  # the left edge, 20 px deep, slanted
    capture = LineCapture(p=1.0, seam_p=1.0, hidden_p=1.0)
    touched = placed = 0
    for seed in range(8):
        capture.set_random_state(np.random.default_rng(seed))
        seamed = capture.seam(board, golden + 1, box)
        assert np.array_equal(seamed[100:140, 100:140], board[100:140, 100:140])  # the defect is never covered
        touched += int((seamed != board).any())
        hidden = capture.hide(board, box)
        y0, x0 = 100 - CLEARANCE, 100 - CLEARANCE
        assert np.array_equal(hidden[y0 : 140 + CLEARANCE, x0 : 140 + CLEARANCE], board[y0 : 140 + CLEARANCE, x0 : 140 + CLEARANCE])
        placed += int((hidden != board).any())
    assert touched >= 4 and placed >= 4
