"""The golden check: does a golden image, registered into a frame, show that frame's board design, aligned?

Registration alone cannot tell "the same design, aligned" from "a similar picture": on DeepPCB's training split it
accepts the golden image of the neighbouring board of the same group for 114 of 997 boards, and such a pair costs
defects and makes false calls. What separates them is where the two images disagree, not how much: defects are a
few compact places, however large; another design (or board, or scale) differs along tracks and pads all over the
frame. Until issue 35 the check refused a pair whose differing share exceeded 1.6%, which refused true boards of
dense designs (1.7-2.7%) and boards with large defects: the worse a board, the likelier it was refused, not failed.

Each image is brought to its own two grey levels (:func:`levels`: quantiles, which neither large defects nor an
occluder move as they move a mean and a spread) at 0 and 1. A pixel *differs* when it lies more than
:data:`CONTRAST` outside everything the other image shows within :data:`TOLERANCE_PX` pixels (so the rest of a
registration error, a line one pixel wider, noise and binarisation do not count); an opening with a
:data:`SLIVER_PX` square removes what is thinner. The share of the covered area left is the pair's ``difference``,
for the record only. The decision is taken on the *thick* differences (an opening with a :data:`THICK_PX` square:
a track drawn a few pixels wider, or a residual shift, leaves thinner slivers) by :func:`structure`:

- ``spread``: the share of the covered :data:`CELL_PX` px cells they touch; at most :data:`MAX_SPREAD`;
- ``tracks``: how many of them span :data:`TRACK_PX` px or more (a track or a row of pads, not a defect), per
  :data:`REFERENCE_AREA` px of covered area; at most :data:`MAX_TRACKS`;
- ``slivers``: the share of the cells that only thinner differences touch (a golden image a few pixels off leaves
  slivers along every edge); at most :data:`MAX_SLIVERS`;
- ``missing``: how many whole features of the golden image (a pad, a hole, an island of its two-level picture, off
  the covered area's edge) differ in :data:`FEATURE_GONE` of their pixels, per :data:`REFERENCE_AREA`
  (:func:`missing_features`); at most :data:`MAX_MISSING`. A defect cuts, bridges or adds copper; it rarely removes a
  whole isolated feature, while the golden image of another board shows pads and holes the board does not have.

All are shares or counts per area, so a 2048x1536 frame of several boards at DeepPCB's pixel scale reads as its
boards do. Measured on DeepPCB's 1,000 training pairs (``benchmarks/golden_check.py``; worst true, best wrong):

=============================================  ======  =======  ======  ======  =======  =======
set                                             pairs  refused  spread  tracks  slivers  missing
=============================================  ======  =======  ======  ======  =======  =======
a board and its own golden image (registered)     997        0   0.050    0.00    0.163     1.01
the same, 8 painted ~60 px defects                997        0   0.175    1.01    0.150     1.01
wrong golden images registration accepts          118      117   0.039    0.00    0.000     0.00
golden image 6 px off (6, -4) its registration    997      832   0.000    0.00    0.007     0.00
=============================================  ======  =======  ======  ======  =======  =======

(3 of DeepPCB's golden images are blank; the wrong ones: 3 of other designs, 114 of neighbouring boards, 1 shifted
by 80 px.) The limits sit between the sets: painted pairs reach a spread of 0.175 and one track, the wrong pairs
with at most one track start at a spread of 0.253, those with a spread under the limit at 2.0 tracks; true pairs
reach slivers in 0.163 of their cells (99% under 0.09); true and painted pairs miss at most one whole feature of
their golden image (3 pairs, a pad or a hole), 31 of the 114 neighbouring boards 3 to 6. Two neighbouring boards
that spread and tracks let through are refused for it alone (13000167: 3 holes; 20085019: 5 pads per 640x640 px).
One passes (13000168 against 13000167's golden image, registered 43 px off): it differs from the board in 3 places
only, all in the bottom quarter of the frame (a spread of 0.039, one 158 px straight band, no whole feature
missing), as a large defect at the frame's edge would. A golden image 6 px off on a board with few edges (165 of
997) leaves fewer slivers than some true pairs: registration must not leave such an error. An occluder (a hand, a
cloth, a label) is refused too, and named by :func:`unlike_region`. The 322 rendered photograph pairs
(``data/photo/holdout_val``, ``train_val``) are all accepted (spread at most 0.05, slivers 0.05, nothing missing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import cv2
import numpy as np

from defect_detector.align.mapping import Mapping
from defect_detector.core.config_register import MAX_MISSING, MAX_SLIVERS, MAX_SPREAD, MAX_TRACKS

TOLERANCE_PX = 2
"""A pixel differs only from what the other image shows nowhere within this many pixels (a 5x5 neighbourhood)."""

SLIVER_PX = 3
"""Differences thinner than this many pixels are removed (an opening with a square of this side)."""

CONTRAST = 0.3
"""A pixel differs when it lies more than this share of its image's copper-substrate contrast outside what the other
image shows nearby (each image's two levels: :func:`levels`)."""

LEVEL_SHARE = 0.02
"""The dark and bright levels of an image are its quantiles at this share and one minus it (:func:`levels`)."""

THICK_PX = 9
"""Side (px) of the square opening that leaves the thick differences the structure is measured on: an edge of a
track drawn a few pixels wider, or a residual shift, leaves slivers thinner than this (true DeepPCB pairs: up to 8 px)."""

CELL_PX = 32
"""Side (px, at the frame's resolution) of the grid cells the structure is counted in."""

MIN_CELLS = 64.0
"""Shares of cells are counted over at least this many (a 256x256 frame's): in a small frame two cells of one defect's
edges would be a fifth of the frame (a 96x96 synthetic pair with one defect read slivers 0.22). Frames of 256 px and
more are unaffected."""

TRACK_PX = 150
"""A thick difference whose bounding box spans at least this many pixels on a side is a track (or a row of pads),
not a defect: the longest of 8 painted 60 px defects, merged where they overlap, spans 173 px; the second longest
110 px."""

FEATURE_PX = 60
"""Smallest area (px, at the frame's resolution) of a golden image's feature counted by ``missing``."""

FEATURE_GONE = 0.8
"""A golden image's feature is missing from the frame when at least this share of its pixels differ."""

REGION_CELL = 32
"""Side (px) of the cells :func:`unlike_region` joins into regions."""

CELL_UNLIKE = 0.7
"""A cell is unlike the golden image when more than this share of its pixels differ. An occluder fills its cells
(a flat patch over 40% of a sample board: a region of 42% at 0.7); a golden image 6 px off, or another design,
differs along tracks and pads and fills few cells. It only chooses the words of a refusal."""

OCCLUDED_REGION = 0.1
"""A golden image with one region unlike it covering at least this share of the frame is refused as an occluder
(or no board), not as another design (:func:`unlike_region`)."""

REFERENCE_AREA = 640 * 640
"""Counts are per this many covered pixels (DeepPCB's frame), so that a larger frame is not refused for its size."""

_STEP_PX = 4  # thick differences are joined into regions at this step (px): 16x fewer pixels to label
_FEATURE_STEP = 4  # whole features are labelled at this step (px): 16x fewer pixels to label
_EDGE_PX = 3  # the covered area is shrunk by this much, so interpolated border pixels never count


@dataclass(frozen=True)
class Structure:
    """What the golden check measured of a pair (module docstring). ``difference``: the share of the covered area
    that differs (for the record; no limit applies to it). ``spread``: the share of the covered :data:`CELL_PX` cells
    that thick differences touch. ``regions``: separate thick differences (8-connected, joined at a 4 px step) per
    :data:`REFERENCE_AREA` covered pixels. ``tracks``: of those, the ones :data:`TRACK_PX` px long or more, per
    :data:`REFERENCE_AREA`. ``slivers``: the share of the covered cells that only differences thinner than
    :data:`THICK_PX` touch. ``missing``: whole features of the golden image missing from the frame, per
    :data:`REFERENCE_AREA` (:data:`MAX_MISSING`)."""

    difference: float
    spread: float
    regions: float
    tracks: float
    slivers: float = 0.0
    missing: float = 0.0

    def another_design(
        self,
        max_spread: float = MAX_SPREAD,
        max_tracks: float = MAX_TRACKS,
        max_slivers: float = MAX_SLIVERS,
        max_missing: float = MAX_MISSING,
    ) -> bool:
        """Whether the differences are spread along tracks and pads (another design, board or scale), along every
        edge (a golden image a few pixels off) or are whole features of the golden image, not a few compact places
        (defects)."""
        return self.spread > max_spread or self.tracks > max_tracks or self.slivers > max_slivers or self.missing > max_missing


class Features(NamedTuple):
    """The golden image's whole features (:func:`missing_features`), labelled once at a :data:`_FEATURE_STEP` px step:
    per level (dark, bright) ``labels`` int32 ``[ceil(H / 4), ceil(W / 4)]`` (0: not that level or not covered) and
    ``area`` int64 ``[count]`` each label's pixel count (at that step), ``whole`` bool ``[count]`` the labels of
    :data:`FEATURE_PX` px or more not cut by the covered area's edge (label 0 False); ``size`` ``(w, h)`` of the grid."""

    labels: tuple[np.ndarray, ...]
    area: tuple[np.ndarray, ...]
    whole: tuple[np.ndarray, ...]
    size: tuple[int, int]


class GoldenSide(NamedTuple):
    """The golden check's work on the golden side of a pair: what depends only on the registered golden image and the
    covered area (so on the golden image and the matrix), done once and reused for every frame they fit (a fixed
    fixture's reused matrix: ``align/register.py`` :class:`~defect_detector.align.register.Registrar`). ``valid`` bool
    ``[H, W]`` the covered area (frame pixels), ``covered`` its pixel count; ``golden`` float32 ``[H, W]`` the golden
    image at its two levels (:func:`_normalised`: 0 dark, 1 bright, 0.5 outside ``valid``), ``upper`` / ``lower`` float32
    ``[H, W]`` its :data:`TOLERANCE_PX` dilation plus :data:`CONTRAST` and erosion minus it, ``cells`` bool the
    covered :data:`CELL_PX` cells, ``features`` its whole features; ``golden``, ``upper``, ``lower`` and ``features``
    are None when too little is covered or the golden image is blank there (the pair is blank: :data:`BLANK`)."""

    valid: np.ndarray
    covered: int
    golden: np.ndarray | None
    upper: np.ndarray | None
    lower: np.ndarray | None
    cells: np.ndarray
    features: Features | None


class Difference(NamedTuple):
    """What :func:`differing` found: ``differs`` bool ``[H, W]`` (None: too little covered, or a blank image),
    ``valid`` bool ``[H, W]`` the covered area used, ``golden`` float32 ``[H, W]`` the registered golden image at its
    two levels (0 dark, 1 bright, 0.5 outside ``valid``; None with ``differs``), ``side`` the :class:`GoldenSide` it was
    measured with (None: none was prepared)."""

    differs: np.ndarray | None
    valid: np.ndarray
    golden: np.ndarray | None = None
    side: GoldenSide | None = None


BLANK = Structure(1.0, 1.0, 0.0, 0.0, 1.0, 0.0)
"""The structure recorded for a pair with nothing covered, a blank image or a golden image of another size (refused)."""


def covered_area(mapping: Mapping, frame_shape: tuple[int, int]) -> np.ndarray:
    """bool ``[H, W]`` of the frame: where the golden image, moved by ``mapping`` (golden -> frame pixels,
    ``align/mapping.py``), lies, less a :data:`_EDGE_PX` border."""
    ones = np.ones(mapping.golden_shape, np.uint8)
    warped = mapping.golden_into_frame(ones, frame_shape[:2], cv2.INTER_NEAREST, 0)
    side = 2 * _EDGE_PX + 1
    return cv2.erode(warped, np.ones((side, side), np.uint8)) > 0


def levels(image: np.ndarray, mask: np.ndarray) -> tuple[float, float]:
    """``(dark, bright)`` grey levels of uint8 ``image`` ``[H, W]`` within uint8 ``mask`` ``[H, W]`` (copper and
    substrate on a board): its :data:`LEVEL_SHARE` and ``1 - LEVEL_SHARE`` quantiles, which neither large defects nor
    a grey occluder move as they move a mean and a spread; where one level holds less than that share (a nearly empty
    board), the means of the two classes Otsu's threshold (``cv2.threshold``, on the pixels within ``mask``) splits the
    image into."""
    hist = cv2.calcHist([image], [0], mask, [256], [0, 256]).ravel().astype(np.float64)
    p = hist / max(hist.sum(), 1.0)
    omega, mu = np.cumsum(p), np.cumsum(p * np.arange(256))
    dark, bright = float(np.searchsorted(omega, LEVEL_SHARE)), float(np.searchsorted(omega, 1.0 - LEVEL_SHARE))
    pixels = image[mask > 0] if mask is not None else image.ravel()
    t = int(cv2.threshold(pixels.reshape(1, -1), 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)[0]) if pixels.size else 0
    otsu = (mu[t] / max(omega[t], 1e-12), (mu[-1] - mu[t]) / max(1.0 - omega[t], 1e-12))
    if bright - dark < 0.5 * (otsu[1] - otsu[0]):
        return float(otsu[0]), float(otsu[1])
    return dark, bright


def _normalised(image: np.ndarray, mask: np.ndarray, outside: np.ndarray) -> np.ndarray:
    """float32 ``[H, W]``: 0 at the image's dark level, 1 at its bright level (:func:`levels`); 0.5 where ``outside``."""
    dark, bright = levels(image, mask)
    out = (image.astype(np.float32) - np.float32(dark)) * np.float32(1.0 / max(bright - dark, 1e-3))
    np.copyto(out, np.float32(0.5), where=outside)
    return out


def golden_side(golden: np.ndarray, valid: np.ndarray | None = None) -> GoldenSide:
    """The :class:`GoldenSide` of the registered golden image (uint8 ``[H, W]``, frame pixels) within the covered area
    ``valid`` (bool ``[H, W]``; None: all of it), for :func:`compare` with every frame of that shape it is registered to."""
    valid = np.ones(golden.shape, bool) if valid is None else np.ascontiguousarray(valid, dtype=bool)
    if valid.shape != golden.shape:
        raise ValueError(f"golden image {golden.shape} and covered area {valid.shape} must have one shape")
    mask = valid.view(np.uint8)
    covered = cv2.countNonZero(mask)
    grid = (-(-golden.shape[1] // CELL_PX), -(-golden.shape[0] // CELL_PX))
    cells = cv2.resize(mask, grid, interpolation=cv2.INTER_AREA) > 0
    if covered < 16 or cv2.meanStdDev(golden, mask=mask)[1][0, 0] < 1e-3:
        return GoldenSide(valid, covered, None, None, None, cells, None)
    planes = np.empty((3, *golden.shape), np.float32)  # one block, kept whole: fewer fresh pages to fault in per frame
    b, upper, lower = planes
    np.copyto(b, _normalised(golden, mask, ~valid))
    kernel = np.ones((2 * TOLERANCE_PX + 1,) * 2, np.uint8)
    c = np.float32(CONTRAST)
    cv2.dilate(b, kernel, dst=upper)
    cv2.erode(b, kernel, dst=lower)
    upper += c
    lower -= c
    return GoldenSide(valid, covered, b, upper, lower, cells, _features(b, valid))


def compare(side: GoldenSide, image: np.ndarray) -> Difference:
    """The :class:`Difference` of the frame (uint8 ``[H, W]``, the shape of ``side``) and a golden image prepared as
    ``side`` (:func:`golden_side`): where they disagree beyond tolerance, slivers removed (module docstring); what
    :func:`differing` finds, without its golden-side work."""
    valid = side.valid
    if image.shape != valid.shape:
        raise ValueError(f"frame {image.shape} and golden side {valid.shape} must have one shape")
    mask = valid.view(np.uint8)
    if side.golden is None or cv2.meanStdDev(image, mask=mask)[1][0, 0] < 1e-3:
        return Difference(None, valid, side=side)
    a = _normalised(image, mask, ~valid)
    return _differs((a > side.upper) | (a < side.lower), a, side.golden, valid, side)


def differing(golden: np.ndarray, image: np.ndarray, valid: np.ndarray | None = None) -> Difference:
    """The :class:`Difference` of the registered golden image (uint8 ``[H, W]``) and the frame (uint8 ``[H, W]``)
    within the covered area ``valid`` (bool ``[H, W]``; None: all of the frame): where they disagree beyond tolerance,
    slivers removed (module docstring). For one frame: nothing of the golden side is kept (a kept
    :class:`GoldenSide` costs the first frame more, measured 1.3x, in fresh memory: :func:`compare` for many)."""
    valid = np.ones(image.shape, bool) if valid is None else np.ascontiguousarray(valid, dtype=bool)
    if golden.shape != image.shape or valid.shape != image.shape:
        raise ValueError(f"golden image {golden.shape}, frame {image.shape} and covered area {valid.shape} must have one shape")
    mask = valid.view(np.uint8)
    if cv2.countNonZero(mask) < 16 or min(cv2.meanStdDev(im, mask=mask)[1][0, 0] for im in (image, golden)) < 1e-3:
        return Difference(None, valid)
    outside = ~valid
    a, b = _normalised(image, mask, outside), _normalised(golden, mask, outside)
    kernel = np.ones((2 * TOLERANCE_PX + 1,) * 2, np.uint8)
    c = np.float32(CONTRAST)
    return _differs((a > cv2.dilate(b, kernel) + c) | (a < cv2.erode(b, kernel) - c), a, b, valid, None)


def _differs(frame_out: np.ndarray, a: np.ndarray, b: np.ndarray, valid: np.ndarray, side: GoldenSide | None) -> Difference:
    """The :class:`Difference` given ``frame_out`` (bool ``[H, W]``: where the frame ``a`` lies outside what the golden
    image ``b`` shows nearby; both float32 ``[H, W]`` at their two levels) and the other way round, measured here."""
    kernel = np.ones((2 * TOLERANCE_PX + 1,) * 2, np.uint8)
    c = np.float32(CONTRAST)
    differs = frame_out
    differs |= (b > cv2.dilate(a, kernel) + c) | (b < cv2.erode(a, kernel) - c)
    differs &= valid
    differs = cv2.morphologyEx(differs.view(np.uint8), cv2.MORPH_OPEN, np.ones((SLIVER_PX, SLIVER_PX), np.uint8))
    return Difference(differs.view(bool), valid, b, side)


def _features(golden: np.ndarray, valid: np.ndarray) -> Features:
    """The :class:`Features` of the golden image at its two levels (float32 ``[H, W]``, :func:`_normalised`) within the
    covered area ``valid`` (bool ``[H, W]``)."""
    size = (-(-golden.shape[1] // _FEATURE_STEP), -(-golden.shape[0] // _FEATURE_STEP))
    small = cv2.resize(golden, size, interpolation=cv2.INTER_LINEAR)  # INTER_AREA costs 5x as much
    covered = cv2.resize(valid.view(np.uint8), size, interpolation=cv2.INTER_NEAREST)
    rim = covered > cv2.erode(covered, np.ones((3, 3), np.uint8), borderType=cv2.BORDER_CONSTANT, borderValue=0)
    labelled, areas, kept = [], [], []
    for level in (small < 0.5, small > 0.5):
        n, labels = cv2.connectedComponents((level & (covered > 0)).view(np.uint8), connectivity=8)  # stats cost 20x more
        area = np.bincount(labels.ravel(), minlength=n)
        whole = area * _FEATURE_STEP**2 >= FEATURE_PX
        whole[np.unique(labels[rim])] = False  # cut by the covered area's edge: not a whole feature
        whole[0] = False
        labelled.append(labels)
        areas.append(area)
        kept.append(whole)
    return Features(tuple(labelled), tuple(areas), tuple(kept), size)


def missing_features(differs: np.ndarray, valid: np.ndarray, golden: np.ndarray, features: Features | None = None) -> int:
    """How many whole features of the golden image are missing from the frame: connected regions of either of its two
    levels (``golden``, float32 ``[H, W]`` of :class:`Difference`) of :data:`FEATURE_PX` px or more, not touching the
    edge of the covered area ``valid`` (a feature cut there is not whole), of which :data:`FEATURE_GONE` or more of the
    pixels differ (``differs``, bool ``[H, W]``). Labelled at a :data:`_FEATURE_STEP` px step, once per golden side
    (``features``: :attr:`GoldenSide.features`; None: labelled here)."""
    features = features if features is not None else _features(golden, valid)
    gone = cv2.resize(differs.view(np.uint8) * np.uint8(255), features.size, interpolation=cv2.INTER_LINEAR) > 127
    count = 0
    for labels, area, whole in zip(features.labels, features.area, features.whole):
        count += int((whole & (np.bincount(labels[gone], minlength=len(whole)) >= FEATURE_GONE * area)).sum())
    return count


def _longest_sides(labels: np.ndarray, count: int) -> np.ndarray:
    """int ``[count - 1]``: the longer side (px) of the bounding box of each region 1..count-1 of int32 ``labels``
    ``[H, W]`` (as ``connectedComponentsWithStats``, which costs several times the labelling itself)."""
    if count < 2:
        return np.zeros(0, np.int64)
    ys, xs = np.nonzero(labels)
    order = np.argsort(labels[ys, xs], kind="stable")
    ys, xs = ys[order], xs[order]
    starts = np.searchsorted(labels[ys, xs], np.arange(1, count))
    width = np.maximum.reduceat(xs, starts) - np.minimum.reduceat(xs, starts)
    height = np.maximum.reduceat(ys, starts) - np.minimum.reduceat(ys, starts)
    return np.maximum(width, height) + 1


def structure(
    differs: np.ndarray | None, valid: np.ndarray, golden: np.ndarray | None = None, side: GoldenSide | None = None
) -> Structure:
    """The :class:`Structure` of bool ``differs`` ``[H, W]`` (from :func:`differing`; None: blank) within the covered
    area ``valid`` (bool ``[H, W]``), at the frame's resolution: thick differences (an opening with a
    :data:`THICK_PX` square) counted in :data:`CELL_PX` cells; whole features of the registered ``golden`` image
    (float32 ``[H, W]`` of :class:`Difference`; None: not counted) missing from the frame. ``side``: the
    :class:`GoldenSide` of ``valid`` and ``golden`` (its covered cells and features reused; None: computed here)."""
    if differs is None:
        return BLANK
    side = side if side is not None and side.valid is valid else None
    mask = valid.view(np.uint8)
    covered = side.covered if side is not None else cv2.countNonZero(mask)
    if covered == 0:
        return BLANK
    d8 = differs.view(np.uint8)
    thick = cv2.morphologyEx(d8, cv2.MORPH_OPEN, np.ones((THICK_PX, THICK_PX), np.uint8))
    grid = (-(-differs.shape[1] // CELL_PX), -(-differs.shape[0] // CELL_PX))
    cells = side.cells if side is not None else cv2.resize(mask, grid, interpolation=cv2.INTER_AREA) > 0
    touched = (cv2.resize(thick * np.uint8(255), grid, interpolation=cv2.INTER_AREA) > 0) & cells
    thin = (cv2.resize(d8 * np.uint8(255), grid, interpolation=cv2.INTER_AREA) > 0) & cells & ~touched
    coarse = cv2.resize(thick * np.uint8(255), (-(-d8.shape[1] // _STEP_PX), -(-d8.shape[0] // _STEP_PX)), interpolation=cv2.INTER_AREA)
    count, labels = cv2.connectedComponents((coarse > 0).view(np.uint8), connectivity=8)
    sides = _longest_sides(labels, count) * _STEP_PX
    per_area = REFERENCE_AREA / covered
    return Structure(
        difference=cv2.countNonZero(d8) / covered,
        spread=float(touched.sum()) / max(float(cells.sum()), MIN_CELLS),
        regions=(count - 1) * per_area,
        tracks=float((sides >= TRACK_PX).sum()) * per_area,
        slivers=float(thin.sum()) / max(float(cells.sum()), MIN_CELLS),
        missing=0.0 if golden is None else missing_features(differs, valid, golden, _features_of(side, golden)) * per_area,
    )


def _features_of(side: GoldenSide | None, golden: np.ndarray) -> Features | None:
    """``side``'s features when it was prepared from ``golden`` (the same array), else None."""
    return side.features if side is not None and side.golden is golden else None


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
