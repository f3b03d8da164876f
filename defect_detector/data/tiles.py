"""Tiling: cut a frame larger than the training scale into overlapping tiles, and merge the tiles' detections.

Letterboxing a large frame (a 2048x1536 panel of boards) into the model input shrinks every defect by the
same factor, far below the scale the model was trained at. Tiling keeps the pixels: the frame is cut into
``tile x tile`` crops (in original pixels) that overlap by at least ``overlap`` pixels, each crop runs through
the model, and :func:`merge_tile_detections` maps the tiles' boxes back into the frame.

The geometry is recorded, not hidden: :func:`plan_tiles` returns a :class:`TileRecord` (frame size, tile
side, overlap and every tile's origin) and both :func:`crop_tiles` and :func:`merge_tile_detections` read it.
A point ``(x, y)`` of tile ``i`` is ``(x + x0_i, y + y0_i)`` in the frame.

The merge rule. A defect cut by a tile edge is seen in part; if the overlap is wider than the defects (it is
chosen larger than those the model was trained on), the neighbouring tile across that edge sees it whole.
So a box that touches an *interior* tile edge (one that is not the frame's border), within ``margin`` pixels,
is dropped when its opposite side lies inside the neighbouring tile across that edge (then the neighbour
holds the defect whole along that axis); the remaining boxes of all tiles go through per-class NMS, so a
defect lying whole in two tiles' overlap is reported once. A defect *longer than the overlap* along an axis
is cut in every tile that holds it: no tile sees it whole, each keeps its part (clipped at its own edge),
and NMS merges the parts only when they overlap by more than ``iou``; otherwise it is reported as two or more
adjacent boxes, each covering part of the defect.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torchvision.ops import batched_nms, clip_boxes_to_image, remove_small_boxes

from defect_detector.core.constants import PAD_VALUE
from defect_detector.core.types import TileRecord

MIN_SIDE = 1e-3
"""Boxes narrower or shorter than this (pixels) once clipped to the frame lie outside it: dropped."""

EDGE_MARGIN = 4.0
"""Default ``margin`` (pixels) within which a box side counts as touching a tile edge; the runtime passes this many
model-input pixels, in original pixels."""




def _axis_origins(length: int, tile: int, overlap: int) -> tuple[int, ...]:
    """Tile starts along one axis: evenly spread, first at 0, last at ``length - tile``, steps <= ``tile - overlap``."""
    if length <= tile:
        return (0,)
    count = math.ceil((length - overlap) / (tile - overlap))
    step = (length - tile) / (count - 1)
    return tuple(round(i * step) for i in range(count))


def plan_tiles(height: int, width: int, tile: int, overlap: int) -> TileRecord:
    """The fewest ``tile x tile`` tiles per axis that cover a ``height x width`` frame with neighbours overlapping
    by at least ``overlap`` pixels, spread evenly (the actual overlap is usually larger).

    A frame no larger than a tile along an axis gets one tile along it. ``ValueError`` unless
    ``height, width >= 1`` and ``0 <= overlap < tile``.
    """
    if height < 1 or width < 1:
        raise ValueError(f"frame must be at least 1x1 px, got {width}x{height}")
    if tile < 1 or not 0 <= overlap < tile:
        raise ValueError(f"need tile >= 1 and 0 <= overlap < tile, got tile={tile}, overlap={overlap}")
    return TileRecord(height, width, tile, overlap, _axis_origins(width, tile, overlap), _axis_origins(height, tile, overlap))


def crop_tiles(image: np.ndarray, record: TileRecord) -> list[np.ndarray]:
    """uint8 ``[H, W]`` -> ``len(record)`` uint8 ``[tile, tile]`` crops in ``record.origins`` order.

    Where a tile reaches past the frame (a frame smaller than a tile) it is filled with :data:`PAD_VALUE`.
    ``ValueError`` when the image is not ``[record.height, record.width]``.
    """
    if image.shape != (record.height, record.width):
        raise ValueError(f"image of shape {image.shape} does not match the tile plan's {record.height}x{record.width} frame")
    t = record.tile
    crops = []
    for x0, y0 in record.origins:
        crop = image[y0 : y0 + t, x0 : x0 + t]
        if crop.shape != (t, t):
            padded = np.full((t, t), PAD_VALUE, dtype=image.dtype)
            padded[: crop.shape[0], : crop.shape[1]] = crop
            crop = padded
        crops.append(np.ascontiguousarray(crop))
    return crops


def _recoverable(lo: torch.Tensor, hi: torch.Tensor, origins: tuple[int, ...], index: int, tile: int, margin: float) -> torch.Tensor:
    """Along one axis, for boxes ``[lo, hi]`` (frame pixels) of the tile starting at ``origins[index]``: bool ``[K]``,
    whether the box touches an interior edge of the tile (within ``margin``) while its opposite side lies inside the
    neighbouring tile across that edge (not within ``margin`` of the neighbour's own edge), which then holds it whole."""
    start, end = origins[index], origins[index] + tile
    out = torch.zeros_like(lo, dtype=torch.bool)
    if index + 1 < len(origins):  # the far edge is interior (the last tile is flush with the frame)
        out |= (hi >= end - margin) & (lo >= origins[index + 1] + margin)
    if index > 0:  # the near edge is interior (the first tile starts at 0)
        out |= (lo <= start + margin) & (hi <= origins[index - 1] + tile - margin)
    return out


def merge_tile_detections(
    per_tile: Sequence[dict[str, torch.Tensor]], record: TileRecord, iou: float, max_det: int, margin: float = EDGE_MARGIN
) -> dict[str, torch.Tensor]:
    """One frame's detections from its tiles' (see the module docstring for the rule).

    ``per_tile``: one dict per tile in ``record.origins`` order, ``boxes`` float32 ``[K_i, 4]`` xyxy in that tile's
    pixels, ``scores`` float32 ``[K_i]``, ``labels`` int64 ``[K_i]`` (postprocess output mapped to the tile).
    Boxes are shifted into frame pixels, cut boxes whose defect a neighbour holds whole are dropped, the rest
    clipped to the frame (zero-area boxes dropped), then per-class NMS at ``iou`` across tiles. Returns ``boxes``
    float32 ``[K, 4]`` xyxy frame pixels, ``scores`` float32 ``[K]``, ``labels`` int64 ``[K]``, sorted by score,
    at most ``max_det``. ``ValueError`` for a tile count other than ``len(record)``, ``iou`` outside [0, 1] or
    ``max_det < 1``.
    """
    if len(per_tile) != len(record):
        raise ValueError(f"got detections of {len(per_tile)} tiles, the plan has {len(record)}")
    if not 0.0 <= iou <= 1.0 or max_det < 1:
        raise ValueError(f"need 0 <= iou <= 1 and max_det >= 1, got iou={iou}, max_det={max_det}")
    boxes, scores, labels = [], [], []
    for i, det in enumerate(per_tile):
        row, col = divmod(i, len(record.xs))
        x0, y0 = record.xs[col], record.ys[row]
        b = det["boxes"].float().reshape(-1, 4) + torch.tensor([x0, y0, x0, y0], dtype=torch.float32, device=det["boxes"].device)
        drop = _recoverable(b[:, 0], b[:, 2], record.xs, col, record.tile, margin)
        drop |= _recoverable(b[:, 1], b[:, 3], record.ys, row, record.tile, margin)
        boxes.append(b[~drop])
        scores.append(det["scores"].float().reshape(-1)[~drop])
        labels.append(det["labels"].long().reshape(-1)[~drop])
    b, s, c = torch.cat(boxes), torch.cat(scores), torch.cat(labels)
    b = clip_boxes_to_image(b, (record.height, record.width))
    inside = remove_small_boxes(b, MIN_SIDE)
    b, s, c = b[inside], s[inside], c[inside]
    keep = batched_nms(b, s, c, iou)[:max_det]  # indices sorted by descending score
    return {"boxes": b[keep], "scores": s[keep], "labels": c[keep]}


def pool_tile_stats(stats: torch.Tensor) -> torch.Tensor:
    """Per-layer statistics of a frame from those of its equal-size tiles: float ``[N, L, 2]`` (mean, population
    std of each layer's activations on each tile) -> float32 ``[L, 2]``, exactly the statistics of the tiles'
    activations taken together: mean of the means, ``std = sqrt(mean(std^2 + mean^2) - mean^2)`` (clamped at 0)."""
    stats = stats.float()
    mean = stats[..., 0].mean(dim=0)  # [L]
    second = (stats[..., 1].square() + stats[..., 0].square()).mean(dim=0)  # E[x^2], [L]
    return torch.stack((mean, (second - mean.square()).clamp(min=0).sqrt()), dim=-1)
