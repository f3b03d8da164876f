"""How a golden image of any look reads: which grey level is the substrate, which phase is copper, how wide its
tracks are (the design's scale) and how soft its edges.

Any golden image shows two phases: the substrate (the background) and copper (tracks, pads, pours), whatever their
grey levels: a binarized scan (DeepPCB: copper 0, substrate 255), a photograph (substrate and copper a few tens of
levels apart, brighter pads, texture) or an image drawn by hand with OpenCV (few grey levels, antialiased or hard
edges, dark on bright or bright on dark).

1. *Levels*: the two dominant grey levels of the image after a 3x3 median (which keeps 2 px lines at their own level,
   where a Gaussian would smear thin tracks into mid-tones and read a mid-tone as the copper level); a photograph's
   texture is smoothed first.
2. *Phases*: each level in turn is taken as the substrate, copper being everything that stands out from it by over
   half the contrast; the substrate is the phase that covers more of the image and more of its border (copper forms
   tracks and pads on a background). This reads a drawing whose copper covers most of it (thick tracks, large pads)
   the right way round, where "the most common level is the substrate" did not.
3. *Size*: the painted defects' sizes over DeepPCB's are 1.0 unless the caller knows the design's scale (a render's
   zoom): DeepPCB's defects are the size they are at the scan's scale whatever the design's tracks. The track width
   (:func:`track_width`, the width of the thinnest copper structures that are tracks, over DeepPCB's
   :data:`DEEPPCB_TRACK_PX`) is no scale: DeepPCB's own designs read 5.7-145 px at one scale (group 92000's pours read
   4x, its painted boxes of 104 px or more against real ones of 36-81), and the real photographs at 1280 px read 0.5x
   (painted defects of 14 px where their real ones are 20-50). It stays a diagnostic (``benchmarks/paint_placement.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

DEEPPCB_TRACK_PX = 10.0
"""DeepPCB's median :func:`track_width` (px at 640x640, over 100 of its golden images: 5th-95th percentile 5.7-145,
as some designs are all pours)."""
_RIDGE_RUN_PX = 3
"""Ridge pixels in 8-connected runs shorter than this are ragged edges, not tracks (see :func:`track_width`)."""
_PHASE_SHARE = 0.005
"""A grey-level range beyond the substrate's peak holding less than this share of the pixels is no phase."""
_SPECK_PX = 3
"""Copper components of fewer pixels than this are noise, not copper."""


@dataclass(frozen=True)
class Levels:
    """How a golden image reads: ``substrate`` and ``copper`` grey levels (float), ``copper_mask`` bool ``[H, W]``
    (the golden image's frame), ``size`` (painted sizes over DeepPCB's) and ``edge_sigma`` (px, the Gaussian softness
    of its edges)."""

    substrate: float
    copper: float
    copper_mask: np.ndarray
    size: float
    edge_sigma: float

    @property
    def contrast(self) -> float:
        """``|copper - substrate|``, grey levels."""
        return abs(self.copper - self.substrate)


def _denoised(image: np.ndarray) -> np.ndarray:
    """float32 ``[H, W]``: uint8 ``image`` after a 3x3 median, then a Gaussian of 1 px where the median leaves
    texture (a photograph; a drawing or a binarized scan keeps its hard edges and 2 px lines)."""
    median = cv2.medianBlur(image, 3)
    residual = np.abs(image.astype(np.int16) - median.astype(np.int16))
    if float(np.median(residual)) >= 1.0:
        return cv2.GaussianBlur(median, (0, 0), 1.0).astype(np.float32)
    return median.astype(np.float32)


def _histogram(image: np.ndarray) -> np.ndarray:
    """float64 ``[256]``: the grey-level histogram of float32 ``image``, smoothed over 9 levels."""
    hist = np.bincount(np.clip(np.round(image), 0, 255).astype(np.int64).ravel(), minlength=256).astype(np.float64)
    return np.convolve(hist, np.ones(9) / 9, mode="same")


