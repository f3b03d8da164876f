"""Photograph-like rendering of binarized layout pairs (looks/render.py)."""

import cv2
import numpy as np
import pytest

from defect_detector.data.synth import generate_board_pair
from defect_detector.looks.render import FAMILIES, capture, render_pair, sample_look


def _pair(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    board, golden, boxes, _ = generate_board_pair(320, 320, np.random.default_rng(seed))
    return board, golden, boxes


def test_families_use_contrast_bands_and_textures_of_their_own() -> None:
    rng = np.random.default_rng(0)
    train = [sample_look(rng, "train") for _ in range(300)]
    holdout = [sample_look(rng, "holdout") for _ in range(300)]
    train_gaps = np.array([abs(look.copper - look.substrate) for look in train])
    holdout_gaps = np.array([look.copper - look.substrate for look in holdout])
    assert ((holdout_gaps > 30) & (holdout_gaps < 45)).all()
    assert not ((train_gaps > 30.5) & (train_gaps < 44.5)).any()
    assert {look.texture for look in train} == {"grain", "blotch"} and {look.texture for look in holdout} == {"weave"}
    assert (train_gaps >= 15).all() and train_gaps.min() < 20  # contrast down to about 15 levels
    with pytest.raises(ValueError, match="look family"):
        sample_look(rng, "studio")
    assert FAMILIES == ("train", "holdout")


def test_a_rendered_pair_differs_only_at_the_boxes_beyond_capture_noise() -> None:
    board, golden, boxes = _pair(1)
    rng = np.random.default_rng(2)
    look = sample_look(rng, "holdout")
    photo, golden_photo = render_pair(board, golden, look, rng)
    assert photo.shape == golden_photo.shape == board.shape and photo.dtype == np.uint8
    assert 2 < len(np.unique(photo)) and photo.std() > 5  # a photograph, not a binarized scan
    diff = cv2.GaussianBlur(np.abs(photo.astype(np.float32) - golden_photo.astype(np.float32)), (0, 0), 2.0)
    inside = np.zeros(board.shape, bool)
    margin = int(3 * look.edge_sigma) + 3
    for x0, y0, x1, y1 in boxes.astype(int):
        inside[max(0, y0 - margin) : y1 + margin, max(0, x0 - margin) : x1 + margin] = True
    gap = abs(look.copper - look.substrate)
    assert diff[~inside].max() < 0.35 * gap  # outside the boxes: noise, gain and JPEG only
    assert max(diff[y0:y1, x0:x1].max() for x0, y0, x1, y1 in boxes.astype(int)) > 0.35 * gap


def test_without_capture_the_pair_of_one_layout_is_identical_and_sizes_must_match() -> None:
    _, golden, _ = _pair(3)
    rng = np.random.default_rng(0)
    a, b = render_pair(golden, golden, sample_look(rng), rng, strength=0.0)
    assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="one size"):
        render_pair(golden, golden[:100], sample_look(rng), rng)


def test_capture_changes_gain_and_noise_but_keeps_the_scene() -> None:
    scene = np.full((64, 64), 100.0, np.float32)
    shot = capture(scene, np.random.default_rng(0))
    assert shot.dtype == np.uint8 and abs(float(shot.mean()) - 100) < 12 and shot.std() > 0
    assert np.array_equal(capture(scene, np.random.default_rng(0), strength=0.0), np.full((64, 64), 100, np.uint8))
