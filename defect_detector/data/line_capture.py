"""The capture step of pair augmentation: the board as a line's day delivers it, seen in the golden image's pixels and
brought back to its levels, as the golden view does at inspection.

A line camera never sees a board as its golden image was captured. :class:`LineCapture` draws a whole capture of the
capture model (``core/capture.py``: move, scale, perspective, lens distortion, bow, gain, tone, offset, light
gradient, defocus, noise and JPEG, together) on the board of a training pair (uint8 ``[H, W]``, the pair's frame),
resamples it back into the pair's frame through the capture's exact inverse (``Capture.seen_back``: registration,
whose residual is the pair's own rigid residual, ``augment.ref_shift`` / ``ref_rotate``, drawn on the reference
after this step), then fits the golden image's levels to the board's
(:func:`~defect_detector.align.photometric.fit_photometric`) and maps the board back with
:meth:`~defect_detector.align.photometric.Photometric.to_golden`. So the model trains on what inspection hands it: the
blur of two resamplings and the fit's residual, not the raw change; boxes stay where they are.

The area of the frame that the moved board does not cover shows, with probability ``seam_p``, the golden image (as
the golden view fills it) when that area keeps :data:`CLEARANCE` px clear of every box, so the model learns that the
seam is not a defect; otherwise the board as if the camera saw further. With probability ``hidden_p`` a glare spot
(saturated) or a dark occluder (a hand's edge, a shadow) covers a part of the board clear of every box, unlabelled:
inspection refuses large hidden area (``screens/hidden.py``); below its limit the model must not call it.
"""

from __future__ import annotations

import numpy as np

from defect_detector.align.photometric import fit_photometric
from defect_detector.core.capture import CAPTURE, CaptureModel, draw_capture, hidden_spot

CLEARANCE = 12
"""Pixels kept between a box and an uncovered band shown as the golden image, or a hidden spot."""


def clear_of(boxes: np.ndarray, mask: np.ndarray) -> bool:
    """Whether bool ``mask`` ``[H, W]`` keeps :data:`CLEARANCE` px away from every xyxy box of ``boxes`` ``[N, 4]``."""
    h, w = mask.shape
    for x0, y0, x1, y1 in np.asarray(boxes, np.float32).reshape(-1, 4):
        xa, ya = max(0, int(x0) - CLEARANCE), max(0, int(y0) - CLEARANCE)
        xb, yb = min(w, int(np.ceil(x1)) + CLEARANCE), min(h, int(np.ceil(y1)) + CLEARANCE)
        if xa < xb and ya < yb and mask[ya:yb, xa:xb].any():
            return False
    return True


class LineCapture:
    """Draw a line capture of ``model`` on the board, see it back in the pair's frame and match it to the golden
    image's levels (module docstring). ``__call__(image, reference, boxes) -> image``: uint8 ``[H, W]`` each, in the
    same frame, boxes float32 ``[N, 4]`` xyxy px (kept clear of seams and hidden spots); with probability ``p``, the
    uncovered band shown as the golden image with ``seam_p`` and a hidden spot with ``hidden_p`` of those."""

    def __init__(self, p: float = 1.0, seam_p: float = 0.0, hidden_p: float = 0.0, model: CaptureModel = CAPTURE) -> None:
        self.p, self.seam_p, self.hidden_p, self.model = p, seam_p, hidden_p, model
        self.rng = np.random.default_rng()

    def set_random_state(self, rng: np.random.Generator) -> None:
        """Draw from ``rng`` from now on (``data/collate.py`` seeds each sample through ``PairTransform``)."""
        self.rng = rng

    def hide(self, board: np.ndarray, boxes: np.ndarray) -> np.ndarray:
        """``board`` with a glare spot or a dark occluder clear of ``boxes`` (unchanged when no draw of 4 is clear)."""
        for _ in range(4):
            weight, level = hidden_spot(board.shape, self.rng, self.model)
            if weight.max() > 0 and clear_of(boxes, weight > 0.05):
                out = board.astype(np.float32) * (1 - weight) + level * weight
                return np.clip(out + 0.5, 0, 255).astype(np.uint8)
        return board

    def __call__(self, image: np.ndarray, reference: np.ndarray, boxes: np.ndarray | None = None) -> np.ndarray:
        if self.p <= 0 or self.rng.random() >= self.p:
            return image
        boxes = np.zeros((0, 4), np.float32) if boxes is None else boxes
        board, uncovered = draw_capture(image.shape, self.rng, self.model).seen_back(image)
        if self.rng.random() < self.hidden_p:
            board = self.hide(board, boxes)
        board = fit_photometric(reference, board, ~uncovered).to_golden(board)
        if self.rng.random() < self.seam_p and uncovered.any() and clear_of(boxes, uncovered):
            board = np.where(uncovered, reference, board)
        return board
