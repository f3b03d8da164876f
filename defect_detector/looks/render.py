"""Photograph-like rendering of binarized layouts: a DeepPCB board and its golden image become a grayscale photograph
pair of one look.

DeepPCB's images are binarized scans (copper 0, substrate 255). A line camera sees a finished board: substrate and
copper under solder mask a few tens of grey levels apart, bright tinned pads, dark drilled holes, soft edges, mask
texture, uneven light. :func:`render_pair` draws both images of a pair from the same :class:`Look` and the same
texture and light fields, so the two differ only where their layouts differ (the defects) and by what
:func:`capture` adds to each: a second capture's gain, offset, defocus, noise and JPEG. Coordinates are unchanged:
a box of the layout is a box of the photograph.

Looks come in *families* (:data:`FAMILIES`). ``train`` is what training renders; ``holdout`` uses a contrast band
and a texture that ``train`` never draws, so that a model can be validated on a look it was not trained on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

FAMILIES = ("train", "holdout")
"""Look families: ``train`` (contrast 15-30 or 45-110 levels, grain and blotch textures, any polarity) and
``holdout`` (contrast 31-44 levels, a woven texture, copper brighter than the substrate)."""

_TRAIN_GAPS = ((15.0, 30.0), (45.0, 110.0))
_HOLDOUT_GAP = (31.0, 44.0)
_PAD_MIN_PX = 7
"""Copper at least this far (px, at the layout's scale) from the substrate is a pad or pour, not a track."""
_HOLE_MAX_AREA = 2500
"""Substrate enclosed by copper and smaller than this (px^2, at the layout's scale) is a drilled hole."""


@dataclass(frozen=True)
class Look:
    """One photographic look, shared by a board and its golden image.

    Levels are uint8 grey values: ``substrate``, ``copper`` (under solder mask), ``pad`` (bare, tinned), ``hole``
    (drilled). ``edge_sigma``: Gaussian softness of every edge, px. ``texture``: ``grain``, ``blotch`` or ``weave``;
    ``texture_amp`` its amplitude in grey levels. ``specular``: relative brightness spread on pads. ``gradient`` /
    ``vignette``: relative illumination fall-off across / towards the corners. ``pad_share``: the share of wide
    copper regions that are bare pads (the rest stays under the mask)."""

    substrate: float
    copper: float
    pad: float
    hole: float
    edge_sigma: float
    texture: str
    texture_amp: float
    specular: float
    gradient: float
    vignette: float
    pad_share: float


def _train_levels(rng: np.random.Generator) -> tuple[float, float, float]:
    low, high = _TRAIN_GAPS[int(rng.integers(len(_TRAIN_GAPS)))]
    gap = float(rng.uniform(low, high)) * (1.0 if rng.random() < 0.6 else -1.0)
    substrate = float(rng.uniform(15.0, 200.0))
    copper = float(np.clip(substrate + gap, 5.0, 250.0))
    if abs(copper - substrate) < low:
        copper = substrate - gap
    brighter = max(substrate, copper)
    pad = float(np.clip(brighter + rng.uniform(30.0, 120.0), 0.0, 252.0)) if rng.random() < 0.8 else float(rng.uniform(5.0, 250.0))
    return substrate, copper, pad


def sample_look(rng: np.random.Generator, family: str = "train") -> Look:
    """A random :class:`Look` of ``family`` (:data:`FAMILIES`)."""
    if family not in FAMILIES:
        raise ValueError(f"look family must be one of {', '.join(FAMILIES)}, got {family!r}")
    if family == "train":
        substrate, copper, pad = _train_levels(rng)
        texture = "grain" if rng.random() < 0.5 else "blotch"
    else:
        substrate = float(rng.uniform(18.0, 60.0))
        copper = substrate + float(rng.uniform(*_HOLDOUT_GAP))
        pad = float(np.clip(copper + rng.uniform(50.0, 110.0), 0.0, 252.0))
        texture = "weave"
    return Look(
        substrate=substrate,
        copper=copper,
        pad=pad,
        hole=float(rng.uniform(0.0, min(substrate, copper) * 0.6 + 5.0)),
        edge_sigma=float(rng.uniform(0.6, 2.2)),
        texture=texture,
        texture_amp=float(rng.uniform(1.0, 6.0)),
        specular=float(rng.uniform(0.0, 0.25)),
        gradient=float(rng.uniform(0.0, 0.3)),
        vignette=float(rng.uniform(0.0, 0.3)),
        pad_share=float(rng.uniform(0.4, 1.0)),
    )


def _smooth_field(shape: tuple[int, int], cells: int, rng: np.random.Generator) -> np.ndarray:
    """float32 ``[H, W]`` noise of zero mean and unit spread, smooth over about ``H / cells`` px."""
    h, w = shape
    grid = rng.standard_normal((cells + 3, cells + 3)).astype(np.float32)
    field = cv2.resize(grid, (w, h), interpolation=cv2.INTER_CUBIC)
    return (field - field.mean()) / (field.std() + 1e-6)


def _texture(shape: tuple[int, int], look: Look, rng: np.random.Generator) -> np.ndarray:
    """float32 ``[H, W]`` texture in grey levels (amplitude ``look.texture_amp``)."""
    h, w = shape
    if look.texture == "grain":
        field = cv2.GaussianBlur(rng.standard_normal(shape).astype(np.float32), (0, 0), 0.8)
        field /= field.std() + 1e-6
    elif look.texture == "blotch":
        field = 0.6 * _smooth_field(shape, max(4, h // 24), rng) + 0.4 * rng.standard_normal(shape).astype(np.float32)
    else:
        period = float(rng.uniform(5.0, 11.0))
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        field = np.sin(2 * math.pi * xx / period) * np.sin(2 * math.pi * yy / period) + 0.3 * rng.standard_normal(shape)
        field = field.astype(np.float32)
    return field * look.texture_amp


def _illumination(shape: tuple[int, int], look: Look, rng: np.random.Generator) -> np.ndarray:
    """float32 ``[H, W]`` relative illumination around 1: a linear gradient in a random direction and a vignette."""
    h, w = shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    u, v = (xx - w / 2) / max(w / 2, 1), (yy - h / 2) / max(h / 2, 1)
    angle = rng.uniform(0, 2 * math.pi)
    light = 1.0 + look.gradient * 0.5 * (math.cos(angle) * u + math.sin(angle) * v)
    return (light - look.vignette * 0.5 * (u * u + v * v)).astype(np.float32)


def _wide(copper: np.ndarray, scale: float) -> tuple[int, np.ndarray]:
    """Connected regions of copper (uint8 ``[H, W]``, 1 on copper) at least :data:`_PAD_MIN_PX` from the substrate:
    ``(count, labels int32 [H, W])``."""
    radius = max(1.0, _PAD_MIN_PX * scale)
    cores = (cv2.distanceTransform(copper, cv2.DIST_L2, 5) >= radius).astype(np.uint8)
    wide = (cv2.distanceTransform(1 - cores, cv2.DIST_L2, 5) <= radius) & (copper > 0)
    return cv2.connectedComponents(wide.astype(np.uint8), connectivity=8)


def _pads(layout: np.ndarray, look: Look, scale: float, rng: np.random.Generator) -> np.ndarray:
    """bool ``[H, W]``: the wide copper regions of the golden layout that are bare pads (``look.pad_share`` of them)."""
    count, labels = _wide((layout < 128).astype(np.uint8), scale)
    chosen = np.flatnonzero(rng.random(count) < look.pad_share)
    return np.isin(labels, chosen[chosen > 0])


def _holes(layout: np.ndarray, scale: float) -> np.ndarray:
    """bool ``[H, W]``: the drilled holes of a golden layout, small substrate regions enclosed by copper."""
    substrate = (layout >= 128).astype(np.uint8)
    _, labels, stats, _ = cv2.connectedComponentsWithStats(substrate, connectivity=4)
    h, w = layout.shape
    x, y, bw, bh, area = (stats[:, k] for k in range(5))
    inner = (x > 0) & (y > 0) & (x + bw < w) & (y + bh < h) & (area < _HOLE_MAX_AREA * scale * scale)
    inner[0] = False
    return inner[labels]


def _regions(layout: np.ndarray, golden_pads: np.ndarray, golden_holes: np.ndarray, scale: float) -> tuple[np.ndarray, ...]:
    """float32 masks ``(copper, pad, hole)`` ``[H, W]`` of a binarized layout (uint8, copper dark). Pads are the
    copper that lies on (or within 2 px of) the golden layout's pads, holes the substrate on (or within 2 px of) its
    holes (bool ``golden_pads``, ``golden_holes``), so a board and its golden image differ only where their layouts do."""
    copper = (layout < 128).astype(np.uint8)
    grow = np.ones((5, 5), np.uint8)
    pad = (copper > 0) & (cv2.dilate(golden_pads.astype(np.uint8), grow) > 0)
    hole = (copper == 0) & (cv2.dilate(golden_holes.astype(np.uint8), grow) > 0)
    return copper.astype(np.float32), pad.astype(np.float32), hole.astype(np.float32)


def _photograph(regions: tuple[np.ndarray, ...], look: Look, texture: np.ndarray, light: np.ndarray, sheen: np.ndarray) -> np.ndarray:
    copper, pad, hole = regions
    substrate = 1.0 - copper - hole
    under_mask = copper - pad
    bright = look.pad * (1.0 + look.specular * sheen)
    image = look.substrate * substrate + look.copper * under_mask + bright * pad + look.hole * hole
    image = cv2.GaussianBlur(image.astype(np.float32), (0, 0), look.edge_sigma)
    image = (image + texture * (1.0 - 0.7 * cv2.GaussianBlur(pad, (0, 0), look.edge_sigma))) * light
    return image


def capture(image: np.ndarray, rng: np.random.Generator, strength: float = 1.0) -> np.ndarray:
    """One camera capture of a rendered float32 ``[H, W]`` scene: gain 0.93-1.07 and offset +-4 levels, a slight
    defocus (half of the time), sensor noise (sigma 1-4 levels) and, half of the time, JPEG (quality 70-95); all
    scaled by ``strength`` (0: exact). Returns uint8 ``[H, W]``."""
    out = image.astype(np.float32) * (1.0 + strength * rng.uniform(-0.07, 0.07)) + strength * rng.uniform(-4.0, 4.0)
    if rng.random() < 0.5 and strength > 0:
        out = cv2.GaussianBlur(out, (0, 0), strength * rng.uniform(0.3, 1.0))
    out = out + rng.standard_normal(out.shape).astype(np.float32) * strength * rng.uniform(1.0, 4.0)
    out = np.clip(np.round(out), 0, 255).astype(np.uint8)
    if rng.random() < 0.5 and strength > 0:
        ok, data = cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(70, 96))])
        if ok:
            out = cv2.imdecode(data, cv2.IMREAD_GRAYSCALE)
    return out


