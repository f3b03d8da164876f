"""Defects painted on any golden image, with the image's own grey levels and edges.

A golden image of any look (a binarized scan, a photograph) is read as *substrate* (its most common grey level and
what lies near it) and *copper* (everything that stands out from it: tracks, pours, pads). :func:`paint_defects`
then paints the six DeepPCB kinds (labels index ``DEEPPCB_CLASSES``):

- 0 open: a cut across a track, filled with the substrate's local level;
- 1 short: a bridge between two copper regions, in the copper's local level;
- 2 mousebite: a bite out of a copper edge;
- 3 spur: a thin protrusion from a copper edge into the substrate;
- 4 copper: a blob on the substrate;
- 5 pin-hole: a hole in wide copper.

Sizes are DeepPCB's times ``size`` (1.0 unless the caller knows the design's scale: ``looks/levels.py``); each paint is
blended through a mask blurred to the image's edge softness, with the local texture kept. A paint that would change
its pixels by less than :data:`MIN_CHANGE` grey levels (a bite out of a soft edge whose "copper" lies at the
substrate's level, a bridge between two regions of one level) is not painted: no inspector could mark it, so it would
count as an escape of a defect that is not there. Defects are painted on the board, never on a plain background round
it (``core/board_area.py``: a photographed board on a white table, a scan on a grey frame); there the substrate and
copper are read on the board alone, whose own substrate is its solder mask, not the table. Each defect's box is the
extent of the pixels it changed, padded and grown as DeepPCB's annotators drew theirs (at least
:data:`MIN_BOX_PX` px at DeepPCB's scale). Boxes are xyxy pixels of the golden image's frame.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

from defect_detector.core.board_area import LEVEL_STEP, board_area
from defect_detector.looks.levels import DEEPPCB_TRACK_PX, Levels, read_levels, track_width

__all__ = ["DEEPPCB_TRACK_PX", "MIN_BOX_PX", "PAINTERS", "Levels", "paint_defects", "read_levels", "track_width"]

MIN_BOX_PX = 26.0
"""Smallest box side at DeepPCB's scale (DeepPCB's boxes: 5th percentile 26 px, median 35 px)."""
MIN_CHANGE = 24.0
"""Least change (grey levels, at the 90th percentile of the pixels a defect paints at half strength or more) of a
painted defect: six times the capture model's strongest sensor noise (sigma 4, ``core/capture.py``). On the five
real photographs under the line capture model, painted defects whose change lay below this were caught 35% of the
time (14 of 40; mostly bites out of soft edges that changed 1-15 levels), those above it 90%."""
_DETAIL_REACH = 9
"""Px past a painted box that :func:`_blend`'s texture (a Gaussian of sigma 2: a 17 px kernel) reads."""
_PAD_PX = 7.0
_TRIES = 60
_ALPHA_FLOOR = 0.02
_LEAST_PX = 2
"""The least side (px) of any painted stroke or gap, so a defect on a 2 px track is no 1 px speck."""


def _local_level(image: np.ndarray, mask: np.ndarray, x: float, y: float, radius: int) -> float | None:
    """Median grey level of ``image`` where bool ``mask`` holds, within ``radius`` px of (x, y); None if too few."""
    h, w = image.shape
    x0, y0, x1, y1 = max(0, int(x) - radius), max(0, int(y) - radius), min(w, int(x) + radius + 1), min(h, int(y) + radius + 1)
    values = image[y0:y1, x0:x1][mask[y0:y1, x0:x1]]
    return float(np.median(values)) if values.size >= 8 else None


def _alpha(shape: np.ndarray, sigma: float) -> np.ndarray:
    """float32 ``[H, W]``: the uint8 mask ``shape`` blurred to the image's edge softness ``sigma``, 0 below
    :data:`_ALPHA_FLOOR` (so every pixel a defect changes lies in its box)."""
    alpha = cv2.GaussianBlur(shape.astype(np.float32), (0, 0), max(sigma, 0.3))
    alpha[alpha < _ALPHA_FLOOR] = 0.0
    return alpha


def _blend(image: np.ndarray, alpha: np.ndarray, level: float) -> np.ndarray:
    """``image`` (float32 ``[H, W]``) filled at ``level`` (plus the image's fine texture kept) through ``alpha``."""
    detail = image - cv2.GaussianBlur(image, (0, 0), 2.0)
    return image * (1 - alpha) + (level + 0.5 * detail) * alpha


