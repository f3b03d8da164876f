"""Pure box operations. One coordinate convention per function name.

``xyxy``: absolute pixels ``(x1, y1, x2, y2)``; ``cxcywh``: centre and size;
``xywh``: COCO's top-left corner and size; ``ltrb``: distances from an anchor
point to the left, top, right and bottom box edges. All take and return
float tensors ``[..., 4]``. IoU comes from ``torchvision.ops``.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch
from torchvision.ops import box_iou

from defect_detector.core.types import LetterboxMeta

BoxArray = TypeVar("BoxArray", np.ndarray, torch.Tensor)

__all__ = [
    "boxes_from_letterbox",
    "boxes_to_letterbox",
    "box_iou",
    "clip_xyxy",
    "cxcywh_to_xyxy",
    "ltrb_to_xyxy",
    "xywh_to_xyxy",
    "xyxy_to_cxcywh",
    "xyxy_to_ltrb",
    "xyxy_to_xywh",
]


def xyxy_to_cxcywh(boxes: torch.Tensor) -> torch.Tensor:
    """``[..., 4]`` xyxy -> ``[..., 4]`` cxcywh."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack(((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1), dim=-1)


def cxcywh_to_xyxy(boxes: torch.Tensor) -> torch.Tensor:
    """``[..., 4]`` cxcywh -> ``[..., 4]`` xyxy."""
    cx, cy, w, h = boxes.unbind(-1)
    return torch.stack((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), dim=-1)


def xyxy_to_xywh(boxes: torch.Tensor) -> torch.Tensor:
    """``[..., 4]`` xyxy -> ``[..., 4]`` COCO xywh (top-left corner, width, height)."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack((x1, y1, x2 - x1, y2 - y1), dim=-1)


def xywh_to_xyxy(boxes: torch.Tensor) -> torch.Tensor:
    """``[..., 4]`` COCO xywh -> ``[..., 4]`` xyxy."""
    x, y, w, h = boxes.unbind(-1)
    return torch.stack((x, y, x + w, y + h), dim=-1)


def ltrb_to_xyxy(distances: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Edge distances ``[..., A, 4]`` from anchor points ``[A, 2]`` (x, y) -> xyxy ``[..., A, 4]``."""
    left_top, right_bottom = distances[..., :2], distances[..., 2:]
    return torch.cat((points - left_top, points + right_bottom), dim=-1)


def xyxy_to_ltrb(boxes: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """xyxy ``[..., A, 4]`` -> edge distances from anchor points ``[A, 2]``; negative outside the box."""
    return torch.cat((points - boxes[..., :2], boxes[..., 2:] - points), dim=-1)


def clip_xyxy(boxes: torch.Tensor, height: int | float, width: int | float) -> torch.Tensor:
    """Clip xyxy boxes to the image ``[0, width] x [0, height]``."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack((x1.clamp(0, width), y1.clamp(0, height), x2.clamp(0, width), y2.clamp(0, height)), dim=-1)


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
