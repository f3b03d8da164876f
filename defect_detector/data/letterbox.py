"""Letterbox: resize a grayscale image into a square canvas, keeping its aspect ratio.

The original frame is the image as read from disk (or as augmented, which keeps its
size). The letterboxed frame is the ``imgsz x imgsz`` canvas the model sees. A point
maps between them as ``x_lb = x * scale + pad_x`` and ``y_lb = y * scale + pad_y``
(:func:`~defect_detector.core.boxes.boxes_to_letterbox` / ``boxes_from_letterbox``).
"""

from __future__ import annotations

import cv2
import numpy as np

from defect_detector.core.constants import PAD_VALUE
from defect_detector.core.types import LetterboxMeta


def letterbox(image: np.ndarray, imgsz: int, pad_value: int = PAD_VALUE) -> tuple[np.ndarray, LetterboxMeta]:
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