@dataclass(frozen=True)
class _Maps:
    """Per golden image, computed once: copper and substrate distance transforms ``dc``, ``ds`` (float32 ``[H, W]``,
    px), copper regions ``labels`` (int32 ``[H, W]``, 0 substrate) and their ``count``, and the smoothed copper mask's
    gradient ``gx``, ``gy`` (float32 ``[H, W]``)."""

    dc: np.ndarray
    ds: np.ndarray
    labels: np.ndarray
    count: int
    gx: np.ndarray
    gy: np.ndarray

    @classmethod
    def of(cls, copper_mask: np.ndarray) -> _Maps:
        copper = copper_mask.astype(np.uint8)
        count, labels = cv2.connectedComponents(copper, connectivity=8)
        smooth = cv2.GaussianBlur(copper.astype(np.float32), (0, 0), 3.0)
        return cls(
            cv2.distanceTransform(copper, cv2.DIST_L2, 3),
            cv2.distanceTransform(1 - copper, cv2.DIST_L2, 3),
            labels,
            count,
            cv2.Sobel(smooth, cv2.CV_32F, 1, 0),
            cv2.Sobel(smooth, cv2.CV_32F, 0, 1),
        )


def _direction(maps: _Maps, x: int, y: int) -> tuple[float, float]:
    """Unit vector (dx, dy) pointing from the copper outwards at (x, y): the gradient of the smoothed mask, reversed."""
    gx, gy = float(maps.gx[y, x]), float(maps.gy[y, x])
    norm = math.hypot(gx, gy)
    return (-gx / norm, -gy / norm) if norm > 1e-6 else (1.0, 0.0)


def _pick(candidates: np.ndarray, rng: np.random.Generator) -> tuple[int, int] | None:
    ys, xs = np.nonzero(candidates)
    if xs.size == 0:
        return None
    k = int(rng.integers(xs.size))
    return int(xs[k]), int(ys[k])


# A painter: (levels, maps, rng) -> (uint8 shape mask [H, W], paints copper?) or None.
_Painter = Callable[[Levels, _Maps, np.random.Generator], "tuple[np.ndarray, bool] | None"]


def _across(mask: np.ndarray, x: int, y: int, reach: int) -> tuple[float, float, float]:
    """The shortest chord of copper (bool ``mask`` ``[H, W]``) through (x, y), over 12 directions up to ``reach`` px
    each way: ``(dx, dy, half_length)``, the unit vector across the track and half the chord's length."""
    h, w = mask.shape
    steps = np.arange(1, reach + 1)
    best = (1.0, 0.0, float(reach))
    for angle in np.linspace(0, math.pi, 12, endpoint=False):
        dx, dy = math.cos(angle), math.sin(angle)
        runs = []
        for sign in (1, -1):
            xs = np.clip(np.round(x + sign * steps * dx).astype(int), 0, w - 1)
            ys = np.clip(np.round(y + sign * steps * dy).astype(int), 0, h - 1)
            off = np.flatnonzero(~mask[ys, xs])
            runs.append(float(off[0]) if off.size else float(reach))
        half = (runs[0] + runs[1]) / 2 + 1.0
        if half < best[2]:
            best = (dx, dy, half)
    return best


def _splits(copper: np.ndarray, cut: np.ndarray) -> bool:
    """Whether taking uint8 ``cut`` out of bool ``copper`` (both ``[H, W]``) splits a copper region around it: both
    sides of an open stay copper."""
    ys, xs = np.nonzero(cut)
    if xs.size == 0:
        return False
    margin = 3
    window = (slice(max(0, ys.min() - margin), ys.max() + margin + 1), slice(max(0, xs.min() - margin), xs.max() + margin + 1))
    before = copper[window].astype(np.uint8)
    after = before & (1 - cut[window])
    return cv2.connectedComponents(after, connectivity=8)[0] > cv2.connectedComponents(before, connectivity=8)[0]