def _basin(hist: np.ndarray, mode: int) -> tuple[int, int]:
    """The levels ``(low, high)`` where the histogram stops falling on either side of its peak at ``mode``."""
    low, high = mode, mode
    while low > 0 and hist[low - 1] <= hist[low]:
        low -= 1
    while high < 255 and hist[high + 1] <= hist[high]:
        high += 1
    return low, high


def _peaks(hist: np.ndarray) -> tuple[int, int | None, int | None]:
    """The most common level of ``hist`` and the most common level below and above its basin (None: under
    :data:`_PHASE_SHARE` of the pixels lie there)."""
    first = int(hist.argmax())
    low, high = _basin(hist, first)
    least = _PHASE_SHARE * hist.sum()
    below = int(hist[:low].argmax()) if hist[:low].sum() >= least else None
    above = high + 1 + int(hist[high + 1 :].argmax()) if hist[high + 1 :].sum() >= least else None
    return first, below, above


def _stands_out(smooth: np.ndarray, substrate: float, below: float | None, above: float | None) -> np.ndarray:
    """bool ``[H, W]``: what lies past the half-way level from ``substrate`` to the level ``below`` or ``above`` it,
    without specks."""
    mask = np.zeros(smooth.shape, bool)
    if below is not None:
        mask |= smooth < (substrate + below) / 2
    if above is not None:
        mask |= smooth > (substrate + above) / 2
    count, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    keep = stats[:, cv2.CC_STAT_AREA] >= _SPECK_PX
    keep[0] = False
    return keep[labels]


