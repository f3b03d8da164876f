"""Defects painted on a golden image drawn by hand with OpenCV (looks/paint.py, looks/levels.py)."""

import cv2
import numpy as np
import pytest

from defect_detector.looks.paint import MIN_BOX_PX, paint_defects, read_levels


def _drawn(dark_on_bright: bool, antialiased: bool) -> tuple[np.ndarray, np.ndarray]:
    """A 480x480 design drawn with cv2.line / cv2.circle: (image uint8, copper bool as drawn)."""
    copper = np.zeros((480, 480), np.uint8)
    for k in range(6):
        y = 40 + 75 * k
        cv2.line(copper, (40, y), (440, y), 255, 10 if k % 2 else 4)
        cv2.circle(copper, (40, y), 12, 255, -1)
        cv2.circle(copper, (440, y), 12, 255, -1)
    cv2.rectangle(copper, (180, 300), (300, 360), 255, -1)  # a pour, for pin-holes
    image = cv2.GaussianBlur(copper, (0, 0), 0.6) if antialiased else copper
    fg, bg = (30.0, 220.0) if dark_on_bright else (200.0, 40.0)
    return np.round(bg + (fg - bg) * image.astype(np.float32) / 255).astype(np.uint8), copper > 127


@pytest.mark.parametrize("dark_on_bright", [True, False], ids=["dark-on-bright", "bright-on-dark"])
@pytest.mark.parametrize("antialiased", [False, True], ids=["hard", "antialiased"])
def test_a_hand_drawn_design_reads_copper_as_drawn(dark_on_bright: bool, antialiased: bool) -> None:
    image, copper = _drawn(dark_on_bright, antialiased)
    levels = read_levels(image)
    assert (levels.copper < levels.substrate) == dark_on_bright
    assert (levels.copper_mask == copper).mean() > 0.99
    assert 0.5 <= levels.size <= 1.0  # tracks of 4 and 10 px: DeepPCB's scale or a little under


@pytest.mark.parametrize("dark_on_bright", [True, False], ids=["dark-on-bright", "bright-on-dark"])
def test_painted_boxes_hold_their_paint_and_meet_the_minimum_side(dark_on_bright: bool) -> None:
    image, _ = _drawn(dark_on_bright, antialiased=True)
    levels = read_levels(image)
    board, boxes, labels = paint_defects(image, 6, np.random.default_rng(3))
    assert len(boxes) >= 4
    changed = board != image
    inside = np.zeros(image.shape, bool)
    for x0, y0, x1, y1 in boxes:
        assert min(x1 - x0, y1 - y0) >= MIN_BOX_PX * levels.size - 1e-3
        box = np.zeros(image.shape, bool)
        box[int(y0) : int(np.ceil(y1)), int(x0) : int(np.ceil(x1))] = True
        strong = changed & box & (np.abs(board.astype(float) - image) > 0.5 * levels.contrast)
        assert strong.sum() >= 4, "a box without visible paint"
        inside |= box
    assert not changed[~inside].any(), "painted pixels outside every box"


@pytest.mark.parametrize("dark_on_bright", [True, False], ids=["dark-on-bright", "bright-on-dark"])
@pytest.mark.parametrize(("label", "on_copper"), [(0, True), (5, True), (3, False), (4, False)], ids=["open", "pin-hole", "spur", "copper"])
def test_each_kind_lies_on_the_phase_it_belongs_to(dark_on_bright: bool, label: int, on_copper: bool) -> None:
    image, copper = _drawn(dark_on_bright, antialiased=False)
    levels = read_levels(image)
    board, boxes, labels = paint_defects(image, 3, np.random.default_rng(label), classes=(label,))
    assert len(boxes) >= 1 and (labels == label).all()
    paint = np.abs(board.astype(float) - image) > 0.5 * levels.contrast
    share = copper[paint].mean()
    assert share > 0.9 if on_copper else share < 0.1
    if label == 0:  # an open cuts a track: more copper regions than were drawn
        count = cv2.connectedComponents(copper.astype(np.uint8))[0]
        assert cv2.connectedComponents((copper & ~paint).astype(np.uint8))[0] > count
