"""The scale an image shows its design at, and the scale a model's weights were validated at (issue 44 item 4,
issue 46 item 3: a DeepPCB board and its golden image upscaled 2x lost a fifth of their defects, without a word).

Two readings of one gray image (:func:`image_scale`), on its central crop of at most :data:`CROP_SIDE` px at the
original resolution (no resampling):

- ``detail``: how many pixels the image spends on its finest detail. An image whose pixels hold no detail finer than
  ``f`` px survives a round trip through ``f`` times fewer pixels (``INTER_AREA`` down, ``INTER_LINEAR`` back): its
  edges barely move. ``detail`` is the largest factor of :data:`FACTORS` whose round trip moves the pixels on the
  image's edges by at most :data:`ROUND_TRIP` of its contrast on average; 1.0 when even the smallest moves them more.
  DeepPCB's golden images read 1.0 (their edges are one pixel wide), all 996 of them; the same images upscaled 2x
  read 2.0 (linear: 959 of 961; cubic: 80%, the rest 1.25-1.5), 3x 2.5-4, 1.5x 1.25, and downscaled 0.5x 1.0. A capture really
  sharp at a finer pixel (a camera with twice the resolution and sharp optics, a nearest-neighbour upscale) reads
  1.0: its detail is in its pixels, and no reading of one image tells it from a coarser design.
- ``fine_width``: its narrowest tracks and gaps, px: the :data:`FINE_PERCENTILE` th percentile of the ridge widths
  (twice the distance transform on the ridge) of both phases either side of Otsu's threshold, ridges under
  :data:`MIN_RIDGE` px (one-pixel specks and steps of the scan) left out.

Why the detail, not the widths, sets the working scale: DeepPCB's designs differ more than a factor of 2. Their
finest widths at 1x span 4-111 px (1st-99th percentile over the 996 training and held-out golden images with two
phases; group 92000's median 41 px, group 00041's 8 px), so a board upscaled 2x has the widths of another design the model was validated on
(the measurements: ``docs/golden.md``, "Scale"). The widths say what they can say: features narrower, at the model
input, than the narrowest the weights were validated on.

:class:`ScaleRange` is what the weights were validated at, fitted on the golden images of their training set
(``engine/domain.py``, stored with the design domain: ``meta.json`` ``domain.scale_range``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

CROP_SIDE = 640
"""The readings are taken on the image's central crop of at most this side, at its original resolution."""

FACTORS = (1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0)
"""The round-trip factors tried for ``detail``, in order."""

ROUND_TRIP = 0.1
"""The largest mean change of the edge pixels, as a share of the contrast, of a round trip the image survives."""

MIN_RIDGE = 3.0
"""Ridges narrower than this (px) are the scan's specks and one-pixel steps, not tracks or gaps."""

FINE_PERCENTILE = 5.0
"""The percentile of the ridge widths read as the narrowest tracks and gaps."""

MIN_PHASE = 0.002
"""A crop whose smaller phase holds fewer pixels than this share, or whose phases lie fewer than 8 grey levels apart,
is flat: no reading (as ``monitor/domain.py``)."""


@dataclass(frozen=True)
class ImageScale:
    """The scale readings of one image (:func:`image_scale`): ``detail`` (>= 1, a factor) and ``fine_width`` (px of
    the image); ``flat``: nothing to read (``detail`` 1.0, ``fine_width`` 0.0)."""

    detail: float
    fine_width: float
    flat: bool = False


FLAT = ImageScale(1.0, 0.0, flat=True)


