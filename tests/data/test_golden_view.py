"""The golden view (issue 35): a frame warped into its golden image's pixels, and calls mapped back into the frame."""

from __future__ import annotations

import cv2
import numpy as np
import torch

from defect_detector.data.golden_view import boxes_to_frame, centres_valid, warp_into_golden


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
    view = warp_into_golden(frame, golden, matrix)
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
    view = warp_into_golden(cv2.warpAffine(golden, matrix, (240, 200)), golden, matrix)
    mapped = boxes_to_frame(torch.tensor([[110.0, 90.0, 130.0, 110.0]]), view)  # 20 px square on the centre
    side = float(20 * (np.cos(np.pi / 6) + np.sin(np.pi / 6)))
    assert torch.allclose(mapped, torch.tensor([[120 - side / 2, 100 - side / 2, 120 + side / 2, 100 + side / 2]]), atol=1e-3)
