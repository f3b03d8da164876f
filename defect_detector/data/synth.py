"""Synthetic binarized PCB images with the six DeepPCB defect types, for tests and demos.

A board is drawn like a DeepPCB scan: white substrate (255) with black copper (0): traces at
0/45/90 degrees, square and round pads, vias (rings) and copper pours. Defects are then drawn on
a copy of that defect-free template; each defect's box is the extent of the pixels it changed,
grown to at least 12 px (times ``min(H, W) / 640``). Labels index ``DEEPPCB_CLASSES``:
0 open, 1 short, 2 mousebite, 3 spur, 4 copper, 5 pin-hole.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from defect_detector.core.io import atomic_write_bytes
from defect_detector.data.coco_json import box_annotations, write_generated

COPPER = 0
SUBSTRATE = 255
_MIN_BOX = 12.0
_MAX_BOX = 60.0
_MARGIN = 3.0
_TRIES_PER_DEFECT = 40
_DIRECTIONS = [(math.cos(k * math.pi / 4), math.sin(k * math.pi / 4)) for k in range(8)]

# A shape to fill: integer polygon vertices [K, 2] (x, y) and a grey value.
_Shape = tuple[np.ndarray, int]


@dataclass
class _Layout:
    """Defect-free board geometry: trace segments ``(x0, y0, x1, y1, width)`` and solid copper rectangles."""

    scale: float
    segments: list[tuple[float, float, float, float, float]] = field(default_factory=list)
    solids: list[tuple[float, float, float, float]] = field(default_factory=list)


def _segment_polygon(p0: np.ndarray, p1: np.ndarray, width: float) -> np.ndarray:
    """The rectangle of ``width`` around the segment p0-p1, as int32 vertices [4, 2]."""
    d = p1 - p0
    n = np.array([-d[1], d[0]]) / max(np.hypot(*d), 1e-6) * (width / 2.0)
    return np.round(np.stack([p0 + n, p1 + n, p1 - n, p0 - n])).astype(np.int32)


def _disc(center: np.ndarray, radius: float, jitter: float = 0.0, rng: np.random.Generator | None = None) -> np.ndarray:
    """A (optionally irregular) disc as int32 vertices [K, 2]."""
    angles = np.linspace(0.0, 2.0 * math.pi, 24, endpoint=False)
    radii = np.full(angles.shape, radius)
    if jitter and rng is not None:
        radii = radii * rng.uniform(1.0 - jitter, 1.0, size=angles.shape)
    pts = np.stack([center[0] + radii * np.cos(angles), center[1] + radii * np.sin(angles)], axis=1)
    return np.round(pts).astype(np.int32)


def _draw_layout(image: np.ndarray, rng: np.random.Generator) -> _Layout:
    """Draw traces, pads, vias and pours as copper on ``image`` (uint8 [H, W], filled with substrate)."""
    h, w = image.shape
    s = min(h, w) / 640.0
    layout = _Layout(scale=s)
    margin = 12.0 * s
    density = (h * w) / (640.0 * 640.0 * s * s)

    for _ in range(int(rng.integers(1, 3) * density)):
        pw, ph = rng.uniform(60, 160, size=2) * s
        x0, y0 = rng.uniform(margin, w - margin - pw), rng.uniform(margin, h - margin - ph)
        cv2.rectangle(image, (round(x0), round(y0)), (round(x0 + pw), round(y0 + ph)), COPPER, -1)
        layout.solids.append((x0, y0, x0 + pw, y0 + ph))

    for _ in range(int(rng.integers(16, 26) * density)):
        width = float(rng.uniform(8, 18) * s)
        point = rng.uniform([margin, margin], [w - margin, h - margin])
        points = [point]
        heading = int(rng.integers(8))
        for _ in range(int(rng.integers(1, 4))):
            length = rng.uniform(60, 260) * s
            nxt = np.clip(point + length * np.array(_DIRECTIONS[heading]), [margin, margin], [w - margin, h - margin])
            if np.hypot(*(nxt - point)) < 4 * width:
                break
            cv2.line(image, tuple(np.round(point).astype(int)), tuple(np.round(nxt).astype(int)), COPPER, max(2, round(width)))
            layout.segments.append((*point, *nxt, width))
            points.append(nxt)
            point = nxt
            heading = (heading + int(rng.choice([-2, -1, 1, 2]))) % 8
        for end in (points[0], points[-1]):
            _draw_pad(image, layout, end, width, rng)

    for _ in range(int(rng.integers(4, 10) * density)):
        center = rng.uniform([margin * 2, margin * 2], [w - margin * 2, h - margin * 2])
        _draw_pad(image, layout, center, float(rng.uniform(8, 18) * s), rng)
    return layout


def _draw_pad(image: np.ndarray, layout: _Layout, center: np.ndarray, width: float, rng: np.random.Generator) -> None:
    cx, cy = float(center[0]), float(center[1])
    kind = int(rng.integers(3))
    if kind == 0:
        half = width * rng.uniform(1.1, 1.6)
        cv2.rectangle(image, (round(cx - half), round(cy - half)), (round(cx + half), round(cy + half)), COPPER, -1)
        layout.solids.append((cx - half, cy - half, cx + half, cy + half))
    elif kind == 1:
        radius = width * rng.uniform(1.1, 1.6)
        cv2.circle(image, (round(cx), round(cy)), round(radius), COPPER, -1)
        half = radius / math.sqrt(2.0)
        layout.solids.append((cx - half, cy - half, cx + half, cy + half))
    else:
        radius = width * rng.uniform(1.2, 1.6)
        cv2.circle(image, (round(cx), round(cy)), round(radius), COPPER, -1)
        cv2.circle(image, (round(cx), round(cy)), max(1, round(radius * 0.45)), SUBSTRATE, -1)


def _value(image: np.ndarray, point: np.ndarray) -> int:
    """Pixel value at ``point`` (x, y); -1 outside the image."""
    x, y = int(round(point[0])), int(round(point[1]))
    if 0 <= y < image.shape[0] and 0 <= x < image.shape[1]:
        return int(image[y, x])
    return -1


def _pick_on_trace(image: np.ndarray, layout: _Layout, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, float] | None:
    """A point inside a trace away from its ends, with unit direction, unit normal (random side) and width.

    None when the point is not plain trace (both edges just outside must be substrate)."""
    if not layout.segments:
        return None
    x0, y0, x1, y1, width = layout.segments[int(rng.integers(len(layout.segments)))]
    p0, p1 = np.array([x0, y0]), np.array([x1, y1])
    length = float(np.hypot(*(p1 - p0)))
    d = (p1 - p0) / length
    n = np.array([-d[1], d[0]]) * rng.choice([-1.0, 1.0])
    point = p0 + d * length * rng.uniform(0.25, 0.75)
    outside = width / 2.0 + 3.0 * layout.scale
    if _value(image, point) != COPPER or _value(image, point + n * outside) != SUBSTRATE or _value(image, point - n * outside) != SUBSTRATE:
        return None
    return point, d, n, width


def _region_is(image: np.ndarray, center: np.ndarray, radius: float, value: int) -> bool:
    """Whether the square window of half-size ``radius`` around ``center`` lies in the image and is all ``value``."""
    h, w = image.shape
    x0, y0 = math.floor(center[0] - radius), math.floor(center[1] - radius)
    x1, y1 = math.ceil(center[0] + radius) + 1, math.ceil(center[1] + radius) + 1
    if x0 < 0 or y0 < 0 or x1 > w or y1 > h:
        return False
    return bool((image[y0:y1, x0:x1] == value).all())


def _open(image: np.ndarray, layout: _Layout, rng: np.random.Generator) -> list[_Shape] | None:
    """A gap cut across a trace."""
    picked = _pick_on_trace(image, layout, rng)
    if picked is None:
        return None
    point, d, _, width = picked
    gap = rng.uniform(5, 14) * layout.scale
    cut = _segment_polygon(point - d * gap / 2, point + d * gap / 2, width + 4 * layout.scale)
    return [(cut, SUBSTRATE)]


def _short(image: np.ndarray, layout: _Layout, rng: np.random.Generator) -> list[_Shape] | None:
    """A thin copper bridge from a trace edge to the next copper along the trace's normal."""
    picked = _pick_on_trace(image, layout, rng)
    if picked is None:
        return None
    point, _, n, width = picked
    s = layout.scale
    start = point + n * (width / 2.0 - 1.0)
    step = width / 2.0 + 1.0
    limit = _MAX_BOX * s - 8 * s
    while step < limit:
        value = _value(image, point + n * step)
        if value == -1:
            return None
        if value == COPPER:
            break
        step += 1.0
    else:
        return None
    if step - width / 2.0 < 3 * s:
        return None
    end = point + n * (step + 1.0)
    return [(_segment_polygon(start, end, rng.uniform(2, 5) * s), COPPER)]


