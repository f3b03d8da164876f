"""Box operations that torchvision does not provide. One coordinate convention per function name.

Inside the package boxes are ``xyxy`` absolute pixels, float tensors ``[..., 4]``. Conversions to COCO ``xywh``
and clipping are ``torchvision.ops.box_convert`` / ``clip_boxes_to_image``, used where they are needed; what is
here is what torchvision lacks: ``ltrb`` (distances from an anchor point to the left, top, right and bottom box
edges, the head's box parametrisation) and the letterbox mapping between a frame and the model input.
"""

from __future__ import annotations

import numpy as np
import torch
from torchvision.ops import box_convert, clip_boxes_to_image

from defect_detector.core.types import LetterboxMeta


def box_centres(boxes_xyxy: torch.Tensor | np.ndarray) -> np.ndarray:
    """float64 ``[K, 2]``: the centres ``(x, y)`` of xyxy boxes ``[K, 4]`` (tensor or array), in the same pixels."""
    boxes = torch.as_tensor(boxes_xyxy).detach().cpu().double().reshape(-1, 4)
    return box_convert(boxes, "xyxy", "cxcywh")[:, :2].numpy()


def centres_inside(boxes_xyxy: torch.Tensor, mask: np.ndarray) -> torch.Tensor:
    """bool ``[K]``: whether each box's centre (pixels of ``mask``'s frame, truncated to its pixel) lies where bool
    ``mask`` ``[H, W]`` is set; centres off the frame read its nearest edge pixel."""
    if len(boxes_xyxy) == 0:
        return torch.zeros(0, dtype=torch.bool)
    h, w = mask.shape
    centres = torch.from_numpy(box_centres(boxes_xyxy)).long()
    cx, cy = centres[:, 0].clamp(0, w - 1).numpy(), centres[:, 1].clamp(0, h - 1).numpy()
    return torch.from_numpy(np.ascontiguousarray(mask[cy, cx]))


def ltrb_to_xyxy(distances: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Edge distances ``[..., A, 4]`` from anchor points ``[A, 2]`` (x, y) -> xyxy ``[..., A, 4]``."""
    left_top, right_bottom = distances[..., :2], distances[..., 2:]
    return torch.cat((points - left_top, points + right_bottom), dim=-1)


def xyxy_to_ltrb(boxes: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """xyxy ``[..., A, 4]`` -> edge distances from anchor points ``[A, 2]``; negative outside the box."""
    return torch.cat((points - boxes[..., :2], boxes[..., 2:] - points), dim=-1)


def _offsets(boxes: torch.Tensor, meta: LetterboxMeta) -> torch.Tensor:
    return torch.tensor([meta.pad_x, meta.pad_y, meta.pad_x, meta.pad_y], dtype=boxes.dtype, device=boxes.device)


def boxes_to_letterbox(boxes_xyxy: torch.Tensor, meta: LetterboxMeta) -> torch.Tensor:
    """Map xyxy boxes ``[..., 4]`` (float) from the original frame to the letterboxed frame: ``x * scale + pad``."""
    return boxes_xyxy * meta.scale + _offsets(boxes_xyxy, meta)


def boxes_from_letterbox(boxes_xyxy: torch.Tensor, meta: LetterboxMeta, clip: bool = True) -> torch.Tensor:
    """Map xyxy boxes ``[..., 4]`` from the letterboxed frame back to original-image pixels, the exact inverse of
    :func:`boxes_to_letterbox`; with ``clip``, clipped to ``[0, orig_w] x [0, orig_h]`` (boxes reaching into the padding)."""
    out = (boxes_xyxy - _offsets(boxes_xyxy, meta)) / meta.scale
    return clip_boxes_to_image(out, (meta.orig_h, meta.orig_w)) if clip else out
