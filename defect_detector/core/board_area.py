"""The board's own area in an image of it: what is board, and what is the frame around it (issue 56).

A golden image or frame may hold more than the board: a plain background (a 640 px DeepPCB scan placed on a mid-grey
2048x1536 frame), the uncovered band of a moved golden image, a fixture. What a design looks like is the board's look
(``monitor/domain.py`` ``design_stats`` reads it here), not the background's: a grey frame round a binarized scan
made it read as a photograph and routed it to the photograph weights.

:func:`board_area` finds the board as the part of the image that is not plain background:

- the background level is read on the image's outer border (its median), and a pixel belongs to the board where it
  differs from that level by more than :data:`LEVEL_STEP` grey levels or where its neighbourhood is textured (local
  standard deviation over :data:`TEXTURE_STD`); unless :data:`PLAIN_BORDER` of the border is plain background, the
  board fills the image;
- that mask is closed over :data:`CLOSE_SHARE` of the image's side (a board's plain copper or solder-mask planes are
  board too) and its largest connected region, holes filled, is the board.

When the board covers nearly the whole image (:data:`WHOLE_SHARE`), or nothing plausible is found, the whole image is
the board: an image of a board that fills its frame is read as before. Pure function of a uint8 array, a few ms at any
size (it works on a copy at most :data:`WORK_SIDE` px on a side).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np

WORK_SIDE = 512
"""Side (px) of the downscaled copy the area is found on."""
LEVEL_STEP = 24
"""Grey levels from the background's level beyond which a pixel is board."""
TEXTURE_STD = 6.0
"""Local standard deviation (grey levels, 7 px window of the work copy) beyond which a pixel is board."""
CLOSE_SHARE = 0.06
"""Closing kernel as a share of the work copy's longer side: plain planes inside the board count as board."""
PLAIN_BORDER = 0.95
"""Share of the image's outer border that must be plain background (at its level, untextured) for a background to be
read at all: a board filling its image (a binarized scan whose blank copper reaches an edge) is never cut."""
WHOLE_SHARE = 0.9
"""A board covering at least this share of the image's area is taken as the whole image."""
MIN_SHARE = 0.02
"""A region smaller than this share of the image is no board: the whole image is taken."""


@dataclass(frozen=True)
class BoardArea:
    """The board in an image of ``shape`` ``(H, W)``: ``box`` ``(x, y, w, h)`` in its pixels (the bounding box of the
    board region; the whole image when ``whole``), ``share`` of the image's area the region covers and ``region``:
    bool ``[H, W]`` the region itself (None when ``whole``)."""

    shape: tuple[int, int]
    box: tuple[int, int, int, int]
    share: float
    whole: bool
    region: np.ndarray | None = field(default=None, repr=False, compare=False)

    def crop(self, image: np.ndarray) -> np.ndarray:
        """``image`` ``[H, W]`` (of :attr:`shape`) cut to :attr:`box` (a view, no copy)."""
        x, y, w, h = self.box
        return image[y : y + h, x : x + w]


def _whole(shape: tuple[int, int], share: float = 1.0) -> BoardArea:
    return BoardArea(shape, (0, 0, shape[1], shape[0]), share, True)


def board_area(image: np.ndarray) -> BoardArea:
    """The board's own area in uint8 gray ``image`` ``[H, W]`` (module docstring), in ``image``'s pixels."""
    height, width = image.shape
    factor = min(1.0, WORK_SIDE / max(height, width))
    size = (max(8, round(width * factor)), max(8, round(height * factor)))
    work = image if factor == 1.0 else cv2.resize(image, size, interpolation=cv2.INTER_AREA)
    border = np.concatenate([work[0], work[-1], work[:, 0], work[:, -1]])
    level = float(np.median(border))
    mean = cv2.blur(work.astype(np.float32), (7, 7))
    std = np.sqrt(np.maximum(cv2.blur(work.astype(np.float32) ** 2, (7, 7)) - mean**2, 0.0))
    board = ((np.abs(work.astype(np.float32) - level) > LEVEL_STEP) | (std > TEXTURE_STD)).astype(np.uint8)
    edge = np.concatenate([board[0], board[-1], board[:, 0], board[:, -1]])
    if edge.mean() > 1.0 - PLAIN_BORDER:  # no plain background round the image: the board fills it
        return _whole((height, width))
    side = max(3, round(CLOSE_SHARE * max(work.shape)) | 1)
    board = cv2.morphologyEx(board, cv2.MORPH_CLOSE, cv2.getStructuringElement(cv2.MORPH_RECT, (side, side)))
    count, labels, stats, _ = cv2.connectedComponentsWithStats(board, connectivity=8)
    if count < 2:
        return _whole((height, width), 0.0)
    largest = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    contours, _ = cv2.findContours((labels == largest).astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    filled = cv2.drawContours(np.zeros_like(board), contours, -1, 1, thickness=cv2.FILLED)
    filled = cv2.erode(filled, np.ones((7, 7), np.uint8))  # the texture window's halo past the board's edge
    share = float(filled.mean())
    if share >= WHOLE_SHARE or share < MIN_SHARE:
        return _whole((height, width), share)
    x, y, w, h = cv2.boundingRect(filled)
    x0, y0 = int(np.floor(x / factor)), int(np.floor(y / factor))
    x1, y1 = min(width, int(np.ceil((x + w) / factor))), min(height, int(np.ceil((y + h) / factor)))
    region = cv2.resize(filled, (width, height), interpolation=cv2.INTER_NEAREST).astype(bool)
    return BoardArea((height, width), (x0, y0, x1 - x0, y1 - y0), share, False, region)


__all__ = ["BoardArea", "board_area"]
