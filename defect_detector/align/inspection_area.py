"""A design's inspection area: the board itself, in its golden image's pixels (issue 56).

A frame holds more than the board: the fixture, the conveyor, panel rails and breakaway tabs, neighbouring boards.
Nothing there is the board's defect, and nothing there should refuse the frame. ``teach`` stores the area with the
design (``taught`` entry ``"area"``: polygons of golden-image pixels), found from the board's edge in the golden image
(``core/board_area.py``: the board's region within a plain background) or given by the user as a mask image
(``teach --area mask.png``: non-zero pixels are the board).

``predict`` reads it through the frame's registration (:meth:`InspectionArea.in_frame`) and narrows the frame's
covered area to it (``inspect/prepare.py``): the exposure and hidden-area screens judge only the board, and a call
whose box centre lies outside is dropped as one where the golden image has no data (``screens/frame.py``
``mask_uncovered``). The golden check that registration runs still reads the whole golden image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from defect_detector.align.mapping import Mapping
from defect_detector.core.board_area import board_area

MIN_PART = 0.01
"""A mask region smaller than this share of the golden image is no part of the area (a speck of the mask)."""
MAX_POINTS = 256
"""Most polygon vertices stored over a whole area (a mask's outline is simplified until it fits)."""


@dataclass(frozen=True)
class InspectionArea:
    """Polygons (each float64 ``[N, 2]``, ``(x, y)`` golden-image pixels, N >= 3) whose union is the board, over a
    golden image of ``shape`` ``(H, W)``."""

    polygons: tuple[np.ndarray, ...]
    shape: tuple[int, int]
    _mask: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    def mask(self) -> np.ndarray:
        """bool ``[H, W]`` in golden-image pixels: inside the area (kept once made)."""
        if "mask" not in self._mask:
            canvas = np.zeros(self.shape, np.uint8)
            cv2.fillPoly(canvas, [np.rint(p).astype(np.int32).reshape(-1, 1, 2) for p in self.polygons], 1)
            self._mask["mask"] = canvas.astype(bool)
        return self._mask["mask"]

    @property
    def share(self) -> float:
        """Share of the golden image the area covers."""
        return float(self.mask().mean())

    def in_frame(self, mapping: Mapping, frame_shape: tuple[int, int]) -> np.ndarray:
        """bool ``[H, W]`` of a ``frame_shape`` frame: where the area lies, through ``mapping`` (golden -> frame px)."""
        return mapping.golden_into_frame(self.mask().astype(np.uint8), frame_shape[:2], cv2.INTER_NEAREST, 0) > 0

    def to_entry(self) -> dict[str, Any]:
        """The ``taught`` entry's keys: ``"area"`` polygons of ``[x, y]`` (0.1 px) and ``"area_shape"`` ``[H, W]``."""
        return {"area": [[[round(float(x), 1), round(float(y), 1)] for x, y in p] for p in self.polygons], "area_shape": list(self.shape)}

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> InspectionArea | None:
        """The area of a checked ``taught`` entry (``model/checkpoint.py``), None when it carries none."""
        if entry.get("area") is None:
            return None
        polygons = tuple(np.asarray(p, np.float64).reshape(-1, 2) for p in entry["area"])
        return cls(polygons, (int(entry["area_shape"][0]), int(entry["area_shape"][1])))

    @classmethod
    def from_mask(cls, mask: np.ndarray, what: str = "the area mask") -> InspectionArea:
        """The area of a mask image (``[H, W]``, non-zero: the board) of the golden image's size: its outer outlines
        of regions of at least :data:`MIN_PART` of the image, simplified to :data:`MAX_POINTS` vertices in all.
        ``ValueError`` in one line when it marks no such region."""
        board = (np.asarray(mask) > 0).astype(np.uint8)
        contours, _ = cv2.findContours(board, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        parts = [c for c in contours if cv2.contourArea(c) >= MIN_PART * board.size]
        if not parts:
            raise ValueError(f"{what}: marks no board (no region of {MIN_PART:.0%} of the image or more is non-zero)")
        epsilon = 0.5
        while True:
            polygons = [cv2.approxPolyDP(c, epsilon, True).reshape(-1, 2) for c in parts]
            if sum(len(p) for p in polygons) <= MAX_POINTS:
                break
            epsilon *= 2
        return cls(tuple(p.astype(np.float64) for p in polygons if len(p) >= 3), (int(board.shape[0]), int(board.shape[1])))

    @classmethod
    def of_board(cls, golden: np.ndarray) -> InspectionArea | None:
        """The board's own area in uint8 ``golden`` ``[H, W]`` (``core/board_area.py``: its bounding box), or None
        when the board fills the image (nothing to leave out)."""
        found = board_area(golden)
        if found.whole:
            return None
        x, y, w, h = found.box
        corners = np.array([[x, y], [x + w - 1, y], [x + w - 1, y + h - 1], [x, y + h - 1]], np.float64)
        return cls((corners,), (int(golden.shape[0]), int(golden.shape[1])))


__all__ = ["InspectionArea"]
