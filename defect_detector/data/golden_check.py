"""The golden check: does a golden image, registered into a frame, show that frame's board design, aligned?

Registration alone cannot tell "the same design, aligned" from "a similar picture": on DeepPCB's training split it
accepted the golden image of the neighbouring board of the same group for 72 of 1,000 boards (v0.8), and such a
pair costs defects and makes false calls. What separates them is where the two images disagree. Both are
normalised to zero mean and unit spread over the area the golden image covers; a pixel *differs* when it lies
more than one spread outside everything the other image shows within :data:`TOLERANCE_PX` pixels (so the rest of
a registration error, a line one pixel wider, noise and binarisation do not count); an opening with a
:data:`SLIVER_PX` square then removes what is thinner than that (edges of tracks that differ in width). What is left
is defects, which are few and compact, or another design, which differs along whole tracks and pads. The share of
the covered area left is the pair's ``difference``; :data:`MAX_DIFFERENCE` was chosen from DeepPCB's 1,000
training pairs against their wrong pairs (``benchmarks/golden_check.py``): true pairs reach 0.0121 at most, the
wrong pairs that registration accepts start at 0.0191.
"""

from __future__ import annotations

import cv2
import numpy as np

TOLERANCE_PX = 2
"""A pixel differs only from what the other image shows nowhere within this many pixels (a 5x5 neighbourhood)."""

SLIVER_PX = 3
"""Differences thinner than this many pixels are removed (an opening with a square of this side)."""

MAX_DIFFERENCE = 0.016
"""Largest differing share of the covered area a golden image may show against its frame (see the module docstring)."""

REGION_CELL = 32
"""Side (px) of the cells :func:`unlike_region` joins into regions."""

CELL_UNLIKE = 0.7
"""A cell is unlike the golden image when more than this share of its pixels differ. An occluder fills its cells
(a flat patch over 40% of a sample board: a region of 41% at 0.7); a golden image 6 px off, or another design,
differs along tracks and pads and fills few cells (0% and 7% at 0.7, but 41% and 76% at 0.1, where both read as an
occluder). It only chooses the words of a refusal: whether a pair is refused is ``max_difference``'s."""

OCCLUDED_REGION = 0.1
"""A golden image refused with one region unlike it covering at least this share of the frame is reported as an
occluder (or no board), not as another design (:func:`unlike_region`)."""

_EDGE_PX = 3  # the covered area is shrunk by this much, so interpolated border pixels never count


def covered_area(matrix: np.ndarray, golden_shape: tuple[int, int], frame_shape: tuple[int, int]) -> np.ndarray:
    """bool ``[H, W]`` of the frame: where the golden image (``golden_shape``), moved by the 2x3 ``matrix`` (golden ->
    frame pixels), lies, less a :data:`_EDGE_PX` border."""
    ones = np.ones(golden_shape, np.uint8)
    warped = cv2.warpAffine(ones, np.asarray(matrix, np.float64), (frame_shape[1], frame_shape[0]), flags=cv2.INTER_NEAREST)
    side = 2 * _EDGE_PX + 1
    return cv2.erode(warped, np.ones((side, side), np.uint8)) > 0


def _normalised(image: np.ndarray, valid: np.ndarray) -> np.ndarray:
    values = image[valid].astype(np.float32)
    mean, spread = float(values.mean()), float(values.std()) + 1e-6
    return np.where(valid, (image.astype(np.float32) - mean) / spread, 0.0).astype(np.float32)


def difference(golden: np.ndarray, image: np.ndarray, valid: np.ndarray | None = None) -> float:
    """The share of the covered area (``valid``, bool ``[H, W]``; None: all of it) where the registered golden image
    (uint8 ``[H, W]``) and the frame (uint8 ``[H, W]``) disagree beyond tolerance, slivers removed (module docstring).
    1.0 when nothing is covered or either image is blank there."""
    differs, valid = differing(golden, image, valid)
    return 1.0 if differs is None else float(differs.sum()) / float(valid.sum())


def unlike_region(differs: np.ndarray, valid: np.ndarray) -> float:
    """The share of the covered area (bool ``valid`` ``[H, W]``) in the largest connected region of
    :data:`REGION_CELL`-pixel cells where over :data:`CELL_UNLIKE` of the pixels differ (bool ``differs`` ``[H, W]``, from
    :func:`differing`): an occluder (a hand, a cloth, a label) is one such region; another design differs along tracks
    and pads spread over the board, in few cells."""
    h, w = (differs.shape[0] // REGION_CELL) * REGION_CELL, (differs.shape[1] // REGION_CELL) * REGION_CELL
    if h == 0 or w == 0 or not valid.any():
        return 0.0
    cells = differs[:h, :w].reshape(h // REGION_CELL, REGION_CELL, w // REGION_CELL, REGION_CELL).mean(axis=(1, 3)) > CELL_UNLIKE
    count, _, stats, _ = cv2.connectedComponentsWithStats(cells.astype(np.uint8), connectivity=8)
    largest = int(stats[1:, cv2.CC_STAT_AREA].max()) if count > 1 else 0
    return min(1.0, largest * REGION_CELL * REGION_CELL / float(valid.sum()))


def differing(golden: np.ndarray, image: np.ndarray, valid: np.ndarray | None = None) -> tuple[np.ndarray | None, np.ndarray]:
    """``(differs, valid)``: bool ``[H, W]`` where the registered golden image and the frame disagree beyond tolerance
    within the covered area (:func:`difference`), or None when nothing is covered or either image is blank there;
    ``valid`` the covered area used (all of the frame when None was given)."""
    valid = np.ones(image.shape, bool) if valid is None else valid
    if golden.shape != image.shape or valid.shape != image.shape:
        raise ValueError(f"golden image {golden.shape}, frame {image.shape} and covered area {valid.shape} must have one shape")
    if valid.sum() < 16 or image[valid].std() < 1e-3 or golden[valid].std() < 1e-3:
        return None, valid
    a, b = _normalised(image, valid), _normalised(golden, valid)
    kernel = np.ones((2 * TOLERANCE_PX + 1,) * 2, np.uint8)
    differs = (
        (a > cv2.dilate(b, kernel) + 1) | (a < cv2.erode(b, kernel) - 1) | (b > cv2.dilate(a, kernel) + 1) | (b < cv2.erode(a, kernel) - 1)
    )
    differs = cv2.morphologyEx((differs & valid).astype(np.uint8), cv2.MORPH_OPEN, np.ones((SLIVER_PX, SLIVER_PX), np.uint8))
    return differs > 0, valid
