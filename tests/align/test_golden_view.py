"""The golden view (issue 35): a frame warped into its golden image's pixels, and calls mapped back into the frame."""

from __future__ import annotations

import cv2
import numpy as np
import torch

from defect_detector.align.golden_view import boxes_to_frame, centres_valid, warp_into_golden
from defect_detector.align.mapping import Mapping, identity_mapping
from defect_detector.align.photometric import Photometric


def _scene(rng: np.random.Generator) -> np.ndarray:
    image = np.full((200, 240), 200, np.uint8)
    for _ in range(12):
        x, y = rng.integers(0, 220), rng.integers(0, 180)
        cv2.rectangle(image, (int(x), int(y)), (int(x) + 18, int(y) + 12), 40, -1)
    return image


def test_a_shifted_frame_lands_on_its_golden_image_and_its_boxes_land_back() -> None:
    golden = _scene(np.random.default_rng(0))
    matrix = np.array([[1.0, 0.0, 7.0], [0.0, 1.0, -5.0]])  # golden -> frame: 7 px right, 5 px up
    frame = cv2.warpAffine(golden, matrix, (240, 200), borderValue=255)
    view = warp_into_golden(frame, golden, Mapping(matrix, golden.shape))
    inner = view.valid.copy()
    assert not view.valid[:5, :].any() and not view.valid[:, -7:].any()  # the frame holds no data there
    assert view.valid[10:-10, 10:-12].all()
    assert np.array_equal(view.board[inner], golden[inner])  # integer shift: exactly the golden pixels
    assert np.array_equal(view.board[~inner], golden[~inner])  # no data: the golden image's own pixels, nothing differs
    boxes = torch.tensor([[10.0, 20.0, 40.0, 50.0]])
    assert torch.allclose(boxes_to_frame(boxes, view), torch.tensor([[17.0, 15.0, 47.0, 45.0]]))
    edge = torch.tensor([[1.0, 1.0, 5.0, 5.0], [100.0, 100.0, 110.0, 110.0]])
    assert centres_valid(edge, view).tolist() == [False, True]


def test_a_turned_frame_maps_a_box_to_the_box_around_its_corners() -> None:
    golden = _scene(np.random.default_rng(1))
    matrix = cv2.getRotationMatrix2D((120.0, 100.0), 30.0, 1.0)
    view = warp_into_golden(cv2.warpAffine(golden, matrix, (240, 200)), golden, Mapping(matrix, golden.shape))
    mapped = boxes_to_frame(torch.tensor([[110.0, 90.0, 130.0, 110.0]]), view)  # 20 px square on the centre
    side = float(20 * (np.cos(np.pi / 6) + np.sin(np.pi / 6)))
    assert torch.allclose(mapped, torch.tensor([[120 - side / 2, 100 - side / 2, 120 + side / 2, 100 + side / 2]]), atol=1e-3)


def test_a_moved_board_with_a_gain_change_meets_its_fill_without_a_seam_and_no_call_sits_on_it() -> None:
    """Issue 42: the golden view brings the board to the golden image's levels (its photometric fit) before the golden
    image fills where the board has no data; the area the board does not cover, and a margin, hold no call."""
    rng = np.random.default_rng(4)
    yy, xx = np.mgrid[0:320, 0:320]
    golden = np.clip(40 + 170 * (0.5 + 0.5 * np.sin(xx / 9.0) * np.cos(yy / 13.0)) + rng.normal(0, 2, (320, 320)), 0, 255).astype(np.uint8)
    matrix = np.float64([[1, 0, 20], [0, 1, 0]])  # golden -> frame: the board moved 20 px right, golden x >= 300 unseen
    moved = cv2.warpAffine(golden, matrix, (320, 320), borderMode=cv2.BORDER_REPLICATE)
    board = np.clip(1.15 * moved.astype(np.float32) + 6, 0, 255).astype(np.uint8)
    fit = Photometric(np.array([1.15, 0, 0, 0, 0, 0]), 1.0, 6.0, (320, 320), 1.15)
    mapping = Mapping(matrix, golden.shape)
    plain, matched = warp_into_golden(board, golden, mapping), warp_into_golden(board, golden, mapping, fit)
    inside = plain.valid & (np.arange(320)[None, :] < 280)
    assert np.abs(plain.board.astype(int) - golden)[inside].mean() > 10  # at the board's levels: unlike its fill
    assert np.abs(matched.board.astype(int) - golden)[inside].mean() < 2  # at the golden image's levels
    seam = torch.tensor([[280.0, 100, 300, 120], [230.0, 100, 250, 120]])  # centres 6 and 56 px from the unseen band
    assert centres_valid(seam, matched).tolist() == [False, True]
    unmoved = warp_into_golden(golden, golden, identity_mapping(golden.shape))
    assert centres_valid(torch.tensor([[2.0, 100, 12, 110]]), unmoved).tolist() == [True]  # the frame's own edge: no margin


def test_a_pad_the_camera_saturates_is_no_difference_and_a_bright_defect_still_is() -> None:
    """A camera at gain 1.15, gamma 1.15 saturates a pad the golden image shows at 235: mapped back, its 255 reads
    about 220, 15 levels darker than the pad, which the model sees as a difference over every bright pad. A clipped
    pixel is a bound, so the golden view reads the pad's own level there; a bright defect clipped on a dark board (the
    golden image darker than its inverse) stays bright."""
    golden = np.full((120, 160), 60, np.uint8)
    golden[20:60, 20:60] = 235  # a tinned pad
    fit = Photometric(np.array([1.15, 0, 0, 0, 0, 0]), 1.15, 10.0, golden.shape, 1.15)
    board = np.clip(fit.curve(golden.astype(np.float64)), 0, 255).astype(np.uint8)
    board[80:100, 100:120] = 255  # a bright defect on the dark board
    assert (board[20:60, 20:60] == 255).all()  # the pad saturates
    view = warp_into_golden(board, golden, identity_mapping(golden.shape), fit)
    assert np.abs(view.board[25:55, 25:55].astype(int) - 235).max() <= 1  # read at the pad's own level
    assert np.abs(view.board[65:75, 65:155].astype(int) - 60).max() <= 2  # the rest at the golden image's levels
    assert view.board[85:95, 105:115].min() > 200  # the defect still differs
    assert fit.to_golden(board)[25:55, 25:55].max() < 225  # what the inverse alone read
