"""Defects painted on any golden image (looks/paint.py)."""

import cv2
import numpy as np
import pytest

from defect_detector.data.synth import generate_board_pair
from defect_detector.looks.paint import MIN_CHANGE, PAINTERS, paint_defects, read_levels, track_width
from defect_detector.looks.render import render_pair, sample_look


def _golden(seed: int = 0, size: int = 480) -> np.ndarray:
    return generate_board_pair(size, size, np.random.default_rng(seed))[1]


def _changed(board: np.ndarray, golden: np.ndarray, levels: float) -> np.ndarray:
    return np.abs(board.astype(np.int16) - golden.astype(np.int16)) > 0.3 * levels


@pytest.mark.parametrize("photo", [False, True], ids=["binarized", "photograph"])
def test_every_painted_pixel_lies_in_a_box_and_every_box_holds_paint(photo: bool) -> None:
    golden = _golden(0)
    if photo:
        rng = np.random.default_rng(1)
        golden = render_pair(golden, golden, sample_look(rng, "holdout"), rng, strength=0.0)[1]
    levels = read_levels(golden)
    gap = abs(levels.copper - levels.substrate)
    board, boxes, labels = paint_defects(golden, 8, np.random.default_rng(2))
    assert len(boxes) >= 6 and set(labels.tolist()) <= set(range(6))
    changed = _changed(board, golden, gap)
    inside = np.zeros(golden.shape, bool)
    for x0, y0, x1, y1 in boxes:
        box = np.zeros(golden.shape, bool)
        box[int(y0) : int(np.ceil(y1)), int(x0) : int(np.ceil(x1))] = True
        assert changed[box].sum() >= 4, "a box without painted pixels"
        inside |= box
    assert not changed[~inside].any(), "painted pixels outside every box"
    for i, a in enumerate(boxes):  # none overlaps another
        for b in boxes[i + 1 :]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]


@pytest.mark.parametrize("label", range(6), ids=["open", "short", "mousebite", "spur", "copper", "pin-hole"])
def test_each_kind_paints_the_right_level(label: int) -> None:
    golden = _golden(4)
    levels = read_levels(golden)
    board, boxes, labels = paint_defects(golden, 3, np.random.default_rng(label), classes=(label,))
    assert len(boxes) >= 1 and (labels == label).all()
    changed = _changed(board, golden, 2 * 255)  # painted well past half-way: the paint's own level, not its soft edge
    to_copper = np.abs(board[changed].astype(float) - levels.copper) < np.abs(board[changed].astype(float) - levels.substrate)
    assert to_copper.mean() > 0.8 if label in (1, 3, 4) else to_copper.mean() < 0.2
    assert len(PAINTERS) == 6


def test_levels_and_track_width_follow_the_image() -> None:
    golden = _golden(5)
    levels = read_levels(golden)
    assert levels.substrate > 200 and levels.copper < 50 and levels.edge_sigma < 2.0
    wide = cv2.resize(golden, None, fx=2, fy=2, interpolation=cv2.INTER_NEAREST)
    assert track_width(wide < 128) == pytest.approx(2 * track_width(golden < 128), rel=0.25)
    assert levels.size == read_levels(wide).size == 1.0  # the track width is no scale: DeepPCB's sizes unless told
    assert read_levels(wide, size=2.0).size == 2.0
    with pytest.raises(ValueError, match="flat grey level"):
        paint_defects(np.full((64, 64), 90, np.uint8), 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="uint8 gray"):
        read_levels(np.zeros((8, 8, 3), np.uint8))


def test_avoid_keeps_painted_defects_off_given_boxes() -> None:
    golden = _golden(6)
    avoid = np.array([[0, 0, 240, 480]], np.float32)
    _, boxes, _ = paint_defects(golden, 4, np.random.default_rng(0), avoid=avoid)
    assert len(boxes) and (boxes[:, 0] >= 240).all()


def test_a_paint_no_inspector_could_see_is_not_painted() -> None:
    """Copper 20 grey levels off the substrate (below MIN_CHANGE): nothing can be painted that changes the image
    visibly, so nothing is painted (before, such paints were counted as escapes); at 40 levels every defect is painted
    and changes its pixels by MIN_CHANGE or more."""
    tracks = _golden(4) < 128
    for gap, painted in ((20, 0), (40, 6)):
        golden = np.where(tracks, 100 + gap, 100).astype(np.uint8)
        board, boxes, _ = paint_defects(golden, 6, np.random.default_rng(0))
        assert len(boxes) == painted, gap
        for x0, y0, x1, y1 in boxes.astype(int):
            change = np.abs(board[y0:y1, x0:x1].astype(int) - golden[y0:y1, x0:x1])
            assert change.max() >= MIN_CHANGE


def test_defects_are_painted_on_the_board_never_on_the_plain_background_round_it() -> None:
    """A board on a grey 128 frame (a photographed board on a table, a scan on a grey frame): every painted defect and
    its box lie on the board; off it nothing changes."""
    board = _golden(7, 320)
    frame = np.full((560, 720), 128, np.uint8)
    frame[120:440, 200:520] = board
    painted, boxes, _ = paint_defects(frame, 6, np.random.default_rng(1))
    assert len(boxes) == 6
    assert (boxes[:, 0] >= 200).all() and (boxes[:, 1] >= 120).all() and (boxes[:, 2] <= 520).all() and (boxes[:, 3] <= 440).all()
    outside = np.ones(frame.shape, bool)
    outside[120:440, 200:520] = False
    assert (painted[outside] == 128).all()
