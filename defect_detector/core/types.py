"""The records that geometry and inference return: how a frame was letterboxed or tiled, and what was found."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LetterboxMeta:
    """How an ``orig_h x orig_w`` image was placed on the letterbox canvas.

    ``scale`` multiplies original-frame pixels; ``pad_x``/``pad_y`` are the canvas
    offsets (pixels) of the resized image's top-left corner.
    """

    scale: float
    pad_x: float
    pad_y: float
    orig_h: int
    orig_w: int


@dataclass(frozen=True)
class TileRecord:
    """How a ``height x width`` frame was cut into ``tile x tile`` tiles (original pixels).

    ``origins``: the ``(x0, y0)`` top-left corner of each tile in the frame, row-major (all tiles of the
    first row of tiles, left to right, then the next row). ``xs`` / ``ys``: the distinct column and row
    origins, ascending. Neighbouring tiles overlap by at least ``overlap`` pixels; the last column and row
    are flush with the frame's right and bottom edge. Along an axis where the frame is shorter than a tile
    there is one tile at 0, reaching past the frame (padded with :data:`~defect_detector.core.constants.PAD_VALUE`).
    """

    height: int
    width: int
    tile: int
    overlap: int
    xs: tuple[int, ...]
    ys: tuple[int, ...]

    @property
    def origins(self) -> list[tuple[int, int]]:
        return [(x0, y0) for y0 in self.ys for x0 in self.xs]

    def __len__(self) -> int:
        return len(self.xs) * len(self.ys)


@dataclass
class Detections:
    """Detections of one frame.

    ``boxes`` float32 ``[K, 4]`` xyxy in the frame's original pixels, ``scores`` float32 ``[K]``,
    ``labels`` int64 ``[K]`` (indices into the model's class names), ``names`` the ``K`` class names,
    all on the CPU and sorted by score. ``stats`` float32 ``[L, 2]``: mean and std of each monitored
    layer (``Runtime.layer_names`` order). ``timings``: milliseconds per stage (``preprocess``, ``model``,
    ``postprocess``) of the batch this frame was in, divided by the number of frames in it. ``letterbox`` says
    how the frame was placed on the model input. ``tiles``: None for a frame letterboxed whole; for a tiled frame
    its :class:`TileRecord` (tile origins in the frame), ``letterbox`` then says how each tile (``tile x tile``
    original pixels, all alike) was placed on the model input, and ``stats`` pool all its tiles' activations.
    ``dropped``: calls above the score threshold that the ``max_det`` cap cut (``inspect/pipeline.py``); ``merged``:
    calls merged into a better-scored call on the same defect (``model/postprocess.py`` ``merge_nested``);
    ``tolerated``: calls its design's tolerance map dropped (``inspect/tolerance.py``: at a place where good boards draw
    calls, not above their score there); ``off_area``: calls dropped off its design's inspection area
    (``align/inspection_area.py``: a fixture, a label, a neighbouring board).
    """

    boxes: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor
    names: list[str]
    stats: torch.Tensor
    timings: dict[str, float]
    letterbox: LetterboxMeta
    batch_size: int = 1
    tiles: TileRecord | None = None
    dropped: int = 0
    merged: int = 0
    tolerated: int = 0
    off_area: int = 0

    def __len__(self) -> int:
        return int(self.labels.numel())

    def keep(self, kept: torch.Tensor, boxes: torch.Tensor | None = None) -> Detections:
        """These detections with only the calls where bool ``kept`` ``[K]`` is set (their order kept); ``boxes``: the
        kept calls' boxes in another frame (the golden view's calls mapped to the frame), else their own."""
        index = kept.nonzero(as_tuple=True)[0]
        chosen = self.boxes[index] if boxes is None else boxes
        names = [self.names[i] for i in index.tolist()]
        return dataclasses.replace(self, boxes=chosen, scores=self.scores[index], labels=self.labels[index], names=names)
