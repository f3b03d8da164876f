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

Sizes follow the design's track width (:func:`track_width`, DeepPCB's about :data:`DEEPPCB_TRACK_PX`); each paint is
blended through a mask blurred to the image's edge softness, with the local texture kept. Each defect's box is the
extent of the pixels it changed, padded and grown as DeepPCB's annotators drew theirs (at least
:data:`MIN_BOX_PX` px at DeepPCB's scale). Boxes are xyxy pixels of the golden image's frame.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

from defect_detector.looks.levels import DEEPPCB_TRACK_PX, MAX_SIZE, Levels, read_levels, track_width

__all__ = ["DEEPPCB_TRACK_PX", "MAX_SIZE", "MIN_BOX_PX", "PAINTERS", "Levels", "paint_defects", "read_levels", "track_width"]

MIN_BOX_PX = 26.0
"""Smallest box side at DeepPCB's scale (DeepPCB's boxes: 5th percentile 26 px, median 35 px)."""
_PAD_PX = 7.0
_TRIES = 60


def _local_level(image: np.ndarray, mask: np.ndarray, x: float, y: float, radius: int) -> float | None:
    """Median grey level of ``image`` where bool ``mask`` holds, within ``radius`` px of (x, y); None if too few."""
    h, w = image.shape
    x0, y0, x1, y1 = max(0, int(x) - radius), max(0, int(y) - radius), min(w, int(x) + radius + 1), min(h, int(y) + radius + 1)
    values = image[y0:y1, x0:x1][mask[y0:y1, x0:x1]]
    return float(np.median(values)) if values.size >= 8 else None


