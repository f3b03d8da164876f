"""data/line_capture.py: a training pair's board captured with every factor of the capture model, seen back in the
pair's frame (labels stay where they are) and matched back to the golden image's levels."""

from __future__ import annotations

import numpy as np

from defect_detector.core.capture import CaptureModel, draw_capture
from defect_detector.data.line_capture import CLEARANCE, LineCapture


def _pair() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    golden = np.full((256, 256), 60, np.uint8)
    for _ in range(12):
        x, y = rng.integers(0, 220, 2)
        golden[y : y + 30, x : x + 8] = 200
    return golden.copy(), golden


def _centre(image: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    """The intensity centroid (x, y) of ``image`` within ``box`` (x0, y0, x1, y1), above its median."""
    x0, y0, x1, y1 = box
    patch = image[y0:y1, x0:x1].astype(np.float64)
    patch = np.maximum(patch - np.median(patch), 0)
    ys, xs = np.mgrid[y0:y1, x0:x1]
    return np.array([(xs * patch).sum(), (ys * patch).sum()]) / patch.sum()


def test_the_capture_moves_and_changes_the_board_and_training_sees_it_back_in_place() -> None:
    board, golden = _pair()
    board[120:136, 60:76] = 250  # a defect: its label must stay where it is
    capture = LineCapture(p=1.0)
    changed, matched = [], []
    for seed in range(6):
        drawn = draw_capture(board.shape, np.random.default_rng(seed))
        changed.append(np.abs(drawn.apply(board).astype(float) - board).mean())
        capture.set_random_state(np.random.default_rng(seed))
        out = capture(board, golden)
        matched.append(np.abs(out.astype(float) - board)[30:-30, 30:-30].mean())
        assert np.abs(_centre(out, (52, 112, 84, 144)) - _centre(board, (52, 112, 84, 144))).max() < 0.5
    assert np.mean(changed) > 10.0
    assert np.mean(matched) < 0.25 * np.mean(changed) and min(matched) > 0.1  # the fit's residual and two resamplings


def test_p_zero_leaves_the_board_as_read() -> None:
    board, golden = _pair()
    assert LineCapture(p=0.0)(board, golden) is board


def test_the_uncovered_band_shows_the_golden_image_and_hidden_spots_keep_clear_of_every_box() -> None:
    """The golden view fills what a moved board does not cover with the golden image: training shows that band
    (``seam_p``) so the seam is not a defect, unless it comes near a box (the defect would vanish under its label);
    glare and occluders (``hidden_p``) are unlabelled, so they never touch a box."""
    board, golden = _pair()
    board[100:140, 100:140] = 250  # a defect
    box = np.array([[100, 100, 140, 140]], np.float32)
    reference = golden + 1
    moved = CaptureModel.only(shift=(20.0, 20.0))  # the board moves right and down: its right and bottom bands uncovered
    capture = LineCapture(p=1.0, seam_p=1.0, model=moved)
    capture.set_random_state(np.random.default_rng(0))
    out = capture(board, reference, box)
    assert np.array_equal(out[:, -15:], reference[:, -15:]) and np.array_equal(out[-15:, :], reference[-15:, :])
    assert np.abs(out[100:140, 100:140].astype(float) - board[100:140, 100:140]).mean() < 3  # the defect as it was
    board[100:140, 200:245] = 250  # a defect reaching into the right band
    capture.set_random_state(np.random.default_rng(0))
    kept = capture(board, reference, np.array([[200, 100, 245, 140]], np.float32))
    assert (kept[105:135, 238:245] > 200).all()  # shown as the board, not as the golden image
    hiding = LineCapture(p=1.0, hidden_p=1.0)
    placed = 0
    for seed in range(8):
        hiding.set_random_state(np.random.default_rng(seed))
        hidden = hiding.hide(board, box)
        y0, x0 = 100 - CLEARANCE, 100 - CLEARANCE
        assert np.array_equal(hidden[y0 : 140 + CLEARANCE, x0 : 140 + CLEARANCE], board[y0 : 140 + CLEARANCE, x0 : 140 + CLEARANCE])
        placed += int((hidden != board).any())
    assert placed >= 4