def _open(lv: Levels, maps: _Maps, rng: np.random.Generator) -> tuple[np.ndarray, bool] | None:
    dc = maps.dc
    s = lv.size
    spot = _pick((dc >= 2.0 * s) & (dc <= 7.0 * s) & (dc >= cv2.dilate(dc, np.ones((3, 3), np.uint8))), rng)
    if spot is None:
        return None
    x, y = spot
    nx, ny, half = _across(lv.copper_mask, x, y, int(16 * s) + 2)
    half_len, half_gap = half + 2.0 * s, max(rng.uniform(1.5, 4.0) * s, _LEAST_PX / 2)
    tx, ty = -ny, nx
    signs = ((-1, -1), (1, -1), (1, 1), (-1, 1))
    corners = np.array([[x + a * half_len * nx + b * half_gap * tx, y + a * half_len * ny + b * half_gap * ty] for a, b in signs])
    shape = np.zeros(lv.copper_mask.shape, np.uint8)
    cv2.fillPoly(shape, [np.round(corners).astype(np.int32)], 1)
    shape &= lv.copper_mask.astype(np.uint8)
    return (shape, False) if _splits(lv.copper_mask, shape) else None


def _short(lv: Levels, maps: _Maps, rng: np.random.Generator) -> tuple[np.ndarray, bool] | None:
    ds = maps.ds
    s = lv.size
    count, labels = maps.count, maps.labels
    spot = _pick((ds >= 2.0 * s) & (ds <= 10.0 * s), rng)
    if spot is None or count < 3:
        return None
    x, y = spot
    radius = int(ds[y, x] + 2)
    ys, xs = np.nonzero(labels[max(0, y - 4 * radius) : y + 4 * radius + 1, max(0, x - 4 * radius) : x + 4 * radius + 1])
    if xs.size == 0:
        return None
    xs, ys = xs + max(0, x - 4 * radius), ys + max(0, y - 4 * radius)
    order = np.argsort((xs - x) ** 2 + (ys - y) ** 2)
    first = labels[ys[order[0]], xs[order[0]]]
    other = order[labels[ys[order], xs[order]] != first]
    if other.size == 0:
        return None
    p0, p1 = (int(xs[order[0]]), int(ys[order[0]])), (int(xs[other[0]]), int(ys[other[0]]))
    if math.dist(p0, p1) > 24.0 * s:
        return None
    shape = np.zeros(lv.copper_mask.shape, np.uint8)
    cv2.line(shape, p0, p1, 1, max(_LEAST_PX, round(rng.uniform(2.0, 5.0) * s)))
    return shape, True


def _nearby_max(dist: np.ndarray, radius: float) -> np.ndarray:
    """float32 ``[H, W]``: the largest value of the distance map ``dist`` within ``radius`` px (a square)."""
    side = 2 * max(1, round(radius)) + 1
    return cv2.dilate(dist, np.ones((side, side), np.uint8))


def _mousebite(lv: Levels, maps: _Maps, rng: np.random.Generator) -> tuple[np.ndarray, bool] | None:
    dc = maps.dc
    s = lv.size
    radius = max(_LEAST_PX, round(rng.uniform(2.5, 5.5) * s))
    spot = _pick((dc > 0) & (dc <= 1.5) & (_nearby_max(dc, 4.0 * s) > max(3.0 * s, 0.6 * radius + 1)), rng)
    if spot is None:
        return None
    shape = np.zeros(lv.copper_mask.shape, np.uint8)
    cv2.circle(shape, spot, radius, 1, -1)
    shape &= lv.copper_mask.astype(np.uint8)
    return None if _splits(lv.copper_mask, shape) else (shape, False)


def _spur(lv: Levels, maps: _Maps, rng: np.random.Generator) -> tuple[np.ndarray, bool] | None:
    ds = maps.ds
    s = lv.size
    spot = _pick((ds > 0) & (ds <= 1.5) & (_nearby_max(ds, 8.0 * s) > 7.0 * s), rng)
    if spot is None:
        return None
    x, y = spot
    dx, dy = _direction(maps, x, y)
    angle = math.atan2(dy, dx) + rng.uniform(-0.5, 0.5)
    length = rng.uniform(6.0, 14.0) * s
    end = (round(x + length * math.cos(angle)), round(y + length * math.sin(angle)))
    shape = np.zeros(lv.copper_mask.shape, np.uint8)
    cv2.line(shape, (x, y), end, 1, max(_LEAST_PX, round(rng.uniform(1.5, 3.5) * s)))
    return shape, True


