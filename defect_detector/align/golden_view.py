"""The golden view: a frame seen in its golden image's pixels, so that the golden image's own model features (computed
once per design) pair with every frame of that design, and the calls mapped back into the frame.

A registration gives a ``mapping``: golden-image pixels -> frame pixels (``align/mapping.py``, ``align/register.py``). The
frame view warps the golden image into each frame; the golden view warps each frame into the golden image instead
(:func:`warp_into_golden`), where the golden image's letterbox, tiles and features never change, and maps the calls
back (:func:`boxes_to_frame`). Where the frame has no data (the board moved off the camera's view), the golden view
holds the golden image's own pixels: nothing differs there. With a photometric fit (``align/photometric.py``) the board
is first brought to the golden image's levels, so that fill and board meet without a seam; and no call is kept whose
centre lies in that area or within :data:`SEAM_MARGIN` px of it (``GoldenView.callable``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import cv2
import numpy as np
import torch

from defect_detector.align.mapping import Mapping
from defect_detector.align.photometric import Photometric
from defect_detector.core.boxes import centres_inside
from defect_detector.core.constants import CRUSHED, SATURATED
from defect_detector.core.frame_record import Prepared, StageContext

_EDGE_PX = 3
"""Pixels off the frame's edge not counted as data (interpolation there mixes in the border), as ``covered_area``."""

SEAM_MARGIN = 12
"""Golden-image pixels next to the area the moved board does not cover where no call is kept. A band no deeper than
the frame's own edge (:data:`_EDGE_PX` plus 2: a board that did not move off) gets no margin."""


@dataclass(frozen=True)
class GoldenView:
    """A frame in golden-image pixels. ``board``: uint8 ``[gh, gw]`` (the golden image's size), the frame warped by the
    inverse of ``matrix`` and the golden image's own pixels where the frame has none; ``valid``: bool ``[gh, gw]``,
    where the frame has data; ``mapping``: golden -> frame pixels (``align/mapping.py``); ``frame_shape``: ``(H, W)``;
    ``callable``: bool ``[gh, gw]``, where a call's centre may lie (``valid`` less the seam margin)."""

    board: np.ndarray
    valid: np.ndarray
    mapping: Mapping
    frame_shape: tuple[int, int]
    callable: np.ndarray | None = None


def _callable(valid: np.ndarray) -> np.ndarray:
    """``valid`` less :data:`SEAM_MARGIN` px around the uncovered area deeper than the frame's own edge band."""
    uncovered = (~valid).astype(np.uint8)
    depth = 2 * (_EDGE_PX + 2) + 1
    deep = cv2.erode(uncovered, np.ones((depth, depth), np.uint8), borderType=cv2.BORDER_CONSTANT, borderValue=1)
    if not deep.any():
        return valid
    reach = 2 * (SEAM_MARGIN + _EDGE_PX + 2) + 1
    return valid & (cv2.dilate(deep, np.ones((reach, reach), np.uint8)) == 0)




def warp_into_golden(frame: np.ndarray, golden: np.ndarray, mapping: Mapping, photometric: Photometric | None = None) -> GoldenView:
    """The :class:`GoldenView` of uint8 ``frame`` ``[H, W]`` against uint8 ``golden`` ``[gh, gw]`` registered by ``mapping``
    (golden -> frame pixels), bilinear as the frame view warps the golden image; ``photometric``: the golden image's
    levels fitted to the frame's, whose inverse brings the warped board to the golden image's levels (None: as read);
    a board pixel the camera clipped (``core/constants.py`` ``SATURATED``, ``CRUSHED``) is a bound, so where the golden image lies
    beyond its inverse, the golden image's level is read: a pad a camera at a little more gain saturates is no
    difference, a bright defect on a darker board still is."""
    board = mapping.frame_into_golden(frame, cv2.INTER_LINEAR, 0)
    ones = mapping.frame_into_golden(np.ones(frame.shape[:2], np.uint8), cv2.INTER_NEAREST, 0)
    side = 2 * _EDGE_PX + 1
    valid = cv2.erode(ones, np.ones((side, side), np.uint8), borderType=cv2.BORDER_REPLICATE) > 0
    if photometric is not None and not photometric.is_identity:
        read, board = board, photometric.to_golden(board, mapping)
        # a pixel the camera clipped is a bound, at least (at most) what it maps back to: the golden image's level beyond it
        board = np.where(read >= SATURATED, np.maximum(board, golden), np.where(read <= CRUSHED, np.minimum(board, golden), board))
    board = np.where(valid, board, golden)
    return GoldenView(board, valid, mapping, (int(frame.shape[0]), int(frame.shape[1])), _callable(valid))


def boxes_to_frame(boxes: torch.Tensor, view: GoldenView) -> torch.Tensor:
    """float32 ``[K, 4]`` xyxy boxes in golden-image pixels -> the axis-aligned boxes around their outlines mapped into
    the frame (``view.mapping``: each side sampled at its ends and midpoint), clipped to the frame: float32 ``[K, 4]``."""
    if len(boxes) == 0:
        return boxes
    x1, y1, x2, y2 = boxes.double().numpy().T
    xm, ym = (x1 + x2) / 2, (y1 + y2) / 2
    xs = np.stack([x1, xm, x2, x2, x2, xm, x1, x1], 1)
    ys = np.stack([y1, y1, y1, ym, y2, y2, y2, ym], 1)
    qx, qy = view.mapping.to_frame(xs, ys)
    h, w = view.frame_shape
    out = np.stack([qx.min(1).clip(0, w), qy.min(1).clip(0, h), qx.max(1).clip(0, w), qy.max(1).clip(0, h)], 1)
    return torch.from_numpy(out).float()


def centres_valid(boxes: torch.Tensor, view: GoldenView) -> torch.Tensor:
    """bool ``[K]``: whether each box's centre (golden-image pixels) lies where the frame has data, off the seam margin
    (``view.callable``)."""
    return centres_inside(boxes, view.callable if view.callable is not None else view.valid)


def golden_view(context: StageContext, record: Prepared) -> Prepared:
    """The golden-view stage: when the model sees frames in their golden image's pixels (``context.golden_view``), the
    frame warped into its design's golden image (:func:`warp_into_golden`, at the golden image's levels); else handed on."""
    if not context.golden_view or record.design is None:
        return record
    reg = record.registration
    return dataclasses.replace(record, view=warp_into_golden(record.frame.image, record.design.image, reg.mapping, reg.photometric))
