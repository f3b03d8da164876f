"""Tests for defect_detector.data.draw: boxes land on the pixels they name, at every image size."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from defect_detector.data.draw import VERDICT_COLORS_BGR, _wrap, badge, class_color, draw_detections, stamp

CLASS_NAMES = ["missing_hole", "mouse_bite", "open_circuit", "short", "spur", "spurious_copper"]


# --------------------------------------------------------------------------------------------------------------------
# draw_detections


@pytest.mark.parametrize("height,width", [(640, 640), (1536, 2048)])
def test_draw_detections_draws_box_border(height: int, width: int) -> None:
    image = np.full((height, width), 128, dtype=np.uint8)
    original = image.copy()
    x1, y1, x2, y2 = 200, 250, 420, 500
    out = draw_detections(
        image, torch.tensor([[x1, y1, x2, y2]], dtype=torch.float32), torch.tensor([0.87]), torch.tensor([1]), CLASS_NAMES
    )

    assert out.shape == (height, width, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(image, original)  # input untouched
    mid_x, mid_y = (x1 + x2) // 2, (y1 + y2) // 2
    colour = np.array(class_color(1))  # each class its own colour (label 1: blue)
    for y, x in [(mid_y, x1), (mid_y, x2), (y2, mid_x)]:  # left, right, bottom borders
        np.testing.assert_array_equal(out[y, x], colour)
    np.testing.assert_array_equal(out[mid_y, mid_x], [128, 128, 128])  # interior untouched
    assert (out[:y1, x1:x2] != 128).any()  # the tag sits above the box


def test_draw_detections_thicker_on_large_images() -> None:
    def border_width(height: int, width: int) -> int:
        out = draw_detections(
            np.zeros((height, width), np.uint8), np.array([[100.0, 100.0, 400.0, 400.0]]), np.array([0.5]), np.array([0]), CLASS_NAMES
        )
        return int((out[250, 80:130, 2] > 0).sum())

    assert border_width(1536, 2048) > border_width(640, 640) >= 1


def test_draw_detections_bgr_input_empty_boxes_and_no_scores() -> None:
    image = np.zeros((100, 120, 3), dtype=np.uint8)
    empty = draw_detections(image, np.zeros((0, 4)), np.zeros((0,)), np.zeros((0,), dtype=np.int64), CLASS_NAMES)
    np.testing.assert_array_equal(empty, image)
    assert empty is not image

    # Boxes partly outside the image, unknown label, no scores (ground-truth style), custom colour.
    out = draw_detections(image, [[-10, -10, 50, 60], [90, 80, 200, 150]], None, [0, 99], CLASS_NAMES, color=(0, 255, 0))
    assert out.shape == (100, 120, 3)
    assert (out[:, :, 1] > 0).any()


def test_draw_detections_rejects_length_mismatch() -> None:
    with pytest.raises(ValueError):
        draw_detections(np.zeros((64, 64), np.uint8), np.zeros((2, 4)), np.zeros(1), np.zeros(2, dtype=np.int64), CLASS_NAMES)


def test_stamp_wraps_a_long_reason_inside_a_640_px_frame() -> None:
    reason = (
        "board_017.png against golden image golden_a.png: frame is blurred: sharpness 27% of the golden image's (check the focus "
        "and clean the lens); golden image shows another design or another board: it differs from the frame in 2.4% of the "
        "board's area (at most 1.6%; register.max_difference)"
    )
    font, scale = cv2.FONT_HERSHEY_SIMPLEX, 640 / 400.0 * 0.7
    lines = _wrap(reason, font, scale, 2, 640 - 16)
    assert " ".join(lines) == " ".join(reason.split()) and len(lines) > 2  # every word kept, in order
    assert all(cv2.getTextSize(line, font, scale, 2)[0][0] <= 624 for line in lines)
    canvas = stamp(np.zeros((640, 640, 3), np.uint8), "NOT INSPECTED", reason)
    white = (canvas > 200).all(axis=2)
    rows = np.flatnonzero(white.any(axis=1))
    assert len(rows) and rows[0] > 0 and rows[-1] < 639  # text inside the frame, top to bottom
    assert not white[:, :4].any() and not white[:, -4:].any()  # nothing cut at either side
    pieces = _wrap("x" * 300, font, scale, 2, 100)  # one word wider than the frame: split, never cut
    assert "".join(pieces) == "x" * 300 and all(cv2.getTextSize(p, font, scale, 2)[0][0] <= 100 for p in pieces)


def test_a_badge_takes_the_first_corner_clear_of_the_calls_and_cuts_its_detail_to_the_frame() -> None:
    canvas = np.zeros((240, 320, 3), np.uint8)
    boxes = [[0.0, 0.0, 100.0, 40.0], [250.0, 0.0, 320.0, 30.0]]  # both top corners hold a call
    x1, y1, x2, y2 = badge(canvas, "FAIL", "2 calls at score >= 0.42; " + "boards: " + ", ".join(f"B{i} fail" for i in range(40)), boxes)
    assert (x1, y2) == (0, 240) and x2 <= 320  # bottom-left, inside the frame
    assert (canvas[y1:y2, x1:x2] == VERDICT_COLORS_BGR["FAIL"]).all(axis=2).mean() > 0.5 and not canvas[:40, :100].any()
    everywhere = [[0.0, 0.0, 320.0, 240.0]]
    assert badge(np.zeros((240, 320, 3), np.uint8), "PASS", "", everywhere)[:2] == (0, 0)  # no corner free: the top-left


def test_a_stamp_leaves_the_box_it_avoids_visible() -> None:
    middle = (100, 250, 540, 330)
    for avoid in (middle, (100, 40, 540, 120), (100, 520, 540, 600)):
        canvas = stamp(np.zeros((640, 640, 3), np.uint8), "NOT INSPECTED", "glare over 3% of the board", avoid=avoid)
        assert not canvas[avoid[1] : avoid[3], avoid[0] : avoid[2]].any(), avoid
    assert stamp(np.zeros((640, 640, 3), np.uint8), "NOT INSPECTED", "glare")[middle[1] : middle[3]].any()  # unavoided: the middle