def _mousebite(image: np.ndarray, layout: _Layout, rng: np.random.Generator) -> list[_Shape] | None:
    """One to three small round bites out of a trace edge."""
    picked = _pick_on_trace(image, layout, rng)
    if picked is None:
        return None
    point, d, n, width = picked
    radius = max(2.0 * layout.scale, width * rng.uniform(0.25, 0.42))
    edge = point + n * (width / 2.0)
    count = int(rng.integers(1, 4))
    offsets = (np.arange(count) - (count - 1) / 2.0) * radius * 1.4
    return [(_disc(edge + d * o, radius), SUBSTRATE) for o in offsets]


def _spur(image: np.ndarray, layout: _Layout, rng: np.random.Generator) -> list[_Shape] | None:
    """A thin tapering copper protrusion from a trace edge into free substrate."""
    picked = _pick_on_trace(image, layout, rng)
    if picked is None:
        return None
    point, d, n, width = picked
    s = layout.scale
    angle = rng.uniform(-0.5, 0.5)
    out = n * math.cos(angle) + d * math.sin(angle)
    length = rng.uniform(8, 22) * s
    base = point + n * (width / 2.0 - 1.0)
    for step in np.arange(width / 2.0 + 2.0, width / 2.0 + length + 6 * s, 1.0):
        if _value(image, point + out * step) != SUBSTRATE:
            return None
    half_base = rng.uniform(1.5, 3.5) * s
    across = np.array([-out[1], out[0]])
    tip = base + out * length
    pts = np.stack([base + across * half_base, tip + across * 0.6 * s, tip - across * 0.6 * s, base - across * half_base])
    return [(np.round(pts).astype(np.int32), COPPER)]