def _blend(image: np.ndarray, shape: np.ndarray, level: float, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """``image`` (float32) with the uint8 mask ``shape`` filled at ``level`` (plus the image's fine texture kept),
    through a mask blurred to ``sigma``."""
    alpha = cv2.GaussianBlur(shape.astype(np.float32), (0, 0), max(sigma, 0.3))
    detail = image - cv2.GaussianBlur(image, (0, 0), 2.0)
    return image * (1 - alpha) + (level + 0.5 * detail) * alpha


def _direction(mask: np.ndarray, x: int, y: int) -> tuple[float, float]:
    """Unit vector (dx, dy) pointing from the copper outwards at (x, y): the gradient of the smoothed mask, reversed."""
    smooth = cv2.GaussianBlur(mask.astype(np.float32), (0, 0), 3.0)
    gx, gy = cv2.Sobel(smooth, cv2.CV_32F, 1, 0)[y, x], cv2.Sobel(smooth, cv2.CV_32F, 0, 1)[y, x]
    norm = math.hypot(gx, gy)
    return (-gx / norm, -gy / norm) if norm > 1e-6 else (1.0, 0.0)


def _pick(candidates: np.ndarray, rng: np.random.Generator) -> tuple[int, int] | None:
    ys, xs = np.nonzero(candidates)
    if xs.size == 0:
        return None
    k = int(rng.integers(xs.size))
    return int(xs[k]), int(ys[k])


# A painter: (levels, copper distance, substrate distance, rng) -> (uint8 shape mask [H, W], paints copper?) or None.
_Painter = Callable[[Levels, np.ndarray, np.ndarray, np.random.Generator], "tuple[np.ndarray, bool] | None"]


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


def _open(lv: Levels, dc: np.ndarray, ds: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, bool] | None:
    s = lv.size
    spot = _pick((dc >= 2.0 * s) & (dc <= 7.0 * s) & (dc >= cv2.dilate(dc, np.ones((3, 3), np.uint8))), rng)
    if spot is None:
        return None
    x, y = spot
    nx, ny, half = _across(lv.copper_mask, x, y, int(16 * s) + 2)
    half_len, half_gap = half + 2.0 * s, rng.uniform(1.5, 4.0) * s
    tx, ty = -ny, nx
    signs = ((-1, -1), (1, -1), (1, 1), (-1, 1))
    corners = np.array([[x + a * half_len * nx + b * half_gap * tx, y + a * half_len * ny + b * half_gap * ty] for a, b in signs])
    shape = np.zeros(dc.shape, np.uint8)
    cv2.fillPoly(shape, [np.round(corners).astype(np.int32)], 1)
    return shape & lv.copper_mask.astype(np.uint8) if rng.random() < 0.5 else shape, False


def _short(lv: Levels, dc: np.ndarray, ds: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, bool] | None:
    s = lv.size
    count, labels = cv2.connectedComponents(lv.copper_mask.astype(np.uint8), connectivity=8)
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
    shape = np.zeros(dc.shape, np.uint8)
    cv2.line(shape, p0, p1, 1, max(2, round(rng.uniform(2.0, 5.0) * s)))
    return shape, True


def _nearby_max(dist: np.ndarray, radius: float) -> np.ndarray:
    """float32 ``[H, W]``: the largest value of the distance map ``dist`` within ``radius`` px (a square)."""
    side = 2 * max(1, round(radius)) + 1
    return cv2.dilate(dist, np.ones((side, side), np.uint8))


def _mousebite(lv: Levels, dc: np.ndarray, ds: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, bool] | None:
    s = lv.size
    spot = _pick((dc > 0) & (dc <= 1.5) & (_nearby_max(dc, 4.0 * s) > 3.0 * s), rng)
    if spot is None:
        return None
    shape = np.zeros(dc.shape, np.uint8)
    cv2.circle(shape, spot, max(2, round(rng.uniform(2.5, 5.5) * s)), 1, -1)
    return shape, False


def _spur(lv: Levels, dc: np.ndarray, ds: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, bool] | None:
    s = lv.size
    spot = _pick((ds > 0) & (ds <= 1.5) & (_nearby_max(ds, 8.0 * s) > 7.0 * s), rng)
    if spot is None:
        return None
    x, y = spot
    dx, dy = _direction(lv.copper_mask, x, y)
    angle = math.atan2(dy, dx) + rng.uniform(-0.5, 0.5)
    length = rng.uniform(6.0, 14.0) * s
    end = (round(x + length * math.cos(angle)), round(y + length * math.sin(angle)))
    shape = np.zeros(dc.shape, np.uint8)
    cv2.line(shape, (x, y), end, 1, max(2, round(rng.uniform(1.5, 3.5) * s)))
    return shape, True


def _blob(mask_dist: np.ndarray, s: float, radius_range: tuple[float, float], rng: np.random.Generator) -> np.ndarray | None:
    radius = rng.uniform(*radius_range) * s
    spot = _pick(mask_dist > radius + 3.0 * s, rng)
    if spot is None:
        return None
    angles = np.linspace(0, 2 * math.pi, 16, endpoint=False)
    radii = radius * rng.uniform(0.6, 1.0, angles.size)
    points = np.stack([spot[0] + radii * np.cos(angles), spot[1] + radii * np.sin(angles)], axis=1)
    shape = np.zeros(mask_dist.shape, np.uint8)
    cv2.fillPoly(shape, [np.round(points).astype(np.int32)], 1)
    return shape


def _copper(lv: Levels, dc: np.ndarray, ds: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, bool] | None:
    shape = _blob(ds, lv.size, (3.0, 9.0), rng)
    return None if shape is None else (shape, True)


def _pin_hole(lv: Levels, dc: np.ndarray, ds: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, bool] | None:
    shape = _blob(dc, lv.size, (2.5, 5.5), rng)
    return None if shape is None else (shape, False)


PAINTERS: tuple[_Painter, ...] = (_open, _short, _mousebite, _spur, _copper, _pin_hole)
"""One painter per DeepPCB class, in ``DEEPPCB_CLASSES`` order."""


def _box(shape: np.ndarray, size: float, image_shape: tuple[int, int]) -> np.ndarray:
    ys, xs = np.nonzero(shape)
    h, w = image_shape
    pad, least = _PAD_PX * size, MIN_BOX_PX * size
    x0, y0, x1, y1 = xs.min() - pad, ys.min() - pad, xs.max() + 1 + pad, ys.max() + 1 + pad
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    bw, bh = max(x1 - x0, least), max(y1 - y0, least)
    return np.array([max(0.0, cx - bw / 2), max(0.0, cy - bh / 2), min(float(w), cx + bw / 2), min(float(h), cy + bh / 2)], np.float32)


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
    or a box of ``avoid`` (float32 ``[K, 4]`` xyxy), at ``size`` times DeepPCB's sizes (None: read from the design's
    track width, :func:`read_levels`). Returns ``(board uint8 [H, W], boxes float32 [N, 4] xyxy px,
    labels int64 [N])``; N < ``count`` when the design has no room for more (for example no track thin enough to cut).
    Raises ValueError for a blank golden image."""
    levels = read_levels(golden, size)
    copper = levels.copper_mask.astype(np.uint8)
    dc = cv2.distanceTransform(copper, cv2.DIST_L2, 3)
    ds = cv2.distanceTransform(1 - copper, cv2.DIST_L2, 3)
    board = golden.astype(np.float32)
    taken: list[np.ndarray] = [b for b in (avoid if avoid is not None else np.zeros((0, 4), np.float32))]
    boxes, labels = [], []
    for _ in range(count * _TRIES):
        if len(boxes) == count:
            break
        label = int(classes[int(rng.integers(len(classes)))])
        painted = PAINTERS[label](levels, dc, ds, rng)
        if painted is None or not painted[0].any():
            continue
        shape, to_copper = painted
        box = _box(shape, levels.size, golden.shape)
        if _overlaps(box, taken):
            continue
        x, y = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
        near = levels.copper_mask if to_copper else ~levels.copper_mask
        level = _local_level(golden, near, x, y, int(24 * levels.size)) or (levels.copper if to_copper else levels.substrate)
        board = _blend(board, shape, level, levels.edge_sigma, rng)
        taken.append(box)
        boxes.append(box)
        labels.append(label)
    out = np.clip(np.round(board), 0, 255).astype(np.uint8)
    return out, np.array(boxes, np.float32).reshape(-1, 4), np.array(labels, np.int64)