def _crop(image: np.ndarray) -> np.ndarray:
    height, width = image.shape
    top, left = max(0, (height - CROP_SIDE) // 2), max(0, (width - CROP_SIDE) // 2)
    return image[top : top + CROP_SIDE, left : left + CROP_SIDE]


def ridge_widths(mask: np.ndarray, precision: int = cv2.DIST_MASK_5) -> np.ndarray:
    """float32 ``[K]`` widths (px) of the ridge points of the foreground of uint8 ``mask`` ``[H, W]``: twice the
    distance transform (``cv2.DIST_L2`` with the ``precision`` mask, 3 or 5) where it peaks among its neighbours."""
    distance = cv2.distanceTransform(mask, cv2.DIST_L2, precision)
    ridge = (distance > 0) & (distance >= cv2.dilate(distance, np.ones((3, 3), np.uint8)))
    return 2.0 * distance[ridge]


def _detail(crop: np.ndarray, contrast: float) -> float:
    """The largest factor of :data:`FACTORS` whose round trip the uint8 ``crop`` survives (1.0: none). Its edges: the
    pixels whose 3x3 morphological gradient reaches half the ``contrast``. The factors are tried upwards until one
    moves the edges twice the limit (a factor between two divisors of an upscale can fail where the larger passes)."""
    edges = (cv2.morphologyEx(crop, cv2.MORPH_GRADIENT, np.ones((3, 3), np.uint8)) >= 0.5 * contrast).astype(np.uint8)
    height, width = crop.shape
    detail = 1.0
    for factor in FACTORS:
        size = (round(width / factor), round(height / factor))
        if min(size) < 8:
            break
        back = cv2.resize(cv2.resize(crop, size, interpolation=cv2.INTER_AREA), (width, height), interpolation=cv2.INTER_LINEAR)
        moved = cv2.mean(cv2.absdiff(back, crop), mask=edges)[0] / contrast
        if moved > 2 * ROUND_TRIP:
            break
        detail = factor if moved <= ROUND_TRIP else detail
    return detail


def image_scale(image: np.ndarray) -> ImageScale:
    """The :class:`ImageScale` of a uint8 gray ``[H, W]`` image (a golden image, or a frame; at least 8x8 px), read on
    its central crop of at most :data:`CROP_SIDE` px: 15-25 ms on a shared 2-core CPU (one round trip per factor tried:
    two for a sharp image, up to seven for a coarse one). ``ValueError`` for anything else."""
    if not isinstance(image, np.ndarray) or image.ndim != 2 or image.dtype != np.uint8 or min(image.shape) < 8:
        raise ValueError(f"expected a uint8 gray [H, W] image of at least 8x8 px, got {getattr(image, 'shape', type(image).__name__)}")
    crop = _crop(image)
    threshold, mask = cv2.threshold(crop, 0, 1, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    bright = mask.astype(bool)
    share = float(bright.mean())
    if min(share, 1.0 - share) < MIN_PHASE:
        return FLAT
    contrast = float(np.median(crop[bright])) - float(np.median(crop[~bright]))
    if contrast < 8:
        return FLAT
    widths = np.concatenate([ridge_widths(mask), ridge_widths(1 - mask)])
    widths = widths[widths >= MIN_RIDGE]
    fine = float(np.percentile(widths, FINE_PERCENTILE)) if widths.size else 0.0
    return ImageScale(_detail(crop, contrast), fine)


@dataclass(frozen=True)
class ScaleRange:
    """The scale a model's weights were validated at, in the pixels of their training golden images (which the model
    saw at its ``pixel_scale``): ``detail``, the 99th percentile of their ``detail`` readings (1.0 for DeepPCB's
    scans), and ``fine_width``, the 1st percentile of their ``fine_width`` (px); ``fitted_on``: the images read."""

    detail: float
    fine_width: float
    fitted_on: int = 0

    @classmethod
    def fit(cls, scales: Iterable[ImageScale]) -> ScaleRange | None:
        """The range of the readings of training golden images (flat ones skipped); None with fewer than 2."""
        rows = [s for s in scales if not s.flat]
        if len(rows) < 2:
            return None
        detail = float(np.percentile([s.detail for s in rows], 99))
        fine = [s.fine_width for s in rows if s.fine_width > 0]
        return cls(detail, float(np.percentile(fine, 1)) if fine else MIN_RIDGE, len(rows))

    def widen(self, scales: Sequence[ImageScale]) -> ScaleRange:
        """This range with the readings of taught golden images added (a taught design is validated at its scale)."""
        rows = [s for s in scales if not s.flat]
        if not rows:
            return self
        fine = min([self.fine_width, *(s.fine_width for s in rows if s.fine_width > 0)])
        return ScaleRange(max(self.detail, *(s.detail for s in rows)), fine, self.fitted_on)

    def to_dict(self) -> dict[str, Any]:
        return {"detail": round(self.detail, 4), "fine_width": round(self.fine_width, 4), "fitted_on": int(self.fitted_on)}

    @classmethod
    def from_dict(cls, data: Any) -> ScaleRange:
        """Read :meth:`to_dict`'s form; ``ValueError`` naming the first bad key."""
        if not isinstance(data, dict) or set(data) - {"detail", "fine_width", "fitted_on"}:
            raise ValueError("scale_range must be an object with keys detail, fine_width and fitted_on")
        for key in ("detail", "fine_width"):
            value = data.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"scale_range.{key} must be a finite number > 0, got {value!r}")
        fitted = data.get("fitted_on", 0)
        if isinstance(fitted, bool) or not isinstance(fitted, int) or fitted < 0:
            raise ValueError(f"scale_range.fitted_on must be an integer >= 0, got {fitted!r}")
        return cls(float(data["detail"]), float(data["fine_width"]), fitted)