def _copper(image: np.ndarray, layout: _Layout, rng: np.random.Generator) -> list[_Shape] | None:
    """An isolated irregular copper blob in free substrate."""
    s = layout.scale
    h, w = image.shape
    radius = rng.uniform(4, 12) * s
    center = rng.uniform([0, 0], [w, h])
    if not _region_is(image, center, radius + 8 * s, SUBSTRATE):
        return None
    return [(_disc(center, radius, jitter=0.4, rng=rng), COPPER)]


def _pin_hole(image: np.ndarray, layout: _Layout, rng: np.random.Generator) -> list[_Shape] | None:
    """A small round hole inside a pad or copper pour."""
    if not layout.solids:
        return None
    s = layout.scale
    radius = rng.uniform(2.5, 6) * s
    x0, y0, x1, y1 = layout.solids[int(rng.integers(len(layout.solids)))]
    inset = radius + 3 * s
    if x1 - x0 <= 2 * inset or y1 - y0 <= 2 * inset:
        return None
    center = rng.uniform([x0 + inset, y0 + inset], [x1 - inset, y1 - inset])
    if not _region_is(image, center, radius + 2 * s, COPPER):
        return None
    return [(_disc(center, radius, jitter=0.2, rng=rng), SUBSTRATE)]


_DRAWERS: tuple[Callable[[np.ndarray, _Layout, np.random.Generator], list[_Shape] | None], ...] = (
    _open,
    _short,
    _mousebite,
    _spur,
    _copper,
    _pin_hole,
)


def _apply_defect(image: np.ndarray, shapes: list[_Shape], scale: float, taken: list[np.ndarray]) -> np.ndarray | None:
    """Fill ``shapes`` into ``image``; return the defect box (float32 [4] xyxy), or undo and return None
    when nothing changed, the box would exceed the maximum size, or it would touch an earlier box."""
    h, w = image.shape
    pts = np.concatenate([p for p, _ in shapes])
    x0, y0 = max(0, int(pts[:, 0].min()) - 2), max(0, int(pts[:, 1].min()) - 2)
    x1, y1 = min(w, int(pts[:, 0].max()) + 3), min(h, int(pts[:, 1].max()) + 3)
    if x0 >= x1 or y0 >= y1:
        return None
    before = image[y0:y1, x0:x1].copy()
    for poly, value in shapes:
        cv2.fillPoly(image, [poly], int(value))
    ys, xs = np.nonzero(image[y0:y1, x0:x1] != before)
    if len(xs) < 4:
        image[y0:y1, x0:x1] = before
        return None
    margin = _MARGIN * scale
    box = np.array(
        [x0 + xs.min() - margin, y0 + ys.min() - margin, x0 + xs.max() + 1 + margin, y0 + ys.max() + 1 + margin], dtype=np.float32
    )
    box = _grow(box, _MIN_BOX * scale, w, h)
    too_big = max(box[2] - box[0], box[3] - box[1]) > _MAX_BOX * scale
    gap = 2.0 * scale
    touches = any(box[0] < t[2] + gap and t[0] < box[2] + gap and box[1] < t[3] + gap and t[1] < box[3] + gap for t in taken)
    if too_big or touches:
        image[y0:y1, x0:x1] = before
        return None
    return box


