"""Letterbox: resize a grayscale image into a square canvas, keeping its aspect ratio.

The original frame is the image as read from disk (or as augmented, which keeps its
size). The letterboxed frame is the ``imgsz x imgsz`` canvas the model sees. A point
maps between them as ``x_lb = x * scale + pad_x`` and ``y_lb = y * scale + pad_y``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import cv2
import numpy as np
import torch

BoxArray = TypeVar("BoxArray", np.ndarray, torch.Tensor)


@dataclass(frozen=True)
class LetterboxMeta:
    """How an ``orig_h x orig_w`` image was placed on the letterbox canvas.

    ``scale`` multiplies original-frame pixels; ``pad_x``/``pad_y`` are the canvas
    offsets (pixels) of the resized image's top-left corner.
    """

    scale: float
    pad_x: float
    pad_y: float
    orig_h: int
    orig_w: int


def letterbox(image: np.ndarray, imgsz: int, pad_value: int = 114) -> tuple[np.ndarray, LetterboxMeta]:
    """Resize ``image`` (uint8 ``[H, W]``) to fit ``imgsz x imgsz`` and centre it on a ``pad_value`` canvas.

    ``scale = min(imgsz / H, imgsz / W)``; the resized image is ``round(W * scale) x round(H * scale)``
    (INTER_AREA when shrinking, INTER_LINEAR when enlarging). Returns the uint8 ``[imgsz, imgsz]``
    canvas and its :class:`LetterboxMeta`.
    """
    if image.ndim != 2:
        raise ValueError(f"letterbox expects a single-channel [H, W] image, got shape {image.shape}")
    h, w = image.shape
    scale = min(imgsz / h, imgsz / w)
    new_w = min(imgsz, max(1, round(w * scale)))
    new_h = min(imgsz, max(1, round(h * scale)))
    if (new_w, new_h) != (w, h):
        interpolation = cv2.INTER_AREA if scale < 1.0 else cv2.INTER_LINEAR
        image = cv2.resize(image, (new_w, new_h), interpolation=interpolation)
    left = (imgsz - new_w) // 2
    top = (imgsz - new_h) // 2
    canvas = np.full((imgsz, imgsz), pad_value, dtype=np.uint8)
    canvas[top : top + new_h, left : left + new_w] = image
    return canvas, LetterboxMeta(scale=float(scale), pad_x=float(left), pad_y=float(top), orig_h=h, orig_w=w)


def _offsets(boxes: BoxArray, meta: LetterboxMeta) -> BoxArray:
    values = [meta.pad_x, meta.pad_y, meta.pad_x, meta.pad_y]
    if isinstance(boxes, torch.Tensor):
        return torch.tensor(values, dtype=boxes.dtype, device=boxes.device)
    return np.asarray(values, dtype=boxes.dtype)


def boxes_to_letterbox(boxes_xyxy: BoxArray, meta: LetterboxMeta) -> BoxArray:
    """Map xyxy boxes ``[..., 4]`` (float tensor or array) from the original frame to the letterboxed frame."""
    return boxes_xyxy * meta.scale + _offsets(boxes_xyxy, meta)


def boxes_from_letterbox(boxes_xyxy: BoxArray, meta: LetterboxMeta, clip: bool = True) -> BoxArray:
    """Map xyxy boxes ``[..., 4]`` from the letterboxed frame back to original-image pixels.

    The exact inverse of :func:`boxes_to_letterbox`. With ``clip`` the result is clipped to
    ``[0, orig_w] x [0, orig_h]`` (boxes reaching into the padding). Returns the input's type.
    """
    out = (boxes_xyxy - _offsets(boxes_xyxy, meta)) / meta.scale
    if clip:
        if isinstance(out, torch.Tensor):
            out[..., 0::2] = out[..., 0::2].clamp(0.0, float(meta.orig_w))
            out[..., 1::2] = out[..., 1::2].clamp(0.0, float(meta.orig_h))
        else:
            out[..., 0::2] = np.clip(out[..., 0::2], 0.0, meta.orig_w)
            out[..., 1::2] = np.clip(out[..., 1::2], 0.0, meta.orig_h)
    return out