def render_pair(
    board: np.ndarray, golden: np.ndarray, look: Look, rng: np.random.Generator, scale: float = 1.0, strength: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Render a binarized (board, golden) layout pair, uint8 ``[H, W]`` each (copper dark, substrate bright), in the
    same frame, as a photograph pair of ``look``: uint8 ``[H, W]`` each, pixel for pixel in the layouts' frame.

    ``scale``: the layouts' pixels per DeepPCB pixel (pads and holes are found at that size). Both images share the
    look, the texture and the light; each then gets its own :func:`capture` (``strength`` 0: none, so the pair
    differs exactly where the layouts do, after the edge blur)."""
    if board.shape != golden.shape or board.ndim != 2:
        raise ValueError(f"a layout pair must be two gray images of one size, got {board.shape} and {golden.shape}")
    shape = board.shape
    texture = _texture(shape, look, rng)
    light = _illumination(shape, look, rng)
    sheen = _smooth_field(shape, max(4, shape[0] // 40), rng)
    golden_pads, golden_holes = _pads(golden, look, scale, rng), _holes(golden, scale)
    images = []
    for layout in (board, golden):
        regions = _regions(layout, golden_pads, golden_holes, scale)
        images.append(capture(_photograph(regions, look, texture, light, sheen), rng, strength))
    return images[0], images[1]