def _grow(box: np.ndarray, min_size: float, w: int, h: int) -> np.ndarray:
    """Grow ``box`` symmetrically to at least ``min_size`` per side, shifted to stay inside ``w x h``."""
    out = box.copy()
    for lo, hi, limit in ((0, 2, w), (1, 3, h)):
        extra = max(0.0, min_size - float(out[hi] - out[lo]))
        out[lo] -= extra / 2.0
        out[hi] += extra / 2.0
        shift = max(0.0, -float(out[lo])) - max(0.0, float(out[hi]) - limit)
        out[lo] = max(0.0, out[lo] + shift)
        out[hi] = min(float(limit), out[hi] + shift)
    return np.round(out).astype(np.float32)


def generate_board_pair(
    height: int, width: int, rng: np.random.Generator, n_defects: tuple[int, int] = (3, 8)
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A defective board and its defect-free template.

    Returns ``(image uint8 [H, W], template uint8 [H, W], boxes float32 [N, 4] xyxy pixels, labels int64 [N])``
    with ``n_defects[0] <= N <= n_defects[1]`` (fewer only if the board has no room). Every box holds all
    pixels its defect changed; boxes do not overlap.
    """
    template = np.full((height, width), SUBSTRATE, dtype=np.uint8)
    layout = _draw_layout(template, rng)
    image = template.copy()
    target = int(rng.integers(n_defects[0], n_defects[1] + 1))
    boxes: list[np.ndarray] = []
    labels: list[int] = []
    for _ in range(2 * target):
        if len(boxes) >= target:
            break
        label = int(rng.integers(len(_DRAWERS)))
        for _ in range(_TRIES_PER_DEFECT):
            shapes = _DRAWERS[label](image, layout, rng)
            box = _apply_defect(image, shapes, layout.scale, boxes) if shapes else None
            if box is not None:
                boxes.append(box)
                labels.append(label)
                break
    return (
        image,
        template,
        np.array(boxes, dtype=np.float32).reshape(-1, 4),
        np.array(labels, dtype=np.int64),
    )


def generate_board(
    height: int, width: int, rng: np.random.Generator, n_defects: tuple[int, int] = (3, 8)
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A synthetic defective board: ``(image uint8 [H, W], boxes float32 [N, 4] xyxy pixels, labels int64 [N] in 0..5)``.

    Deterministic for the state of ``rng``; see :func:`generate_board_pair`.
    """
    image, _, boxes, labels = generate_board_pair(height, width, rng, n_defects)
    return image, boxes, labels


def write_synthetic_dataset(out_dir: str | os.PathLike[str], n_images: int, height: int, width: int, seed: int) -> Path:
    """Write ``n_images`` boards as ``out_dir/images/synth_NNNNN.png`` and ``out_dir/annotations.json`` (COCO,
    categories ``DEEPPCB_CLASSES`` with ids 1..6, ``info.images_root = "images"``). Image ``i`` depends only on
    ``(seed, i)``. Returns the annotations path.
    """
    out = Path(out_dir)
    images: list[dict[str, object]] = []
    annotations: list[dict[str, object]] = []
    for i in range(n_images):
        image, boxes, labels = generate_board(height, width, np.random.default_rng([seed, i]))
        file_name = f"synth_{i:05d}.png"
        ok, encoded = cv2.imencode(".png", image)
        if not ok:
            raise RuntimeError(f"PNG encoding failed for {file_name}")
        atomic_write_bytes(out / "images" / file_name, encoded.tobytes())
        images.append({"id": i + 1, "file_name": file_name, "width": width, "height": height})
        annotations += box_annotations(i + 1, boxes, labels, len(annotations) + 1)
    return write_generated(out, images, annotations, {"images_root": "images", "description": f"synthetic PCB boards, seed {seed}"})