def _blurred(image: np.ndarray, sigma: float) -> np.ndarray:
    """float32 ``image`` blurred by a Gaussian of ``sigma`` px, computed at an eighth of its size (a light field)."""
    h, w = image.shape
    small = cv2.resize(image, (max(1, w // 8), max(1, h // 8)), interpolation=cv2.INTER_AREA)
    return cv2.resize(cv2.GaussianBlur(small, (0, 0), sigma / 8.0), (w, h), interpolation=cv2.INTER_LINEAR)


def _flattened(smooth: np.ndarray, substrate: float, copper_mask: np.ndarray) -> np.ndarray:
    """float32 ``smooth`` with its light field taken out: the substrate's level, averaged over an eighth of the image
    where ``copper_mask`` is False, brought to ``substrate`` everywhere (a no-op on an evenly lit image)."""
    weight = (~copper_mask).astype(np.float32)
    sigma = max(smooth.shape) / 8.0
    cover = _blurred(weight, sigma)
    local = _blurred(smooth * weight, sigma) / np.maximum(cover, 1e-3)
    return smooth - np.where(cover > 0.05, local - substrate, 0.0).astype(np.float32)


def _reading(smooth: np.ndarray, levels: tuple[float, ...]) -> tuple[float, float, np.ndarray]:
    """``(substrate, copper, copper mask)`` taking ``levels[0]`` as the substrate and the other levels as copper (the
    nearest on each side sets the threshold, the most common one is the copper's level), lit evenly."""
    substrate = levels[0]
    below = max((v for v in levels[1:] if v < substrate), default=None)
    above = min((v for v in levels[1:] if v > substrate), default=None)
    mask = _stands_out(smooth, substrate, below, above)
    mask = _stands_out(_flattened(smooth, substrate, mask), substrate, below, above)
    return substrate, levels[1], mask


def _background_score(mask: np.ndarray, where: np.ndarray | None = None) -> float:
    """How much bool ``mask`` reads as the background: its share of the image plus its share of the border (of the
    board's region ``where``, bool ``[H, W]``, and its edge, when given)."""
    if where is None:
        border = np.concatenate([mask[0], mask[-1], mask[1:-1, 0], mask[1:-1, -1]])
        return float(mask.mean() + border.mean())
    edge = where & ~cv2.erode(where.astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)
    return float(mask[where].mean() + mask[edge].mean())


def track_width(copper_mask: np.ndarray) -> float:
    """The width (px) of the copper's thin structures (bool ``[H, W]``): twice the 10th percentile of the distance
    transform along its ridges, counting only ridges of at least :data:`_RIDGE_RUN_PX` pixels (a track's spine, not
    an edge's corner); :data:`DEEPPCB_TRACK_PX` when there is no copper."""
    dist = cv2.distanceTransform(copper_mask.astype(np.uint8), cv2.DIST_L2, 3)
    ridge = ((dist >= cv2.dilate(dist, np.ones((3, 3), np.uint8))) & (dist >= 1.0)).astype(np.uint8)
    count, labels, stats, _ = cv2.connectedComponentsWithStats(ridge, connectivity=8)
    runs = stats[:, cv2.CC_STAT_AREA] >= _RIDGE_RUN_PX
    runs[0] = False
    values = dist[runs[labels]]
    return float(2.0 * np.percentile(values, 10)) if values.size else DEEPPCB_TRACK_PX


def _edge_sigma(smooth: np.ndarray, contrast: float) -> float:
    """The Gaussian softness (px) of edges ``contrast`` levels high in float32 ``smooth``, from the steepest gradients."""
    grad = np.hypot(cv2.Sobel(smooth, cv2.CV_32F, 1, 0), cv2.Sobel(smooth, cv2.CV_32F, 0, 1)) / 8.0
    peak = float(np.percentile(grad, 99.5))
    return float(np.clip(contrast / max(peak * math.sqrt(2 * math.pi), 1e-3), 0.3, 4.0))


def read_levels(golden: np.ndarray, size: float | None = None, where: np.ndarray | None = None) -> Levels:
    """Read a golden image (uint8 ``[H, W]``) as substrate and copper (module docstring); ``size`` the painted sizes
    over DeepPCB's (None: 1.0, the scale the model sees the design at; module docstring); ``where``: bool ``[H, W]``,
    the board's region (``core/board_area.py``), read alone, no copper outside it (None: the whole image). Raises
    ValueError for an image that is not uint8 gray or is blank."""
    if golden.ndim != 2 or golden.dtype != np.uint8:
        raise ValueError(f"a golden image must be uint8 gray [H, W], got {golden.dtype} {golden.shape}")
    smooth = _denoised(golden)
    pixels = smooth if where is None else smooth[where]
    hist = _histogram(pixels)
    first, below, above = _peaks(hist)
    others = sorted((v for v in (below, above) if v is not None and abs(v - first) >= 6), key=lambda v: -hist[v])
    if not others:  # copper on the substrate's flank (a low-contrast photograph): the two classes of Otsu's split
        split, _ = cv2.threshold(np.clip(pixels, 0, 255).astype(np.uint8), 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
        side = pixels > split if first <= split else pixels <= split
        others = [int(np.median(pixels[side]))] if side.any() else []
    if not others or abs(others[0] - first) < 6 or (golden if where is None else golden[where]).std() < 3:
        raise ValueError("the golden image shows no copper against its substrate (one flat grey level)")
    candidates = [(float(first), *map(float, others)), (float(others[0]), float(first))]
    readings = [_reading(smooth, levels) for levels in candidates]
    if where is not None:
        readings = [(substrate, copper, mask & where) for substrate, copper, mask in readings]
    inside = where if where is not None else np.ones(smooth.shape, bool)
    substrate, copper, mask = min(readings, key=lambda r: _background_score(r[2], where) - _background_score(inside & ~r[2], where))
    if not mask.any():
        raise ValueError("the golden image shows no copper against its substrate (one flat grey level)")
    return Levels(substrate, copper, mask, 1.0 if size is None else float(size), _edge_sigma(smooth, abs(copper - substrate)))
