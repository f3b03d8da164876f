
import albumentations as A
import cv2
import numpy as np
import pytest

from defect_detector.core.config import AugmentConfig
from defect_detector.data.transforms import (
    InvertNegatives,
    SpecularGlare,
    apply_pair_transforms,
    apply_transforms,
    build_bbox_params,
    build_pair_transforms,
    build_transforms,
)

GEOMETRIC_ONLY = AugmentConfig(
    hflip=0.5,
    vflip=0.5,
    rotate_deg=10.0,
    rotate_p=0.7,
    scale=0.2,
    translate=0.1,
    affine_p=0.7,
    photometric_p=0.0,
    blur_p=0.0,
    noise_p=0.0,
    glare_p=0.0,
    min_visibility=0.3,
    min_box_size=2.0,
)
LEVELS = (170, 200, 230, 255)


def _scene() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Black 240x320 image with four separated rectangles, each filled with its own grey level (its label).

    Exposed borders are filled with 114, below every rectangle level."""
    image = np.zeros((240, 320), np.uint8)
    boxes = np.array([[20, 20, 80, 60], [200, 30, 290, 70], [40, 150, 90, 220], [180, 140, 300, 200]], np.float32)
    for (x1, y1, x2, y2), level in zip(boxes.astype(int), LEVELS):
        image[y1:y2, x1:x2] = level
    return image, boxes, np.arange(4, dtype=np.int64)


def _objects(image: np.ndarray) -> dict[int, np.ndarray]:
    """Pixel extent (xyxy) of each visible rectangle, keyed by label (identified by its grey level)."""
    count, components, stats, _ = cv2.connectedComponentsWithStats((image > 140).astype(np.uint8))
    out = {}
    for k in range(1, count):
        if stats[k, cv2.CC_STAT_AREA] < 20:
            continue
        level = np.median(image[components == k])
        label = int(np.argmin([abs(level - v) for v in LEVELS]))
        x, y, w, h = stats[k, :4]
        out[label] = np.array([x, y, x + w, y + h], np.float32)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_geometric_boxes_bound_the_moved_rectangles(seed: int) -> None:
    transform = build_transforms(GEOMETRIC_ONLY, train=True, seed=seed)
    image, boxes, labels = _scene()
    for _ in range(3):
        out_image, out_boxes, out_labels = apply_transforms(transform, image, boxes, labels)
        assert out_image.shape == image.shape and out_image.dtype == np.uint8
        assert out_boxes.dtype == np.float32 and out_labels.dtype == np.int64
        assert len(out_boxes) == len(out_labels)
        visible = _objects(out_image)
        for box, label in zip(out_boxes, out_labels):
            assert label in visible, f"box for label {label} but no such rectangle visible"
            np.testing.assert_allclose(box, visible[label], atol=2.5)
        h, w = out_image.shape
        for label, extent in visible.items():
            if extent[0] > 0 and extent[1] > 0 and extent[2] < w and extent[3] < h:
                assert label in out_labels, f"fully visible rectangle {label} lost its box"


def test_rectangle_moved_off_image_is_dropped_with_its_label() -> None:
    bbox_params = build_bbox_params(GEOMETRIC_ONLY)
    shift = A.Compose([A.Affine(translate_px={"x": -70, "y": 0}, p=1.0)], bbox_params=bbox_params, seed=0)
    image, boxes, labels = _scene()
    _, out_boxes, out_labels = apply_transforms(shift, image, boxes, labels)
    assert out_labels.tolist() == [1, 2, 3]  # label 0 keeps 10 of 60 px (< min_visibility 0.3); label 2 keeps 20 of 50
    expected = (boxes[1:] - [70, 0, 70, 0]).clip(min=0)
    np.testing.assert_allclose(out_boxes, expected, atol=0.5)


def test_out_of_range_and_degenerate_input_boxes() -> None:
    transform = build_transforms(GEOMETRIC_ONLY, train=True, seed=0)
    image, _, _ = _scene()
    boxes = np.array(
        [
            [-10, 20, 80, 60],  # partly outside: clipped, kept
            [400, 10, 450, 40],  # fully outside: dropped
            [30, 30, 30, 50],  # zero width: dropped
            [30, 30, 31, 50],  # 1 px wide: kept without a pipeline, dropped under min_box_size 2
            [20, 20, 80, 260],  # beyond the bottom: clipped, kept
        ],
        np.float32,
    )
    labels = np.array([0, 1, 2, 3, 4], np.int64)
    _, out_boxes, out_labels = apply_transforms(None, image, boxes, labels)
    assert out_labels.tolist() == [0, 3, 4]
    np.testing.assert_array_equal(out_boxes, [[0, 20, 80, 60], [30, 30, 31, 50], [20, 20, 80, 240]])
    _, _, pair_boxes, pair_labels = apply_pair_transforms(None, image, image.copy(), boxes, labels)
    np.testing.assert_array_equal(pair_boxes, out_boxes)
    np.testing.assert_array_equal(pair_labels, out_labels)
    _, out_boxes, out_labels = apply_transforms(transform, image, boxes, labels)
    assert set(out_labels.tolist()) <= {0, 4}
    assert ((out_boxes[:, 2:] - out_boxes[:, :2]) >= 2).all()


def test_empty_targets() -> None:
    transform = build_transforms(AugmentConfig(), train=True, seed=0)
    image, _, _ = _scene()
    out_image, out_boxes, out_labels = apply_transforms(transform, image, np.zeros((0, 4), np.float32), np.zeros(0, np.int64))
    assert out_image.shape == image.shape and out_boxes.shape == (0, 4) and out_labels.shape == (0,)


def test_full_default_pipeline_runs_on_grayscale() -> None:
    cfg = AugmentConfig(photometric_p=1.0, blur_p=1.0, noise_p=1.0, glare_p=1.0)
    transform = build_transforms(cfg, train=True, seed=1)
    image, boxes, labels = _scene()
    out_image, out_boxes, _ = apply_transforms(transform, image, boxes, labels)
    assert out_image.ndim == 2 and out_image.dtype == np.uint8
    assert (out_boxes[:, 2:] > out_boxes[:, :2]).all()


def test_build_transforms_none_and_zero_probabilities() -> None:
    assert build_transforms(AugmentConfig(), train=False) is None
    assert build_transforms(None, train=True) is None
    nothing = AugmentConfig(hflip=0, vflip=0, rotate_p=0, affine_p=0, photometric_p=0, blur_p=0, noise_p=0, glare_p=0)
    assert build_transforms(nothing, train=True) is None
    only_flip = build_transforms(
        AugmentConfig(vflip=0, rotate_p=0, affine_p=0, photometric_p=0, blur_p=0, noise_p=0, glare_p=0), train=True
    )
    assert [type(t).__name__ for t in only_flip.transforms] == ["HorizontalFlip"]


def test_transpose_swaps_axes_and_box_coordinates() -> None:
    only = AugmentConfig(hflip=0, vflip=0, transpose=1.0, rotate_p=0, affine_p=0, photometric_p=0, blur_p=0, noise_p=0, glare_p=0)
    image, boxes, labels = _scene()
    out_image, out_boxes, out_labels = apply_transforms(build_transforms(only, True, seed=0), image, boxes, labels)
    np.testing.assert_array_equal(out_image, image.T)
    np.testing.assert_allclose(out_boxes, boxes[:, [1, 0, 3, 2]], atol=1e-4)
    np.testing.assert_array_equal(out_labels, labels)


def test_same_seed_same_augmentation() -> None:
    image, boxes, labels = _scene()
    a = apply_transforms(build_transforms(AugmentConfig(), True, seed=3), image, boxes, labels)
    b = apply_transforms(build_transforms(AugmentConfig(), True, seed=3), image, boxes, labels)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_specular_glare_brightens_a_soft_ellipse() -> None:
    image = np.full((200, 200), 50, np.uint8)
    out = SpecularGlare(intensity=(0.8, 0.8), size=(0.1, 0.1), p=1.0)(image=image)["image"]
    assert out.shape == image.shape and out.dtype == np.uint8
    assert (out >= image).all()
    assert out.max() > 200
    assert (out == 50).mean() > 0.3
    white = np.full((50, 50), 255, np.uint8)
    assert (SpecularGlare(p=1.0)(image=white)["image"] == 255).all()


NEGATIVES_ONLY = AugmentConfig(
    hflip=0, vflip=0, rotate_p=0, affine_p=0, photometric_p=0, blur_p=0, noise_p=0, glare_p=0, invert_negatives=1.0
)


def test_invert_negatives_inverts_only_samples_without_boxes() -> None:
    transform = build_transforms(NEGATIVES_ONLY, True, seed=0)
    assert isinstance(transform.transforms[-1], InvertNegatives)
    image, boxes, labels = _scene()
    kept_image, kept_boxes, kept_labels = apply_transforms(transform, image, boxes, labels)
    np.testing.assert_array_equal(kept_image, image)
    np.testing.assert_array_equal(kept_boxes, boxes)
    np.testing.assert_array_equal(kept_labels, labels)
    negative, no_boxes, no_labels = apply_transforms(transform, image, boxes[:0], labels[:0])
    np.testing.assert_array_equal(negative, 255 - image)
    assert no_boxes.shape == (0, 4) and no_labels.shape == (0,)


def test_invert_negatives_sees_the_boxes_left_after_cropping() -> None:
    """A crop of a defect image that holds no box is a negative; one that holds a box is not."""
    cropped = NEGATIVES_ONLY.model_copy(update={"crop_size": 64, "crop_focus": 0.5})
    transform = build_transforms(cropped, True, seed=0)
    image = np.zeros((256, 256), np.uint8)
    boxes = np.array([[40, 40, 52, 52], [180, 200, 192, 212]], np.float32)
    for x1, y1, x2, y2 in boxes.astype(int):
        image[y1:y2, x1:x2] = 200
    labels = np.array([0, 1], np.int64)
    seen = {True: 0, False: 0}
    for _ in range(60):
        out_image, out_boxes, _ = apply_transforms(transform, image, boxes, labels)
        inverted = out_image.mean() > 127  # a crop is mostly black background
        assert inverted == (len(out_boxes) == 0)
        seen[inverted] += 1
    assert seen[True] > 0 and seen[False] > 0


PAIR_GEOMETRY = GEOMETRIC_ONLY.model_copy(update={"transpose": 0.5, "crop_size": 160, "crop_focus": 0.5, "ref_p": 0.0})


@pytest.mark.parametrize("seed", range(8))
def test_pair_geometry_moves_image_and_reference_together(seed: int) -> None:
    image, boxes, labels = _scene()
    transform = build_pair_transforms(PAIR_GEOMETRY, train=True, seed=seed)
    out_image, out_ref, out_boxes, out_labels = apply_pair_transforms(transform, image, image.copy(), boxes, labels)
    assert out_image.shape == out_ref.shape == (160, 160)
    np.testing.assert_array_equal(out_image, out_ref)  # every rectangle at the same place in both channels
    assert len(out_boxes) == len(out_labels)


def test_pair_photometric_jitter_is_drawn_independently() -> None:
    cfg = AugmentConfig(
        hflip=0.0, vflip=0.0, rotate_p=0.0, affine_p=0.0, brightness=0.3, contrast=0.3, photometric_p=1.0, blur_p=0.0, noise_p=0.0,
        glare_p=0.0, ref_p=0.0,
    )  # fmt: skip
    image, boxes, labels = _scene()
    means = []
    for seed in range(6):
        out_image, out_ref, _, _ = apply_pair_transforms(build_pair_transforms(cfg, True, seed), image, image.copy(), boxes, labels)
        means.append(abs(float(out_image.mean()) - float(out_ref.mean())))
    assert max(means) > 2.0  # same input, different lighting draws


def test_pair_residual_moves_the_reference_alone_within_its_bounds() -> None:
    cfg = AugmentConfig(
        hflip=0.0, vflip=0.0, rotate_p=0.0, affine_p=0.0, photometric_p=0.0, blur_p=0.0, noise_p=0.0, glare_p=0.0,
        ref_shift=3.0, ref_rotate=0.5, ref_p=1.0,
    )  # fmt: skip
    image, boxes, labels = _scene()
    moved = 0
    for seed in range(10):
        out_image, out_ref, out_boxes, _ = apply_pair_transforms(build_pair_transforms(cfg, True, seed), image, image.copy(), boxes, labels)
        np.testing.assert_array_equal(out_image, image)
        np.testing.assert_array_equal(out_boxes, boxes)
        got, want = _objects(out_ref), _objects(image)
        for label, box in want.items():
            # 3 px of shift plus 0.5 degrees about the centre move no corner of a 320x240 scene by more than ~4.4 px
            assert np.abs(got[label] - box).max() <= 5.0
        moved += int(not np.array_equal(out_ref, image))
    assert moved == 10


def test_pair_transforms_refuse_a_reference_of_another_size() -> None:
    image, boxes, labels = _scene()
    with pytest.raises(ValueError, match="reference is 100x50, image is 320x240"):
        apply_pair_transforms(None, image, np.zeros((50, 100), np.uint8), boxes, labels)