def _blob(mask_dist: np.ndarray, s: float, radius_range: tuple[float, float], rng: np.random.Generator) -> np.ndarray | None:
    radius = max(rng.uniform(*radius_range) * s, float(_LEAST_PX))
    spot = _pick(mask_dist > radius + max(3.0 * s, 2.0), rng)
    if spot is None:
        return None
    angles = np.linspace(0, 2 * math.pi, 16, endpoint=False)
    radii = radius * rng.uniform(0.6, 1.0, angles.size)
    points = np.stack([spot[0] + radii * np.cos(angles), spot[1] + radii * np.sin(angles)], axis=1)
    shape = np.zeros(mask_dist.shape, np.uint8)
    cv2.fillPoly(shape, [np.round(points).astype(np.int32)], 1)
    return shape


def _copper(lv: Levels, maps: _Maps, rng: np.random.Generator) -> tuple[np.ndarray, bool] | None:
    ds = maps.ds
    shape = _blob(ds, lv.size, (3.0, 9.0), rng)
    return None if shape is None else (shape, True)


def _pin_hole(lv: Levels, maps: _Maps, rng: np.random.Generator) -> tuple[np.ndarray, bool] | None:
    dc = maps.dc
    shape = _blob(dc, lv.size, (2.5, 5.5), rng)
    return None if shape is None else (shape, False)


PAINTERS: tuple[_Painter, ...] = (_open, _short, _mousebite, _spur, _copper, _pin_hole)
"""One painter per DeepPCB class, in ``DEEPPCB_CLASSES`` order."""


def _box(alpha: np.ndarray, size: float) -> np.ndarray:
    """float32 ``[4]`` xyxy px: the extent of the pixels ``alpha`` (float32 ``[H, W]``) paints, padded by
    :data:`_PAD_PX` times ``size`` (at least the blur's reach), grown to :data:`MIN_BOX_PX` times ``size`` a side
    and moved (not cut) to lie inside the image when it fits."""
    ys, xs = np.nonzero(alpha)
    h, w = alpha.shape
    pad, least = max(_PAD_PX * size, 1.0), MIN_BOX_PX * size
    x0, y0, x1, y1 = xs.min() - pad, ys.min() - pad, xs.max() + 1 + pad, ys.max() + 1 + pad
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    bw, bh = min(max(x1 - x0, least), float(w)), min(max(y1 - y0, least), float(h))
    cx, cy = float(np.clip(cx, bw / 2, w - bw / 2)), float(np.clip(cy, bh / 2, h - bh / 2))
    return np.array([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], np.float32)


def _window(box: np.ndarray, shape: tuple[int, ...]) -> tuple[slice, slice]:
    """The rows and columns of an image of ``shape`` that painting ``box`` (xyxy, every painted pixel inside it) reads:
    the box and :data:`_DETAIL_REACH` px round it, so :func:`_blend` on the window gives what it gives on the image."""
    h, w = shape[:2]
    x0, y0 = max(0, math.floor(box[0]) - _DETAIL_REACH), max(0, math.floor(box[1]) - _DETAIL_REACH)
    return slice(y0, min(h, math.ceil(box[3]) + _DETAIL_REACH)), slice(x0, min(w, math.ceil(box[2]) + _DETAIL_REACH))


def _visible(before: np.ndarray, after: np.ndarray, alpha: np.ndarray) -> bool:
    """Whether painting changed float32 ``before`` into ``after`` (both ``[H, W]``) by :data:`MIN_CHANGE` or more where
    ``alpha`` (float32 ``[H, W]``) paints at half strength or more (the 90th percentile of the change there)."""
    core = alpha >= 0.5
    if not core.any():
        core = alpha > 0
    return bool(np.percentile(np.abs(after[core] - before[core]), 90) >= MIN_CHANGE)


def _inside(box: np.ndarray, alpha: np.ndarray, region: np.ndarray) -> bool:
    """Whether every pixel ``alpha`` paints and the corners of ``box`` (xyxy) lie in bool ``region`` ``[H, W]``."""
    h, w = region.shape
    xs = np.clip(np.array([box[0], box[2] - 1]), 0, w - 1).astype(int)
    ys = np.clip(np.array([box[1], box[3] - 1]), 0, h - 1).astype(int)
    return bool(region[alpha > 0].all() and region[np.ix_(ys, xs)].all())


def _overlaps(box: np.ndarray, boxes: list[np.ndarray]) -> bool:
    return any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in boxes)


