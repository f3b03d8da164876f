"""The difference gate of a tiled frame: a golden-template call stands only where the frame and its golden image differ.

A board seen one by one shows its own edge as the image's edge, and the model has learnt to ignore what it finds
there. A frame of several boards (a panel, or the tiles benchmark's 2048x1536 frames of six DeepPCB boards) shows
every board's edge inside a tile, against bare substrate, and the model calls defects along it: copper cut by the
board's edge reads as open tracks, and a golden image's dark border band (DeepPCB's golden images have one, 1-4 px
wide, that their boards lack) reads as a defect along the whole edge. On the tiles benchmark (golden-template model,
white substrate) 52 of the 83 false calls at 99% of defects caught lay within 4 px of a board's edge, and 42 of the
83 lay where the frame and its golden image do not differ at all.

A defect is a difference between the board and its golden image, so the gate keeps a call only when its box, grown
by ``grow`` px, holds at least ``min_pixels`` differing pixels (:func:`difference_map`: beyond ``tolerance`` px of
what the other image shows, slivers thinner than ``sliver`` px removed). The tolerance and the sliver are smaller
than the golden check's (``align/golden_check.py``: 2 px and 3 px): DeepPCB has opens and mouse bites whose only
difference is 2 px thin (4 of its 892 held-out defects), and the gate must keep every defect.
"""

from __future__ import annotations

import cv2
import numpy as np
import torch

from defect_detector.align.golden_check import levels
from defect_detector.core.types import TileRecord

TOLERANCE_PX = 2
"""A pixel differs only from what the other image shows nowhere within this many pixels (a 5x5 neighbourhood)."""

SLIVER_PX = 2
"""Differences thinner than this (px) are removed (an opening with a square of this side)."""

CONTRAST = 0.1
"""A pixel differs when it lies more than this share of its image's dark-bright contrast outside the other's. Low,
for photographs: their painted defects differ from the golden image by a small share of the contrast its bright pads
set (0.3 kept 158 of 345 defects of 40 rendered ``holdout`` boards, 0.1 kept 335; 1280 px frames 214 and 343); on
DeepPCB (binarized) 0.1 and 0.3 give the same tiles benchmark numbers."""

MIN_PIXELS = 8
"""A call stands when its grown box holds at least this many differing pixels."""

GROW_PX = 2
"""Boxes are grown by this many pixels on each side before counting (a box drawn tight on a defect's edge)."""

LINE_PX = 64
"""A dark line of the golden image, straight along a row or column for at least this many pixels and thinner than
:data:`THIN_PX`, is the golden image's border (DeepPCB's golden images have one, 1-4 px wide, that their boards lack),
not copper: differences on it (and 1 px around it) do not count. 0: off."""

THIN_PX = 5
"""Dark golden lines at least this wide are copper (a track), whatever their length: their differences count."""


_UNIT = 127.5
"""uint8 steps per unit of an image's dark-bright contrast: levels -0.5..1.5 of it map to 0..255 (:func:`_levels_lut`)."""


