"""Frames with nothing to inspect (black, dim, white or saturated, flat), and the gray levels drift alerts quote.

:func:`image_levels` reads a frame's gray levels from one histogram of about :data:`SAMPLES` pixels on evenly spaced
rows and columns: the dark level (1st percentile), the median, the bright level (99th percentile) and the fraction of
pixels more than :data:`FLAT_DEVIATION` levels from the median ("detail"). :func:`blank_reason` says why a frame
cannot be inspected, or None; a frame whose sample shows no detail is checked on all its pixels before it is called
flat. Thresholds were chosen on the 2,000 DeepPCB images (binarized boards and golden images): every board has a
bright level of 255 and at least 2.3e-4 of its pixels away from its median (the boards that are almost all copper:
99.95% white with a few dark holes; three golden images of such regions are pure white, and would be called white),
while black, 10%-brightness (bright level 25), white, saturated and flat grey frames, with or without sensor noise
(sigma 2-4 levels), have bright levels <= 25 or no pixel away from their median.
"""

from __future__ import annotations

import dataclasses

import cv2
import numpy as np

from defect_detector.core.constants import LEVELS
from defect_detector.core.frame_record import Prepared, StageContext
from defect_detector.core.refusal import RefusalKind

SAMPLES = 16384
"""About this many pixels are read per frame (every pixel of a smaller frame): 64 rows of up to 256 columns."""

DARK_BRIGHT_LEVEL = 40
"""A frame whose bright level (99th percentile) is at most this is too dark to inspect (a black frame, a light at 10%
brightness: 25 on DeepPCB boards, whose bright level is 255)."""

FLAT_DEVIATION = 32
"""Gray levels from the median beyond which a pixel counts as detail."""

FLAT_FRACTION = 5e-5
"""A frame with at most this fraction of detail pixels, over all its pixels, is flat: no board to inspect. The least of
the 1,000 DeepPCB boards has 2.3e-4; a sensor's hot pixels are about 1e-5."""

WHITE_LEVEL = 240
"""A flat frame whose median is at least this is white (saturated)."""


def quantile_levels(counts: np.ndarray, quantiles: tuple[float, ...]) -> tuple[int, ...]:
    """The gray levels at ``quantiles`` (in [0, 1]) of a 256-bin histogram ``counts`` (the lowest level whose
    cumulative count reaches that share)."""
    cumulative = np.cumsum(counts)
    return tuple(int(np.searchsorted(cumulative, q * cumulative[-1])) for q in quantiles)


def _levels(counts: np.ndarray) -> np.ndarray:
    cumulative = np.cumsum(counts)
    total = int(cumulative[-1])
    dark, median, bright = quantile_levels(counts, (0.01, 0.5, 0.99))
    below = cumulative[median - FLAT_DEVIATION - 1] if median > FLAT_DEVIATION else 0
    near = int(cumulative[min(255, median + FLAT_DEVIATION)] - below)
    return np.array([dark, median, bright, (total - near) / total], dtype=np.float64)


def _histogram(pixels: np.ndarray) -> np.ndarray:
    return cv2.calcHist([np.ascontiguousarray(pixels)], [0], None, [256], [0, 256]).ravel()


def image_levels(gray: np.ndarray) -> np.ndarray:
    """float64 ``[4]`` (:data:`LEVELS`) of a uint8 ``[H, W]`` frame, read on about :data:`SAMPLES` of its pixels."""
    if not isinstance(gray, np.ndarray) or gray.ndim != 2 or gray.dtype != np.uint8 or gray.size == 0:
        raise ValueError(f"expected a non-empty uint8 [H, W] frame, got {getattr(gray, 'dtype', type(gray))} {getattr(gray, 'shape', '')}")
    height, width = gray.shape
    rows, cols = max(1, height // 64), max(1, width // 256)
    return _levels(_histogram(gray[rows // 2 :: rows, cols // 2 :: cols]))


def blank_reason(gray: np.ndarray, levels: np.ndarray | None = None) -> str | None:
    """Why the uint8 ``[H, W]`` frame ``gray`` has nothing to inspect (the text starts "blank frame: "), or None when it
    shows a board. ``levels``: its :func:`image_levels`, when already read (module docstring: how the thresholds
    were chosen)."""
    levels = image_levels(gray) if levels is None else levels
    _, median, bright, detail = (float(v) for v in levels)
    if bright <= DARK_BRIGHT_LEVEL:
        level = f"brightest pixels at {bright:.0f} of 255"
        return f"blank frame: dark ({level}): light off, lens covered or camera dead? check the light and the camera"
    if detail > FLAT_FRACTION:
        return None
    _, median, _, detail = _levels(_histogram(gray))  # the sample saw no detail: count it on every pixel
    if detail > FLAT_FRACTION:
        return None
    if median >= WHITE_LEVEL:
        return "blank frame: white, saturated (no board detail): light too strong or exposure too long? check the light and the exposure"
    return f"blank frame: flat grey at {median:.0f} (no board detail): lens covered or no board in view? check the camera and the board"


def blank(context: StageContext, record: Prepared) -> Prepared:
    """The blank stage: ``record`` with its gray levels (``image_levels``), refused (``blank``) when the frame has nothing to
    inspect (:func:`blank_reason`)."""
    record = dataclasses.replace(record, levels=image_levels(record.frame.image))
    reason = blank_reason(record.frame.image, record.levels)
    if reason is None:
        return record
    return record.refuse(RefusalKind.BLANK, reason, dict(zip(LEVELS[1:], record.levels[1:])))
