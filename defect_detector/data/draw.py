"""Drawing detections on images with OpenCV: annotated ``predict`` outputs, the demo, the notebook and the
prediction grid of the evaluation plots.

Boxes are xyxy in the pixels of the image they are drawn on; images come back as new BGR uint8 arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

GT_COLOR_BGR = (0, 200, 0)
PRED_COLOR_BGR = (0, 0, 255)


def to_numpy(x: Any) -> np.ndarray:
    """Convert a torch tensor, list or array to a numpy array (``None`` becomes an empty array)."""
    if x is None:
        return np.zeros((0,), dtype=np.float64)
    if hasattr(x, "detach"):  # torch.Tensor, without importing torch here
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _class_name(label: int, class_names: Sequence[str]) -> str:
    """Name of class ``label``; its number when it is outside ``class_names``."""
    return class_names[label] if 0 <= label < len(class_names) else str(label)


def to_bgr_uint8(image: np.ndarray) -> np.ndarray:
    """Return a new BGR uint8 copy of a grayscale ``[H,W]``/``[H,W,1]`` or BGR ``[H,W,3]`` image.

    Float images with values in [0, 1] are scaled to [0, 255]; other values are clipped to [0, 255].
    """
    img = to_numpy(image)
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    if img.ndim not in (2, 3) or (img.ndim == 3 and img.shape[2] != 3):
        raise ValueError(f"expected a grayscale [H,W] or BGR [H,W,3] image, got shape {img.shape}")
    if img.dtype != np.uint8:
        is_float = np.issubdtype(img.dtype, np.floating)
        img = img.astype(np.float64)
        if img.size and is_float and img.max() <= 1.0:
            img = img * 255.0
        img = np.clip(np.round(img), 0, 255).astype(np.uint8)
    if img.ndim == 2:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    return img.copy()


def _line_thickness(height: int, width: int) -> int:
    """Box line thickness that stays visible from small tiles up to 2048x1536 images (2 px at 640, 5 px at 1536)."""
    return max(1, round(min(height, width) / 320))


def _font_scale(height: int, width: int) -> float:
    """OpenCV font scale proportional to image size (0.64 at 640, 1.5 at 1536), never below 0.4."""
    return max(0.4, min(height, width) / 1000.0)


def _text_color(color: tuple[int, int, int]) -> tuple[int, int, int]:
    """Black or white, whichever reads better on a filled background of BGR ``color``."""
    b, g, r = color
    return (0, 0, 0) if 0.114 * b + 0.587 * g + 0.299 * r > 150 else (255, 255, 255)


def draw_boxes(
    canvas: np.ndarray,
    boxes: Any,
    scores: Any,
    labels: Any,
    class_names: Sequence[str],
    color: tuple[int, int, int],
    label_at_bottom: bool = False,
) -> None:
    """Draw xyxy ``boxes`` with "name score" tags on BGR ``canvas`` in place.

    Tags sit above the box top-left corner (or below its bottom-left corner when ``label_at_bottom``),
    moved inside the image when they would fall outside it. ``scores`` may be ``None`` (no score shown).
    """
    boxes_np = to_numpy(boxes).reshape(-1, 4).astype(np.float64)
    labels_np = to_numpy(labels).reshape(-1).astype(np.int64)
    scores_np = None if scores is None else to_numpy(scores).reshape(-1).astype(np.float64)
    if len(labels_np) != len(boxes_np) or (scores_np is not None and len(scores_np) != len(boxes_np)):
        raise ValueError(
            f"boxes ({len(boxes_np)}), labels ({len(labels_np)}) and scores "
            f"({'None' if scores_np is None else len(scores_np)}) must have the same length"
        )
    height, width = canvas.shape[:2]
    thickness = _line_thickness(height, width)
    font_scale = _font_scale(height, width)
    font_thickness = max(1, thickness // 2)
    font = cv2.FONT_HERSHEY_SIMPLEX
    color = tuple(int(c) for c in color)
    text_color = _text_color(color)

    for i, box in enumerate(boxes_np):
        if not np.all(np.isfinite(box)):
            continue
        x1, y1, x2, y2 = (int(round(v)) for v in box)
        x1, x2 = sorted((min(max(x1, 0), width - 1), min(max(x2, 0), width - 1)))
        y1, y2 = sorted((min(max(y1, 0), height - 1), min(max(y2, 0), height - 1)))
        cv2.rectangle(canvas, (x1, y1), (x2, y2), color, thickness, lineType=cv2.LINE_AA)

        text = _class_name(int(labels_np[i]), class_names)
        if scores_np is not None:
            text = f"{text} {scores_np[i]:.2f}"
        (tw, th), baseline = cv2.getTextSize(text, font, font_scale, font_thickness)
        tag_h = th + baseline + 2
        if label_at_bottom:
            ty = y2 if y2 + tag_h <= height else max(y2 - tag_h, 0)
        else:
            ty = y1 - tag_h if y1 - tag_h >= 0 else min(y1, max(height - tag_h, 0))
        tx = min(x1, max(width - tw - 2, 0))
        cv2.rectangle(canvas, (tx, ty), (tx + tw + 2, ty + tag_h), color, thickness=-1)
        cv2.putText(canvas, text, (tx + 1, ty + th + 1), font, font_scale, text_color, font_thickness, lineType=cv2.LINE_AA)


def draw_detections(
    image: np.ndarray,
    boxes: Any,
    scores: Any,
    labels: Any,
    class_names: Sequence[str],
    color: tuple[int, int, int] = (0, 0, 255),
) -> np.ndarray:
    """Return a BGR uint8 copy of ``image`` with detections drawn on it (the input is not modified).

    Args:
        image: grayscale ``[H,W]`` (or ``[H,W,1]``) or BGR ``[H,W,3]`` image, uint8 (float in [0,1] also accepted).
        boxes: ``[N,4]`` xyxy boxes in the image's pixels (torch tensor, numpy array or nested list).
        scores: ``[N]`` confidences shown as "name 0.87", or ``None`` to show only the class name (e.g. ground truth).
        labels: ``[N]`` integer class indices into ``class_names`` (unknown indices are shown as numbers).
        class_names: class names, indexed by label.
        color: BGR colour of boxes and tag backgrounds; red by default.

    Line thickness and font scale grow with the image's smaller side so tags stay readable on both
    640x640 inputs and 2048x1536 originals.
    """
    canvas = to_bgr_uint8(image)
    draw_boxes(canvas, boxes, scores, labels, class_names, color)
    return canvas