def _levels_lut(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """uint8 ``[256]``: each grey level of ``image`` as its place between the image's dark (0) and bright (1) level
    (:func:`~defect_detector.align.golden_check.levels`), in :data:`_UNIT` steps from -0.5, clipped to 0..255."""
    dark, bright = levels(image, mask)
    unit = (np.arange(256, dtype=np.float64) - dark) / max(bright - dark, 1e-3)
    return np.clip(np.rint((unit + 0.5) * _UNIT), 0, 255).astype(np.uint8)


def _border_lines(golden: np.ndarray, length: int) -> np.ndarray:
    """bool ``[H, W]``: the dark lines of the golden image (uint8, :func:`_levels_lut` units) straight along a row or column
    for ``length`` px and thinner than :data:`THIN_PX` (an opening with a line, less one with a square), grown by 1 px."""
    dark = (golden < round(_UNIT)).view(np.uint8)  # below half way between its dark and bright level
    lines = cv2.morphologyEx(dark, cv2.MORPH_OPEN, np.ones((length, 1), np.uint8))
    lines |= cv2.morphologyEx(dark, cv2.MORPH_OPEN, np.ones((1, length), np.uint8))
    lines &= ~cv2.morphologyEx(dark, cv2.MORPH_OPEN, np.ones((THIN_PX, THIN_PX), np.uint8))
    return cv2.dilate(lines, np.ones((3, 3), np.uint8)).view(bool)


def difference_map(
    golden: np.ndarray, image: np.ndarray, tolerance: int = TOLERANCE_PX, sliver: int = SLIVER_PX, line_px: int = LINE_PX
) -> np.ndarray:
    """bool ``[H, W]``: where uint8 ``[H, W]`` ``image`` and its registered ``golden`` image differ. Each image is
    brought to its own dark and bright level (:func:`~defect_detector.align.golden_check.levels`) at 0 and 1; a pixel
    differs when it lies more than :data:`CONTRAST` above the brightest or below the darkest pixel the other image shows
    within ``tolerance`` px; differences on the golden image's thin straight dark lines (its border: :data:`LINE_PX`,
    ``line_px`` 0 turns it off) and those thinner than ``sliver`` px are removed. ``ValueError`` for images that are
    not uint8 ``[H, W]`` of one shape."""
    for name, array in (("golden", golden), ("image", image)):
        if not isinstance(array, np.ndarray) or array.dtype != np.uint8 or array.ndim != 2 or 0 in array.shape:
            raise ValueError(f"{name}: expected uint8 [H, W], got {getattr(array, 'dtype', type(array).__name__)} {np.shape(array)}")
    if golden.shape != image.shape:
        raise ValueError(f"golden image {golden.shape} and frame {image.shape} must have one shape")
    mask = np.full(image.shape, 255, np.uint8)
    a, b = (cv2.LUT(array, _levels_lut(array, mask)) for array in (image, golden))
    kernel = np.ones((2 * tolerance + 1,) * 2, np.uint8)
    c = round(CONTRAST * _UNIT)
    differs = (cv2.subtract(a, cv2.dilate(b, kernel)) > c) | (cv2.subtract(cv2.erode(b, kernel), a) > c)
    differs |= (cv2.subtract(b, cv2.dilate(a, kernel)) > c) | (cv2.subtract(cv2.erode(a, kernel), b) > c)
    if sliver > 1:  # an opening; for an even side the dilation's anchor mirrors the erosion's, so nothing shifts
        square = np.ones((sliver, sliver), np.uint8)
        differs = cv2.dilate(cv2.erode(differs.view(np.uint8), square), square, anchor=((sliver - 1) // 2, (sliver - 1) // 2)).view(bool)
    if line_px > 0:
        differs = differs & ~_border_lines(b, line_px)
    return differs


def box_counts(differs: np.ndarray, boxes: torch.Tensor, grow: float = GROW_PX) -> torch.Tensor:
    """int64 ``[K]``: differing pixels of bool ``differs`` ``[H, W]`` inside each xyxy box (float ``[K, 4]``, the same
    pixels), grown by ``grow`` px and clipped to the image (an integral image: one pass whatever ``K``)."""
    height, width = differs.shape
    integral = cv2.integral(differs.view(np.uint8))  # int32 [H + 1, W + 1]
    b = boxes.detach().cpu().double().numpy().reshape(-1, 4)
    x1 = np.clip(np.floor(b[:, 0] - grow), 0, width).astype(np.int64)
    y1 = np.clip(np.floor(b[:, 1] - grow), 0, height).astype(np.int64)
    x2 = np.clip(np.ceil(b[:, 2] + grow), 0, width).astype(np.int64)
    y2 = np.clip(np.ceil(b[:, 3] + grow), 0, height).astype(np.int64)
    counts = integral[y2, x2] - integral[y1, x2] - integral[y2, x1] + integral[y1, x1]
    return torch.from_numpy(counts.astype(np.int64))


def keep_differing(
    detections: dict[str, torch.Tensor],
    image: np.ndarray,
    golden: np.ndarray,
    min_pixels: int = MIN_PIXELS,
    grow: float = GROW_PX,
    scale: float = 1.0,
) -> dict[str, torch.Tensor]:
    """The calls of one frame whose box (grown by ``grow`` px) holds at least ``min_pixels`` pixels where uint8 ``[H, W]``
    ``image`` and its registered ``golden`` image differ (:func:`difference_map`). ``detections``: ``boxes`` float
    ``[K, 4]`` xyxy frame pixels, ``scores`` ``[K]``, ``labels`` ``[K]`` (and any other per-call tensors), order kept.
    ``scale``: model-input pixels per frame pixel (the tiles' letterbox scale, below 1 for a frame at a working scale):
    the images and boxes are measured at it (:func:`at_scale`), where the gate's pixel sizes hold, as the model saw them."""
    if len(detections["boxes"]) == 0:
        return detections
    image, golden, boxes = at_scale(image, golden, detections["boxes"], scale)
    keep = box_counts(difference_map(golden, image), boxes, grow) >= min_pixels
    keep = keep.to(detections["boxes"].device)
    return {k: v[keep] for k, v in detections.items()}


def gate_tiled(
    detections: dict[str, torch.Tensor], image: np.ndarray, golden: np.ndarray | None, record: TileRecord | None, imgsz: int
) -> dict[str, torch.Tensor]:
    """A frame's calls (:func:`keep_differing`'s ``detections``, frame pixels) through the gate when it was tiled
    (``record``) and has its registered ``golden`` image, measured at its tiles' letterbox scale ``imgsz / tile``;
    as they are for a frame letterboxed whole (``record`` None) or without a golden image."""
    if record is None or golden is None:
        return detections
    return keep_differing(detections, image, golden, scale=imgsz / record.tile)


def at_scale(image: np.ndarray, golden: np.ndarray, boxes: torch.Tensor, scale: float) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
    """uint8 ``image`` and ``golden`` ``[H, W]`` resized by ``scale`` as the letterbox resizes a model input
    (``round(W * scale) x round(H * scale)``, INTER_AREA shrinking, INTER_LINEAR enlarging) and xyxy ``boxes`` ``[K, 4]``
    (frame pixels) into the resized pixels; all three unchanged at ``scale`` 1."""
    if scale == 1.0:
        return image, golden, boxes
    height, width = image.shape
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    interpolation = cv2.INTER_AREA if scale < 1.0 else cv2.INTER_LINEAR
    image, golden = (cv2.resize(a, size, interpolation=interpolation) for a in (image, golden))
    factors = torch.tensor([size[0] / width, size[1] / height] * 2, dtype=boxes.dtype, device=boxes.device)
    return image, golden, boxes * factors
