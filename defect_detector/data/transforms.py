"""Box-aware training augmentation (albumentations), applied in the original image frame.

Images are grayscale uint8 ``[H, W]``; boxes are float32 xyxy pixels ``[N, 4]`` in the same
frame (albumentations' ``pascal_voc``), labels int64 ``[N]``. Geometric transforms fill the
exposed border with the letterbox pad value (114, "no data"): black or white would paint copper
or substrate depending on the board's polarity, reflection would mirror unlabelled defects into
view, and edge replication would smear defects that touch the border.
"""

from __future__ import annotations

import math
from typing import Any

import albumentations as A
import cv2
import numpy as np
import torch
from torchvision.ops import clip_boxes_to_image, remove_small_boxes

from defect_detector.core.config import AugmentConfig
from defect_detector.core.constants import PAD_VALUE
from defect_detector.data.line_capture import LineCapture
from defect_detector.looks.looks import LookTransform

_BORDER = cv2.BORDER_CONSTANT
_FILL = PAD_VALUE


class SpecularGlare(A.ImageOnlyTransform):
    """A bright, soft elliptical highlight, like a specular reflection under ring lighting.

    Pixels are blended toward white: ``out = img + intensity * m * (255 - img)``, where ``m`` in [0, 1]
    is a rotated Gaussian ellipse whose semi-axes (standard deviations) are ``size`` times the
    shorter image side. Works on uint8 ``[H, W]`` or ``[H, W, C]`` images.
    """

    def __init__(self, intensity: tuple[float, float] = (0.3, 0.8), size: tuple[float, float] = (0.05, 0.25), p: float = 0.5):
        super().__init__(p=p)
        self.intensity = intensity
        self.size = size

    def get_params_dependent_on_data(self, params: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        h, w = params["shape"][:2]
        side = min(h, w)
        rnd = self.py_random
        return {
            "center": (rnd.uniform(0, w), rnd.uniform(0, h)),
            "axes": (max(1.0, rnd.uniform(*self.size) * side), max(1.0, rnd.uniform(*self.size) * side)),
            "angle": rnd.uniform(0.0, math.pi),
            "strength": rnd.uniform(*self.intensity),
        }

    def apply(
        self,
        img: np.ndarray,
        center: tuple[float, float],
        axes: tuple[float, float],
        angle: float,
        strength: float,
        **params: Any,
    ) -> np.ndarray:
        h, w = img.shape[:2]
        reach = 3.0 * max(axes)
        x0, x1 = max(0, int(center[0] - reach)), min(w, int(center[0] + reach) + 1)
        y0, y1 = max(0, int(center[1] - reach)), min(h, int(center[1] + reach) + 1)
        if x0 >= x1 or y0 >= y1:
            return img
        ys, xs = np.ogrid[y0:y1, x0:x1]
        dx = xs.astype(np.float32) - center[0]
        dy = ys.astype(np.float32) - center[1]
        cos, sin = math.cos(angle), math.sin(angle)
        u = (dx * cos + dy * sin) / axes[0]
        v = (dy * cos - dx * sin) / axes[1]
        weight = strength * np.exp(-0.5 * (u * u + v * v))
        if img.ndim == 3:
            weight = weight[..., None]
        out = img.copy()
        roi = out[y0:y1, x0:x1].astype(np.float32)
        out[y0:y1, x0:x1] = np.clip(roi + weight * (255.0 - roi) + 0.5, 0, 255).astype(np.uint8)
        return out


class InvertNegatives(A.ImageOnlyTransform):
    """Invert a uint8 image (``255 - x``) only if the sample holds no box at this point of the pipeline.

    A defect-free image stays defect-free when copper and substrate swap grey levels, so the
    inverted image is a valid negative; an image with boxes is left alone, because inversion would
    turn missing copper into extra copper and change what its labels mean.
    """

    def get_params_dependent_on_data(self, params: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        return {"negative": len(data.get("bboxes", ())) == 0}

    def apply(self, img: np.ndarray, negative: bool, **params: Any) -> np.ndarray:
        return 255 - img if negative else img


class RigidJitter(A.Affine):
    """``A.Affine`` as a rigid move: a rotation of up to ``degrees`` about the image centre and a shift of up to ``shift``
    pixels along each axis (bilinear; the exposed border filled with 114). The shift is drawn sub-pixel (``A.Affine``'s
    own ``translate_px`` draws whole pixels). Simulates the residual error of registering a reference to its frame."""

    def __init__(self, shift: float = 2.0, degrees: float = 0.3, p: float = 1.0):
        super().__init__(rotate=(-degrees, degrees), border_mode=_BORDER, fill=_FILL, p=p)
        self.shift = shift

    def _get_translate_params(self, image_shape: tuple[int, int]) -> dict[str, float]:
        rnd = self.py_random
        return {"x": rnd.uniform(-self.shift, self.shift), "y": rnd.uniform(-self.shift, self.shift)}


def build_bbox_params(cfg: AugmentConfig) -> A.BboxParams:
    """pascal_voc (xyxy pixel) box handling: input boxes clipped to the image (empty ones dropped), output boxes
    dropped when mostly cut off (``min_visibility``) or narrower or shorter than ``min_box_size`` (at least 1 px)."""
    size = max(1.0, cfg.min_box_size)
    return A.BboxParams(
        format="pascal_voc",
        label_fields=["labels"],
        min_visibility=cfg.min_visibility,
        min_width=size,
        min_height=size,
        min_area=size**2,
        clip=True,
        filter_invalid_bboxes=True,
    )


def _geometric_steps(cfg: AugmentConfig) -> list[A.BasicTransform]:
    """Transforms that move pixels (and boxes); for pairs they act on the image and its reference alike."""
    steps: list[A.BasicTransform] = []
    if cfg.hflip > 0:
        steps.append(A.HorizontalFlip(p=cfg.hflip))
    if cfg.vflip > 0:
        steps.append(A.VerticalFlip(p=cfg.vflip))
    if cfg.transpose > 0:
        steps.append(A.Transpose(p=cfg.transpose))
    if cfg.rotate_p > 0 and cfg.rotate_deg > 0:
        steps.append(A.Rotate(limit=(-cfg.rotate_deg, cfg.rotate_deg), border_mode=_BORDER, fill=_FILL, p=cfg.rotate_p))
    if cfg.affine_p > 0 and (cfg.scale > 0 or cfg.translate > 0):
        steps.append(
            A.Affine(
                scale=(1.0 - cfg.scale, 1.0 + cfg.scale),
                translate_percent=(-cfg.translate, cfg.translate),
                keep_ratio=True,
                border_mode=_BORDER,
                fill=_FILL,
                p=cfg.affine_p,
            )
        )
    if cfg.crop_size > 0:
        steps.append(A.PadIfNeeded(cfg.crop_size, cfg.crop_size, position="center", border_mode=_BORDER, fill=_FILL))
        focused = A.AtLeastOneBBoxRandomCrop(cfg.crop_size, cfg.crop_size, p=cfg.crop_focus)
        anywhere = A.RandomCrop(cfg.crop_size, cfg.crop_size, p=1.0 - cfg.crop_focus)
        steps.append(A.OneOf([focused, anywhere], p=1.0))
    return steps


def _invert_steps(cfg: AugmentConfig) -> list[A.BasicTransform]:
    """The inversion of negatives (it reads the boxes left after cropping); for pairs it inverts both images."""
    return [InvertNegatives(p=cfg.invert_negatives)] if cfg.invert_negatives > 0 else []


def _photometric_steps(cfg: AugmentConfig) -> list[A.BasicTransform]:
    """Transforms of grey levels only (lighting, optics, sensor); for pairs each image draws its own."""
    steps: list[A.BasicTransform] = []
    photometric: list[A.BasicTransform] = []
    if cfg.brightness > 0 or cfg.contrast > 0:
        photometric.append(A.RandomBrightnessContrast(brightness_limit=cfg.brightness, contrast_limit=cfg.contrast, p=1.0))
    if tuple(cfg.gamma) != (100.0, 100.0):
        photometric.append(A.RandomGamma(gamma_limit=tuple(cfg.gamma), p=1.0))
    if cfg.photometric_p > 0 and photometric:
        steps.append(A.Sequential(photometric, p=cfg.photometric_p))
    if cfg.blur_p > 0:
        steps.append(A.OneOf([A.GaussianBlur(sigma_limit=(0.3, 1.2), p=1.0), A.MotionBlur(blur_limit=(3, 5), p=1.0)], p=cfg.blur_p))
    if cfg.noise_p > 0:
        noises = [A.GaussNoise(std_range=(0.01, 0.05), p=1.0), A.MultiplicativeNoise(multiplier=(0.9, 1.1), elementwise=True, p=1.0)]
        steps.append(A.OneOf(noises, p=cfg.noise_p))
    if cfg.glare_p > 0:
        steps.append(SpecularGlare(p=cfg.glare_p))
    return steps


class ImageTransform:
    """Single-image augmentation with a look step first: ``look`` (``looks/looks.py``) renders and paints the image as
    the board of a pair with itself (its golden image is dropped), then ``compose`` (albumentations, or None) runs as
    :func:`build_transforms` builds it. Called like an ``A.Compose``: ``(image=, bboxes=, labels=) -> dict``."""

    def __init__(self, look: LookTransform, compose: A.Compose | None) -> None:
        self.look = look
        self.compose = compose

    @property
    def processors(self) -> dict[str, Any]:
        return self.compose.processors if self.compose is not None else {}

    def set_random_state(self, rng: np.random.Generator, py_random: Any = None) -> None:
        self.look.set_random_state(rng)
        if self.compose is not None:
            self.compose.set_random_state(rng, py_random)

    def set_random_seed(self, seed: int) -> None:
        self.look.set_random_state(np.random.default_rng(seed))
        if self.compose is not None:
            self.compose.set_random_seed(seed)

    def __call__(self, image: np.ndarray, bboxes: Any, labels: Any) -> dict[str, Any]:
        boxes, labels = np.asarray(bboxes, np.float32).reshape(-1, 4), np.asarray(labels, np.int64).reshape(-1)
        image, _, boxes, labels = self.look(image, image, boxes, labels)
        if self.compose is None:
            boxes, labels = _inside(image.shape, boxes, labels)
            return {"image": image, "bboxes": boxes, "labels": labels}
        return self.compose(image=image, bboxes=boxes, labels=labels)


def _look(cfg: AugmentConfig, seed: int | None) -> LookTransform | None:
    if cfg.render_p == 0 and cfg.paint_p == 0:
        return None
    look = LookTransform(cfg.render_p, cfg.render_family, cfg.render_scale, cfg.paint_p, cfg.paint_max, cfg.min_visibility, cfg.paint_scale)
    if seed is not None:
        look.set_random_state(np.random.default_rng(seed))
    return look


def build_transforms(cfg: AugmentConfig | None, train: bool, seed: int | None = None) -> A.Compose | ImageTransform | None:
    """The training augmentation pipeline for ``cfg``, or None (evaluation, no config, or nothing enabled).

    ``seed`` fixes albumentations' own random state (it ignores numpy/random global seeds);
    :func:`defect_detector.data.collate.build_loader` reseeds it per sample from ``(seed, epoch, index)``. The inversion of
    negatives runs last, after the photometric steps, as it always has. With ``render_p`` or ``paint_p`` the look step
    runs first (:class:`ImageTransform`).
    """
    if not train or cfg is None:
        return None
    steps = _geometric_steps(cfg) + _photometric_steps(cfg) + _invert_steps(cfg)
    compose = A.Compose(steps, bbox_params=build_bbox_params(cfg), seed=seed) if steps else None
    look = _look(cfg, seed)
    return compose if look is None else ImageTransform(look, compose)


class PairTransform:
    """Augmentation of an (image, reference) pair, both uint8 ``[H, W]`` in the image's frame.

    ``geometric`` (albumentations, the reference as an ``additional_targets`` image) moves both and
    the boxes identically; ``photometric`` runs once on the image and once, with its own draw, on the
    reference; ``residual`` then moves the reference alone by a small random rigid transform (the
    error registration leaves). Each part is an ``A.Compose`` or None; ``set_random_seed`` seeds all. ``look``
    (``looks/looks.py``, or None) runs before them all: scale, paint, render. ``capture`` (``data/line_capture.py``, or
    None) runs after the photometric steps, before the residual: the board as a line delivers it (every factor of
    ``core/capture.py``), seen back in the pair's frame and matched to the golden image's levels.
    """

    def __init__(  # noqa: PLR0913 - one argument per part
        self,
        geometric: A.Compose | None,
        photometric: A.Compose | None,
        residual: A.Compose | None,
        look: LookTransform | None = None,
        capture: LineCapture | None = None,
    ) -> None:
        self.geometric = geometric
        self.photometric = photometric
        self.residual = residual
        self.look = look
        self.capture = capture

    def set_random_seed(self, seed: int) -> None:
        for offset, part in enumerate((self.geometric, self.photometric, self.residual)):
            if part is not None:
                part.set_random_seed(seed + offset)
        if self.look is not None:
            self.look.set_random_state(np.random.default_rng(seed + 3))
        if self.capture is not None:
            self.capture.set_random_state(np.random.default_rng(seed + 4))

    def __call__(
        self, image: np.ndarray, reference: np.ndarray, boxes: np.ndarray, labels: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Returns ``(image, reference, boxes float32 [M, 4], labels int64 [M])`` in the augmented frame."""
        if self.look is not None:
            image, reference, boxes, labels = self.look(image, reference, boxes, labels)
        if self.geometric is not None:
            out = self.geometric(image=image, reference=reference, bboxes=boxes, labels=labels)
            image, reference, boxes, labels = out["image"], out["reference"], out["bboxes"], out["labels"]
        else:
            boxes, labels = _inside(image.shape, boxes, labels)
        if self.photometric is not None:
            image = self.photometric(image=image)["image"]
            reference = self.photometric(image=reference)["image"]
        if self.capture is not None:
            image = self.capture(image, reference, np.asarray(boxes, np.float32).reshape(-1, 4))
        if self.residual is not None:
            reference = self.residual(image=reference)["image"]
        return image, reference, np.asarray(boxes, np.float32).reshape(-1, 4), np.asarray(labels, np.int64).reshape(-1)


def build_pair_transforms(cfg: AugmentConfig | None, train: bool, seed: int | None = None) -> PairTransform | None:
    """The pair-aware training pipeline for reference models (see :class:`PairTransform`), or None."""
    if not train or cfg is None:
        return None
    geometric = _geometric_steps(cfg) + _invert_steps(cfg)
    photometric = _photometric_steps(cfg)
    residual = None
    if cfg.ref_p > 0 and (cfg.ref_shift > 0 or cfg.ref_rotate > 0):
        move = RigidJitter(cfg.ref_shift, cfg.ref_rotate, p=cfg.ref_p)
        residual = A.Compose([move], seed=seed)
    look = _look(cfg, seed)
    capture = LineCapture(cfg.capture_p, cfg.capture_seam_p, cfg.capture_hidden_p) if cfg.capture_p > 0 else None
    if capture is not None and seed is not None:
        capture.set_random_state(np.random.default_rng(seed + 4))
    return PairTransform(
        A.Compose(geometric, bbox_params=build_bbox_params(cfg), additional_targets={"reference": "image"}, seed=seed)
        if geometric
        else None,
        A.Compose(photometric, seed=seed) if photometric else None,
        residual,
        look,
        capture,
    )


def _inside(shape: tuple[int, ...], boxes_xyxy: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    """Boxes (float32 ``[N, 4]`` xyxy pixels) clipped to an image of ``shape`` ``(H, W)``, those then under 1 px wide
    or high dropped with their labels (int64 ``[N]``): what :func:`build_bbox_params` does where no pipeline runs."""
    boxes = clip_boxes_to_image(torch.as_tensor(np.asarray(boxes_xyxy, np.float32).reshape(-1, 4)), shape[:2])
    keep = remove_small_boxes(boxes, 1.0).numpy()
    return boxes.numpy()[keep], np.asarray(labels, np.int64).reshape(-1)[keep]


def apply_transforms(
    transform: A.Compose | None,
    image: np.ndarray,
    boxes_xyxy: np.ndarray,
    labels: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Augment one sample in its original frame.

    Args:
        transform: a pipeline from :func:`build_transforms` (None: only clip and filter).
        image: uint8 ``[H, W]``.
        boxes_xyxy: float32 ``[N, 4]`` xyxy pixels.
        labels: int64 ``[N]``.

    Boxes are clipped to the image, and boxes narrower or shorter than the pipeline's minimum box size (at least
    1 px) or mostly cut off are dropped together with their labels (:func:`build_bbox_params`).
    Returns ``(image uint8 [H', W'], boxes float32 [M, 4], labels int64 [M])``.
    """
    if transform is None:
        return (image, *_inside(image.shape, boxes_xyxy, labels))
    boxes, labels = np.asarray(boxes_xyxy, np.float32).reshape(-1, 4), np.asarray(labels, np.int64).reshape(-1)
    out = transform(image=image, bboxes=boxes, labels=labels)
    return out["image"], np.asarray(out["bboxes"], np.float32).reshape(-1, 4), np.asarray(out["labels"], np.int64).reshape(-1)


def apply_pair_transforms(
    transform: PairTransform | None,
    image: np.ndarray,
    reference: np.ndarray,
    boxes_xyxy: np.ndarray,
    labels: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`apply_transforms` for an (image uint8 ``[H, W]``, reference uint8 ``[H, W]``) pair in the image's
    frame. Returns ``(image [H', W'], reference [H', W'], boxes float32 [M, 4], labels int64 [M])``."""
    if reference.shape != image.shape:
        raise ValueError(f"reference is {reference.shape[1]}x{reference.shape[0]}, image is {image.shape[1]}x{image.shape[0]}")
    if transform is None:
        return (image, reference, *_inside(image.shape, boxes_xyxy, labels))
    return transform(image, reference, np.asarray(boxes_xyxy, np.float32).reshape(-1, 4), np.asarray(labels, np.int64).reshape(-1))
