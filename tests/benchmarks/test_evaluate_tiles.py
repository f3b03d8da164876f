"""The tiles benchmark's frames: boards placed apart on bare substrate of the chosen grey, calls sent back to their board."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.evaluate_tiles import FRAME_H, FRAME_W, MIN_GAP, Board, compose_frames, false_call_ratios, to_boards


def _boards(count: int) -> list[Board]:
    rng = np.random.default_rng(1)
    return [Board(i, rng.integers(0, 2, (640, 640), dtype=np.uint8) * 255, np.full((640, 640), i, np.uint8)) for i in range(count)]


def test_frames_place_boards_apart_on_the_chosen_substrate() -> None:
    boards = _boards(7)
    frames = compose_frames(boards, seed=3, substrate=114)
    assert len(frames) == 2 and [len(f.boards) for f in frames] == [6, 1]
    frame = frames[0]
    assert frame.image.shape == (FRAME_H, FRAME_W) and frame.reference is not None
    bare = np.ones((FRAME_H, FRAME_W), bool)
    for image_id, x0, y0, w, h in frame.boards:
        np.testing.assert_array_equal(frame.image[y0 : y0 + h, x0 : x0 + w], boards[image_id].image)
        np.testing.assert_array_equal(frame.reference[y0 : y0 + h, x0 : x0 + w], boards[image_id].reference)
        bare[y0 : y0 + h, x0 : x0 + w] = False
    assert (frame.image[bare] == 114).all() and (frame.reference[bare] == 114).all()
    xs = sorted({x0 for _, x0, _, _, _ in frame.boards})
    assert all(b - a >= 640 + MIN_GAP for a, b in zip(xs, xs[1:]))
    assert (compose_frames(boards, seed=3)[0].image[bare] == 255).all()  # the default substrate is white


def test_calls_go_back_to_the_board_they_overlap_most() -> None:
    frame = compose_frames(_boards(6), seed=3)[0]
    image_id, x0, y0, _, _ = frame.boards[4]
    boxes = torch.tensor([[x0 + 10.0, y0 + 20.0, x0 + 50.0, y0 + 60.0], [x0 - 5.0, y0 + 100.0, x0 + 30.0, y0 + 120.0], [0, 0, 1, 1]])
    det = {"boxes": boxes, "scores": torch.tensor([0.9, 0.8, 0.7]), "labels": torch.tensor([1, 2, 3])}
    corner_on_a_board = any(x == 0 and y == 0 for _, x, y, _, _ in frame.boards)
    per_board, outside = to_boards(det, frame, max_det=100)
    assert per_board[image_id]["boxes"].tolist() == [[10.0, 20.0, 50.0, 60.0], [0.0, 100.0, 30.0, 120.0]]  # clipped to the board
    assert per_board[image_id]["labels"].tolist() == [1, 2]
    assert outside == (0 if corner_on_a_board else 1)  # the corner box lies on bare substrate unless a board starts there


def test_false_call_ratios_need_both_arms_to_reach_the_recall() -> None:
    def point(conf: float | None, calls: float) -> dict:
        return {"conf": conf, "false_calls_per_image": calls}

    one = [point(0.4, 0.1), point(0.3, 0.2), point(None, 9.0)]  # the last: never reached, calls at the lowest score
    tiled = [point(0.4, 0.15), point(None, 5.0), point(0.2, 1.0)]
    assert false_call_ratios(one, tiled) == [pytest.approx(1.5), None, None]
    assert false_call_ratios([point(0.4, 0.0)], [point(0.4, 0.1)]) == [None]
