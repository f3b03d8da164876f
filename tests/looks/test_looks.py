"""The look step of pair augmentation (looks/looks.py) and its config keys."""

import cv2
import numpy as np
import pytest

from defect_detector.core.config import AugmentConfig
from defect_detector.core.typed_yaml import ConfigError
from defect_detector.data.synth import generate_board_pair
from defect_detector.data.transforms import apply_pair_transforms, build_pair_transforms
from defect_detector.looks.looks import LookTransform


def _sample(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    board, golden, boxes, labels = generate_board_pair(320, 320, np.random.default_rng(seed))
    return board, golden, boxes, labels


def test_render_and_paint_keep_every_difference_inside_a_box() -> None:
    board, golden, boxes, labels = _sample(0)
    look = LookTransform(render_p=1.0, paint_p=1.0, paint_max=3)
    look.set_random_state(np.random.default_rng(3))
    image, reference, out_boxes, out_labels = look(board, golden, boxes, labels)
    assert image.shape == reference.shape == board.shape and image.dtype == np.uint8
    assert len(out_boxes) > len(boxes) and len(out_labels) == len(out_boxes)  # painted defects come with boxes
    assert len(np.unique(image)) > 20  # a photograph, not a binarized scan
    diff = cv2.GaussianBlur(np.abs(image.astype(np.float32) - reference.astype(np.float32)), (0, 0), 2.0)
    inside = np.zeros(board.shape, bool)
    for x0, y0, x1, y1 in out_boxes.astype(int):
        inside[max(0, y0 - 8) : y1 + 8, max(0, x0 - 8) : x1 + 8] = True
    assert diff[~inside].max() < 0.5 * diff[inside].max()


def test_zoom_moves_the_boxes_with_the_pixels() -> None:
    board, golden, boxes, labels = _sample(1)
    look = LookTransform(render_p=1.0, scale=(2.0, 2.0))
    look.set_random_state(np.random.default_rng(0))
    _, _, out_boxes, _ = look(board, golden, boxes, labels)
    assert len(out_boxes) >= 1
    sides = np.concatenate([out_boxes[:, 2:] - out_boxes[:, :2]])
    original = float(np.median(boxes[:, 2:] - boxes[:, :2]))
    assert float(np.median(sides)) > 1.5 * original  # twice the size, less what the crop cut off


def test_the_pair_pipeline_runs_the_look_first_and_is_seeded() -> None:
    cfg = AugmentConfig(render_p=1.0, paint_p=0.5, render_scale=(1.0, 2.0), crop_size=0)
    results = []
    for _ in range(2):
        transform = build_pair_transforms(cfg, train=True, seed=5)
        assert transform is not None and transform.look is not None
        results.append(apply_pair_transforms(transform, *_sample(2)))
    assert np.array_equal(results[0][0], results[1][0]) and np.array_equal(results[0][2], results[1][2])
    assert build_pair_transforms(AugmentConfig(), train=True).look is None  # off by default


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [("render_family", "studio", "render_family"), ("render_scale", (2.0, 1.0), "render_scale"), ("paint_p", 1.5, "paint_p")],
)
def test_bad_look_keys_fail_naming_the_key(key: str, value: object, words: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=words):
        AugmentConfig(**{key: value})


def test_a_single_image_model_trains_on_rendered_looks_too() -> None:
    from defect_detector.data.transforms import ImageTransform, apply_transforms, build_transforms

    cfg = AugmentConfig(render_p=1.0, paint_p=1.0, crop_size=0, hflip=0.0, vflip=0.0)
    board, _, boxes, labels = _sample(4)
    outputs = []
    for _ in range(2):
        transform = build_transforms(cfg, train=True, seed=1)
        assert isinstance(transform, ImageTransform)
        outputs.append(apply_transforms(transform, board, boxes, labels))
    image, out_boxes, out_labels = outputs[0]
    assert image.shape == board.shape and len(np.unique(image)) > 20  # a photograph
    assert len(out_boxes) > len(boxes) and len(out_boxes) == len(out_labels)  # painted defects with their boxes
    assert np.array_equal(outputs[0][0], outputs[1][0])  # seeded
    assert not isinstance(build_transforms(AugmentConfig(), train=True), ImageTransform)
