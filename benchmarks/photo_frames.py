"""Photograph-sized frames for ``python -m benchmarks.bench_frame_cost --photographs`` (issue 46 item 3).

The real photographs of finished boards are 2240-3056 px wide (5.7 MP on average), their defects 40-100 px a side:
DeepPCB's boards seen about 3x larger. Each frame here is a DeepPCB pair (the bundled samples, or a json's first
boards) enlarged ``scale`` times (nearest neighbour: the layouts stay binary) and rendered as a photograph pair of a
``holdout``-family look at that scale (``looks/render.py``: levels, soft edges, texture, pads, light, a capture
each), golden image and board in one frame as a fixture holds them.

YOLOv8n's cost on such a frame is the traced model over the frame at its native resolution, tiled at the model's
input size with the pipeline's overlap (``TILE_OVERLAP`` model pixels at pixel scale 1), one tile per call, the
model alone (crops prepared beforehand): the cost a generic detector pays for keeping the defects at their size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import cv2
import numpy as np
import torch

from defect_detector.data.letterbox import letterbox
from defect_detector.data.tiles import crop_tiles, plan_tiles
from defect_detector.inspect.pipeline import TILE_OVERLAP
from defect_detector.looks.render import render_pair, sample_look

PHOTO_SCALE = 3.5
"""Default enlargement: a 640 px DeepPCB pair becomes 2240 x 2240 px (5.0 MP), the narrowest real photograph."""


def photo_pairs(pairs: Sequence[tuple[str, Any, Any]], scale: float = PHOTO_SCALE, seed: int = 0) -> list[tuple[str, Any, Any]]:
    """``(name, board, golden)`` uint8 photograph pairs ``[round(H * scale), round(W * scale)]`` of binarized
    ``pairs`` (module docstring), one seeded ``holdout`` look each."""
    if not 1.0 <= scale <= 8.0:
        raise ValueError(f"--photo-scale must be within 1-8, got {scale}")
    rng = np.random.default_rng(seed)
    out = []
    for name, board, golden in pairs:
        size = (round(board.shape[1] * scale), round(board.shape[0] * scale))
        layouts = [cv2.resize(image, size, interpolation=cv2.INTER_NEAREST) for image in (board, golden)]
        photo_board, photo_golden = render_pair(*layouts, sample_look(rng, "holdout"), rng, scale=scale)
        out.append((name, photo_board, photo_golden))
    return out


def yolo_tiled(yolo: torch.jit.ScriptModule, image: np.ndarray, imgsz: int) -> tuple[Callable[[], Any], int]:
    """``(call, tiles)``: one call runs the traced YOLOv8n (``[1, 3, imgsz, imgsz]``) over every tile of gray uint8
    ``image`` cut at ``imgsz`` px with ``TILE_OVERLAP`` px of overlap (edge tiles letterboxed), tile by tile."""
    record = plan_tiles(image.shape[0], image.shape[1], imgsz, min(TILE_OVERLAP, imgsz // 2))
    crops = [letterbox(tile, imgsz)[0] for tile in crop_tiles(image, record)]
    inputs = [torch.from_numpy(crop).float().div_(255.0).expand(1, 3, imgsz, imgsz).contiguous() for crop in crops]

    def call() -> None:
        for x in inputs:
            yolo(x)

    return call, len(inputs)