def paint_defects(  # noqa: PLR0913 - each a paint option, named by callers
    golden: np.ndarray,
    count: int,
    rng: np.random.Generator,
    classes: tuple[int, ...] = tuple(range(6)),
    avoid: np.ndarray | None = None,
    size: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Paint ``count`` defects of random ``classes`` on a copy of ``golden`` (uint8 ``[H, W]``), none overlapping another
    or a box of ``avoid`` (float32 ``[K, 4]`` xyxy), at ``size`` times DeepPCB's sizes (None: 1.0, the scale the model
    sees the design at, :func:`read_levels`). Returns ``(board uint8 [H, W], boxes float32 [N, 4] xyxy px,
    labels int64 [N])``; N < ``count`` when the design has no room for more (for example no track thin enough to cut,
    or no place where a paint would change the image by :data:`MIN_CHANGE`).
    Only the board is painted (``core/board_area.py``; the whole image when no plain background lies round it, or when
    a phase of the board lies at that background's level: a drawing on a plain ground), its levels read there unless
    the whole image's two phases differ more (a photographed board's metal and solder mask against its white table:
    read on the board alone, its faintest phases, mask over copper and mask over laminate, would be painted). Raises
    ValueError for a blank golden image."""
    area = board_area(golden)
    if area.whole:
        return _painted(golden, count, rng, classes, avoid, size)
    x, y, w, h = area.box
    shift = np.array([x, y, x, y], np.float32)
    within = None if avoid is None else np.asarray(avoid, np.float32).reshape(-1, 4) - shift
    crop, region = np.ascontiguousarray(area.crop(golden)), np.ascontiguousarray(area.crop(area.region))
    levels = read_levels(crop, size, region)
    background = float(np.median(golden[~area.region]))
    if min(abs(levels.substrate - background), abs(levels.copper - background)) <= LEVEL_STEP:  # a phase of the board
        return _painted(golden, count, rng, classes, avoid, size)
    whole = read_levels(golden, size)
    if whole.contrast > levels.contrast:  # the board's metal and mask against its table: the phases that show most
        levels = dataclasses.replace(whole, copper_mask=np.ascontiguousarray(whole.copper_mask[y : y + h, x : x + w]))
    board, boxes, labels = _painted(crop, count, rng, classes, within, size, region, levels)
    out = golden.copy()
    out[y : y + h, x : x + w] = board
    return out, boxes + shift, labels


def _painted(  # noqa: PLR0913 - paint_defects' options
    golden: np.ndarray,
    count: int,
    rng: np.random.Generator,
    classes: tuple[int, ...],
    avoid: np.ndarray | None,
    size: float | None,
    region: np.ndarray | None = None,
    levels: Levels | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`paint_defects` on ``golden``: within the board's ``region`` (bool ``[H, W]``, every painted pixel and
    every box inside it, ``levels`` read there), or the whole of it (None: a board that fills it; its levels read now)."""
    levels = levels if levels is not None else read_levels(golden, size)
    maps = _Maps.of(levels.copper_mask)
    board = golden.astype(np.float32)
    taken: list[np.ndarray] = [b for b in (avoid if avoid is not None else np.zeros((0, 4), np.float32))]
    boxes, labels = [], []
    for _ in range(count * _TRIES):
        if len(boxes) == count:
            break
        label = int(classes[int(rng.integers(len(classes)))])
        painted = PAINTERS[label](levels, maps, rng)
        if painted is None or not painted[0].any():
            continue
        shape, to_copper = painted
        alpha = _alpha(shape, levels.edge_sigma)
        box = _box(alpha, levels.size)
        if _overlaps(box, taken) or (region is not None and not _inside(box, alpha, region)):
            continue
        x, y = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
        near = levels.copper_mask if to_copper else ~levels.copper_mask
        level = _local_level(golden, near, x, y, int(24 * levels.size)) or (levels.copper if to_copper else levels.substrate)
        window = _window(box, board.shape)
        patch = _blend(board[window], alpha[window], level)
        if not _visible(board[window], patch, alpha[window]):
            continue
        board[window] = patch
        taken.append(box)
        boxes.append(box)
        labels.append(label)
    out = np.clip(np.round(board), 0, 255).astype(np.uint8)
    return out, np.array(boxes, np.float32).reshape(-1, 4), np.array(labels, np.int64)
