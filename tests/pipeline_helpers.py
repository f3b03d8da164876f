"""Test shorthands for the frame pipeline (``inspect/pipeline.py``): frames of any OpenCV form through one
:class:`Pipeline` call, at the weights' operating point unless ``conf`` / ``iou`` are given."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from defect_detector.core.types import Detections, LetterboxMeta, TileRecord
from defect_detector.inspect.pipeline import Pipeline, gray_frame
from defect_detector.inspect.runtime import Runtime


def detect(
    runtime: Runtime,
    frames: Sequence[np.ndarray],
    conf: float | None = None,
    iou: float | None = None,
    max_det: int = 100,
    references: Sequence[np.ndarray | None] | None = None,
    tile: bool | None = None,
) -> list[Detections]:
    """``frames`` converted at the pipeline's entry (``gray_frame``), then one ``Pipeline.detect`` call."""
    gray = [gray_frame(frame, f"frame {i}") for i, frame in enumerate(frames)]
    return Pipeline(runtime, conf=conf, iou=iou, max_det=max_det, tile=tile).detect(gray, _golden(references))


def preprocess(
    runtime: Runtime, frames: Sequence[np.ndarray], references: Sequence[np.ndarray | None] | None = None
) -> tuple[torch.Tensor, list[LetterboxMeta]]:
    """The model input of ``frames`` letterboxed whole, and one ``LetterboxMeta`` per frame."""
    gray = [gray_frame(frame, f"frame {i}") for i, frame in enumerate(frames)]
    batch, metas, _ = Pipeline(runtime, tile=False).inputs(gray, _golden(references))
    return batch, metas


def plan(runtime: Runtime, height: int, width: int, tile: bool | None = None) -> TileRecord | None:
    return Pipeline(runtime, tile=tile).plan(height, width)


def _golden(references: Sequence[np.ndarray | None] | None) -> list[np.ndarray | None] | None:
    """Golden images converted at the entry like frames (``gray_frame``), already registered into their frames."""
    if references is None:
        return None
    return [None if r is None else gray_frame(r, f"reference of frame {i}") for i, r in enumerate(references)]
