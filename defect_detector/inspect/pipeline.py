"""THE frame pipeline: every command that takes a frame (predict, val, calibrate, demo, bench, station) goes through it.

    frame (any of OpenCV's forms) --gray_frame--> uint8 [H, W]  (once, at the entry: sources and the API call it)
      -> the prepare stage (``inspect/prepare.py``): its design, golden image registered into the frame (reference
         models only), screens, and the plan: letterbox whole, or overlapping tiles at the training scale
         (:meth:`Pipeline.plan`, a ``TileRecord``)
      -> model input [N, C, imgsz, imgsz] (one row per letterboxed frame or tile) -> ``Runtime.infer`` in chunks
      -> postprocess (NMS per row, boxes back to frame or tile pixels) -> tiles merged into the frame
      -> nested calls merged, one call per defect (``model/postprocess.py`` ``merge_nested``, the weights' ``merge_ios``)
      -> a tiled frame's calls kept where it and its golden image differ (``align/tile_gate.py``, reference models)
      -> per-frame drift statistics, pooled over its tiles

The geometry is recorded, not hidden: every :class:`~defect_detector.core.types.Detections` carries its
``LetterboxMeta`` and, for a tiled frame, its ``TileRecord``.

``max_det`` applies to each model input (a letterboxed frame, or one tile) before the merge, and a tiled frame keeps
at most ``max_det`` x its tile count after the merge: a tile is what the model saw during training and validation, so
``max_det`` keeps its meaning per view, and a 2048x1536 panel of six boards is not held to one board's worth of calls.
Calls cut by the cap are counted in ``Detections.dropped``; calls merged into another on the same defect (the weights'
``merge_ios``, applied to the whole frame before the cap) in ``Detections.merged``.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from defect_detector.align.tile_gate import gate_tiled
from defect_detector.core.errors import DatasetError
from defect_detector.core.limits import Limits
from defect_detector.core.types import Detections, LetterboxMeta, TileRecord
from defect_detector.data.images import ConversionNotice, to_gray_uint8
from defect_detector.data.letterbox import letterbox
from defect_detector.data.tiles import EDGE_MARGIN, crop_tiles, merge_tile_detections, plan_tiles, pool_tile_stats
from defect_detector.inspect.references import References
from defect_detector.inspect.runtime import Runtime
from defect_detector.model.postprocess import PRE_NMS_TOPK, demote_and_drop, merge_nested, postprocess

log = logging.getLogger("defect_detector.inspect")

TILE_WHEN_SHRUNK = 1.25
"""Auto tiling: a frame is tiled when letterboxing would scale it below ``pixel_scale / TILE_WHEN_SHRUNK``, i.e.
show its defects over 1.25x smaller than in training; milder shrinking (a 800x600 board into 640: 0.8) is
letterboxed whole, within the range scale augmentation and defect sizes already cover."""

TILE_OVERLAP = 96
"""Least overlap of neighbouring tiles, in model-input pixels (``round(96 / pixel_scale)`` original pixels):
wider than DeepPCB's defects (99% of the training boxes are under ~80 px), so each lies whole in some tile."""

SHRINK_WARNING = 8.0
"""Letterboxing a frame whole to over this many times smaller (per side) is logged once per pipeline as a warning:
defects then shrink below what the model was trained on (tiling, ``predict --tile``, keeps their scale)."""

MAX_BATCH = 32
"""Most model inputs (letterboxed frames or tiles, before test-time augmentation) per model call on an accelerator."""

MAX_BATCH_CPU = 2
""":data:`MAX_BATCH` on the CPU. Per-input time of the bundled model at 640, 1 thread: batch 1 38 ms, 2 34, 3 35,
4 44, 6 47, 12 52-59 ms (larger batches' activations outgrow the caches), so a 12-tile frame runs as 6 calls of 2."""

FEATURES_KEPT = 8
"""Designs whose golden features a pipeline keeps (:meth:`Pipeline.design_features`; least recently used dropped first):
at 640 a design's features take about 1.5 MB, tiled 2048x1536 about 18 MB."""

_CHANNELS = (1, 3, 4)


def check_image(image: Any, what: str) -> np.ndarray:
    """``image`` if it is an OpenCV image :func:`to_gray_uint8` accepts (``[H, W]`` or ``[H, W, 1|3|4]``, uint8 or
    uint16, non-empty), else ``ValueError`` starting ``"{what}: "``."""
    if not isinstance(image, np.ndarray):
        raise ValueError(f"{what}: expected a numpy array, got {type(image).__name__}")
    if image.ndim not in (2, 3):
        raise ValueError(f"{what}: expected shape [H, W] or [H, W, C], got {image.shape}")
    if image.ndim == 3 and image.shape[2] not in _CHANNELS:
        raise ValueError(f"{what}: expected 1, 3 (BGR) or 4 (BGRA) channels, got {image.shape[2]} (shape {image.shape})")
    if image.shape[0] == 0 or image.shape[1] == 0:
        raise ValueError(f"{what}: empty image, shape {image.shape}")
    if image.dtype not in (np.uint8, np.uint16):
        raise ValueError(f"{what}: expected dtype uint8 or uint16, got {image.dtype}")
    return image


def check_channels(runtime: Runtime, has_reference: bool, name: str) -> None:
    """``ValueError`` naming frame ``name`` when a golden image comes with it but ``runtime``'s model takes one channel."""
    if runtime.channels == 1 and has_reference:
        raise ValueError(f"{name}: a golden image was given, but this model takes 1 input channel (no reference)")


def gray_frame(image: Any, what: str = "frame", notice: ConversionNotice | None = None) -> np.ndarray:
    """The pipeline's entry: any frame OpenCV gives (gray, BGR, BGRA, 8 or 16 bit) as uint8 ``[H, W]``.

    Colour, alpha and 16-bit input is converted (``data/images.py``) and reported once per ``notice`` (a source's,
    or the caller's). ``ValueError`` naming ``what`` for anything that is not such an image."""
    try:
        gray, kinds = to_gray_uint8(check_image(image, what))
    except DatasetError as exc:
        raise ValueError(f"{what}: {exc}") from exc
    if notice is not None:
        notice.note(image, kinds, what)
    return gray


class Pipeline:
    """A :class:`Runtime` with its golden images, operating point and tiling policy: frames in, detections in frame
    pixels out.

    ``references``: where each frame's golden image comes from (reference models; the prepare stage registers it). ``align``:
    register a golden image given per frame into it (False: use it as given, already aligned). ``conf`` / ``iou``:
    score threshold and per-class NMS IoU; None takes the operating point the weights store
    (``Runtime.operating_point``: ``eval.f1_conf`` and ``eval.nms_iou``; the weights' cross-class demotion always
    applies) and each taught design's own threshold and tolerance map (``Runtime.design_points``,
    ``Runtime.design_tolerances``); an explicit ``conf`` applies to every design as it is, without either.
    ``golden_view``: run a golden-template model in its golden images' pixels, their features computed once per design
    (``inspect/prepare.py``; None: whenever the model can, :attr:`caches_golden`). ``max_det``: calls kept per model
    input (see the module docstring). ``tile``: None tiles the frames that letterboxing would shrink well below the
    training scale, True tiles every frame, False letterboxes every frame whole (:meth:`plan`).
    """

    def __init__(
        self,
        runtime: Runtime,
        references: References | None = None,
        conf: float | None = None,
        iou: float | None = None,
        max_det: int = 100,
        tile: bool | None = None,
        align: bool = True,
        golden_view: bool | None = None,
    ) -> None:
        if runtime.channels == 1 and references is not None:
            raise ValueError(
                f"{runtime.path.name} is a single-image model: --reference needs a golden-template model (in_channels 2; "
                "leave --weights out for the bundled one)"
            )
        point = runtime.operating_point
        self.runtime = runtime
        self.references = references
        self.align = align
        self.limits = runtime.limits  # the limits the weights were validated at (core/limits.py)
        self.design_limits = runtime.design_limits  # a taught design's own (limits_for)
        self.conf = point["conf"] if conf is None else float(conf)
        self.design_conf = runtime.design_points if conf is None else {}  # a taught design's own threshold (conf_for)
        self.tolerances = runtime.design_tolerances if conf is None else {}  # a design's tolerance map (inspect/tolerance.py)
        self.areas = runtime.design_areas  # a design's inspection area, whatever the threshold (align/inspection_area.py)
        self.drifts = runtime.design_drifts  # a design's own drift level (monitor/design_drift.py; inspect/drift_inputs.py)
        self.floor = min([self.conf, *self.design_conf.values()])  # calls kept before each frame's own threshold
        self.iou = point["iou"] if iou is None else float(iou)
        self.cross_class = (point["cross_class_iou"], point["cross_class_factor"])  # the weights' setting (v0.10)
        self.merge = (point["merge_ios"], self.floor)  # one call per defect among the calls kept (v0.14; merge_at)
        self.max_det = int(max_det)
        self.tile = tile
        self.golden_view = self.caches_golden if golden_view is None else bool(golden_view)
        if self.golden_view and not self.caches_golden:
            raise ValueError(f"{runtime.path.name}: the golden view needs a siamese model with its golden-features graph, one pass")
        if not 0.0 <= self.conf <= 1.0 or not 0.0 <= self.iou <= 1.0 or self.max_det < 1:
            raise ValueError(f"need 0 <= conf <= 1, 0 <= iou <= 1 and max_det >= 1, got conf={conf}, iou={iou}, max_det={max_det}")
        self._features: OrderedDict[str, tuple[TileRecord | None, tuple[torch.Tensor, ...], torch.Tensor | None]] = OrderedDict()
        self._shrink_warned = False
        self._cap_warned = False  # calls cut by max_det are logged once at debug level

    def limits_for(self, design: str | None) -> Limits:
        """The limits the prepare stage judges a frame of the design whose golden image has fingerprint ``design`` by
        (None: no golden image): the ones ``teach`` set for it, else the weights' (``core/limits.py``)."""
        return self.design_limits.get(design, self.limits) if design is not None else self.limits

    def conf_for(self, design: str | None) -> float:
        """The score threshold of a frame of the design whose golden image has fingerprint ``design`` (None: no golden
        image): the one ``teach`` calibrated for it, else :attr:`conf`. An explicit ``conf`` applies to every design."""
        return self.design_conf.get(design, self.conf) if design is not None else self.conf

    @property
    def caches_golden(self) -> bool:
        """Whether the model can run on a frame against its golden image's cached features (``Runtime.caches_golden``:
        a siamese model whose artifact holds the golden-features graph), one pass (no test-time augmentation)."""
        return bool(getattr(self.runtime, "caches_golden", False)) and self.runtime.tta == "none"

    def plan(self, height: int, width: int, factor: float = 1.0) -> TileRecord | None:
        """How a ``height x width`` frame is placed on the model input: its :class:`TileRecord`, or None to letterbox it whole.

        Auto (``tile`` None): tile when the model records its training ``pixel_scale`` and the letterbox scale
        ``min(imgsz / height, imgsz / width)`` is below ``pixel_scale / TILE_WHEN_SHRUNK``. Tiles are
        ``round(imgsz / pixel_scale)`` original pixels square (``imgsz`` when no scale is recorded), overlapping by at
        least ``round(TILE_OVERLAP / pixel_scale)`` pixels (at most half a tile).

        ``factor``: the frame's working scale (``inspect/design_scale.py``): its design shows ``factor`` times coarser
        than the weights were validated at, so it is planned at ``pixel_scale / factor`` (fewer, larger tiles, or the
        frame letterboxed whole, each shrunk to the validated scale; frame and golden image alike). The letterbox and
        tile records of its detections say so, and map its calls back to its pixels. Ignored without a ``pixel_scale``.
        """
        imgsz, scale, tile = self.runtime.imgsz, self.runtime.pixel_scale, self.tile
        scale = scale / factor if scale else scale
        if tile is None:
            tile = scale is not None and min(imgsz / height, imgsz / width) < scale / TILE_WHEN_SHRUNK
        if not tile:
            return None
        side = max(1, round(imgsz / scale)) if scale else imgsz
        overlap = round(TILE_OVERLAP / scale) if scale else TILE_OVERLAP
        return plan_tiles(height, width, side, min(overlap, side // 2))

    def input_scale(self, height: int, width: int, factor: float = 1.0) -> float:
        """Model-input pixels per pixel of a ``height x width`` frame planned at ``factor`` (:meth:`plan`): its tiles'
        letterbox scale, or its own when letterboxed whole."""
        record = self.plan(height, width, factor)
        return self.runtime.imgsz / (record.tile if record is not None else max(height, width))

    def inputs(
        self,
        images: Sequence[np.ndarray],
        references: Sequence[np.ndarray | None] | None = None,
        plans: Sequence[TileRecord | None] | None = None,
        cached: bool = False,
    ) -> tuple[torch.Tensor, list[LetterboxMeta], list[TileRecord | None]]:
        """The model input of gray uint8 ``[H, W]`` ``images`` (each with its registered reference, same size, for a
        reference model): float ``[N, channels, imgsz, imgsz]`` on the runtime's device, values x/255, one row per
        letterboxed frame or per tile (``TileRecord.origins`` order, frame by frame); one :class:`LetterboxMeta` per row
        and one tile record (None: letterboxed whole) per frame. ``ValueError`` naming the frame for a missing,
        unexpected or mis-sized reference, or an image that did not pass :func:`gray_frame`. ``plans``: each frame's
        :meth:`plan` when the prepare stage made it already (None: planned here). ``cached``: the golden images' features
        come cached (:meth:`golden_pass`): the input holds the image channel alone, ``[N, 1, imgsz, imgsz]``."""
        if len(images) == 0:
            raise ValueError("no frames to inspect")
        pairs = self._pairs(images, None if cached else references, cached)
        planned = list(plans) if plans is not None else [self.plan(*planes[0].shape) for planes in pairs]
        canvases, metas, records = [], [], []
        for planes, record in zip(pairs, planned):
            records.append(record)
            views = zip(*(crop_tiles(p, record) for p in planes)) if record is not None else [planes]
            for view in views:  # one model input: the frame, or one tile of it (and of its reference)
                boxed = [letterbox(plane, self.runtime.imgsz) for plane in view]
                canvases.append(np.stack([canvas for canvas, _ in boxed]))  # uint8 [channels, S, S]
                metas.append(boxed[0][1])
        batch = torch.from_numpy(np.stack(canvases))  # uint8 [N, channels, S, S]
        batch = batch.to(self.runtime.device, non_blocking=True).to(self.runtime.dtype).div_(255.0)
        return batch, metas, records

    def _pairs(
        self, images: Sequence[np.ndarray], references: Sequence[np.ndarray | None] | None, cached: bool = False
    ) -> list[list[np.ndarray]]:
        """``[image]`` or ``[image, reference]`` per frame, checked against the model's channel count."""
        given = [None] * len(images) if references is None else list(references)
        if len(given) != len(images):
            raise ValueError(f"got {len(given)} references for {len(images)} frames; pass one per frame")
        out = []
        for i, (image, reference) in enumerate(zip(images, given)):
            if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 2 or 0 in image.shape:
                raise ValueError(f"frame {i}: expected gray uint8 [H, W] (convert it with gray_frame first), got {_describe(image)}")
            if self.runtime.channels == 2 and reference is None and not cached:
                raise ValueError(f"frame {i}: no golden image; this is a golden-template model: pass one registered reference per frame")
            check_channels(self.runtime, reference is not None, f"frame {i}")
            bad = reference is not None and (not isinstance(reference, np.ndarray) or reference.dtype != np.uint8)
            if reference is not None and (bad or reference.shape != image.shape):
                raise ValueError(
                    f"frame {i}: the golden image must be gray uint8 of the frame's size {image.shape[1]}x{image.shape[0]}, "
                    f"registered into it; got {_describe(reference)}"
                )
            out.append([image] if reference is None else [image, reference])
        return out

    def detect(
        self,
        images: Sequence[np.ndarray],
        references: Sequence[np.ndarray | None] | None = None,
        plans: Sequence[TileRecord | None] | None = None,
        features: Sequence[tuple[torch.Tensor, ...]] | None = None,
    ) -> list[Detections]:
        """Detect defects in gray uint8 ``images`` (one call; see :meth:`inputs` for ``references`` and ``plans``): one
        :class:`Detections` per frame, boxes in the frame's pixels, tiles merged, statistics pooled. All inputs of
        the call run through the model together, in chunks of :data:`MAX_BATCH` (:data:`MAX_BATCH_CPU` on the CPU).
        ``features``: per frame, its golden image's cached features for its plan (:meth:`golden_pass`): the model
        then runs once per input on the image alone (``Runtime.infer_cached``), and ``references`` (the golden images
        in the images' pixels, or None) serve the tiled frames' difference gate only."""
        start = time.perf_counter()
        batch, metas, records = self.inputs(images, references, plans, cached=features is not None)
        self._warn_shrink(images, records)
        golden = tuple(torch.cat(parts) for parts in zip(*features)) if features is not None else None  # per input row
        self.runtime.sync()
        t_pre = time.perf_counter()
        chunk = MAX_BATCH_CPU if self.runtime.device.type == "cpu" else MAX_BATCH
        outputs = [self._infer(batch, golden, i, i + chunk) for i in range(0, batch.shape[0], chunk)]
        pred, stats = torch.cat([p for p, _ in outputs]), torch.cat([s for _, s in outputs])  # [N, A, 4 + C], [N, L, 2]
        self.runtime.sync()
        t_model = time.perf_counter()
        with torch.inference_mode():
            rows = self._postprocess(pred, metas, records)
            frames = self._per_frame(rows, stats.float().cpu(), metas, records)
            refs = [None] * len(images) if references is None else references  # a tiled frame's calls need a difference
            pairs = zip(frames, images, refs, records)
            gated = [gate_tiled(f[0], im, g, r, self.runtime.imgsz) for f, im, g, r in pairs]
            frames = [(d, *f[1:]) for d, f in zip(gated, frames)]
        t_post = time.perf_counter()
        n = len(images)
        timings = {"preprocess": t_pre - start, "model": t_model - t_pre, "postprocess": t_post - t_model}
        timings = {stage: seconds * 1e3 / n for stage, seconds in timings.items()}  # ms per frame
        names = self.runtime.class_names
        cut = sum(dropped for *_, dropped, _ in frames)
        if cut and not self._cap_warned:  # counted in every Detections; predict's summary line says it where --max-det is
            self._cap_warned = True
            log.debug("%d calls above the score threshold were cut by max_det=%d (per model input)", cut, self.max_det)
        return [
            Detections(
                d["boxes"], d["scores"], d["labels"], [names[j] for j in d["labels"].tolist()], s, dict(timings), m, n, r, dropped, merged
            )
            for (d, s, m, dropped, merged), r in zip(frames, records)
        ]

    def _infer(
        self, batch: torch.Tensor, golden: tuple[torch.Tensor, ...] | None, start: int, end: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The model on input rows ``start:end``, against their cached golden features when given."""
        if golden is None:
            return self.runtime.infer(batch[start:end])
        return self.runtime.infer_cached(batch[start:end], tuple(g[start:end] for g in golden))

    def design_features(self, key: str, golden: np.ndarray, plan: TileRecord | None) -> tuple[torch.Tensor, ...]:
        """:meth:`golden_pass` features of the design ``key`` (its golden image ``golden``, cut by ``plan``), computed on
        its first frame and kept for the :data:`FEATURES_KEPT` most recent designs of this pipeline (of its runtime)."""
        return self._design_pass(key, golden, plan)[0]

    def design_stats(self, key: str, golden: np.ndarray, plan: TileRecord | None) -> torch.Tensor | None:
        """The design's golden image's drift statistics, float32 ``[L, 2]``, from the pass that computed (or will
        compute) its :meth:`design_features`: what :meth:`detect` reports for the golden image paired with itself, at
        no extra model call; None when the runtime's golden graph gives none (``Runtime.golden_pass``)."""
        return self._design_pass(key, golden, plan)[1]

    def _design_pass(self, key: str, golden: np.ndarray, plan: TileRecord | None) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
        kept = self._features.get(key)
        if kept is None or kept[0] != plan:
            kept = self._features[key] = (plan, *self.golden_pass(golden, plan))
        self._features.move_to_end(key)
        while len(self._features) > FEATURES_KEPT:
            self._features.popitem(last=False)
        return kept[1], kept[2]

    def golden_pass(self, golden: np.ndarray, plan: TileRecord | None) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
        """A golden image's cached model features (``Runtime.golden_pass``): uint8 ``[H, W]`` letterboxed whole
        (``plan`` None) or cut by ``plan`` as its frames are -> one tensor per trunk output, ``[V, C, h, w]`` with one row
        per model input (``V`` tiles, or 1), and its drift statistics float32 ``[L, 2]`` pooled over the tiles as
        :meth:`detect` pools a frame's (None when the graph gives none)."""
        views = crop_tiles(golden, plan) if plan is not None else [golden]
        canvas = torch.from_numpy(np.stack([letterbox(view, self.runtime.imgsz)[0] for view in views])[:, None])
        canvas = canvas.to(self.runtime.device).to(self.runtime.dtype).div_(255.0)
        chunk = MAX_BATCH_CPU if self.runtime.device.type == "cpu" else MAX_BATCH
        parts = [self.runtime.golden_pass(canvas[i : i + chunk]) for i in range(0, canvas.shape[0], chunk)]
        features = tuple(torch.cat(p) for p in zip(*(f for f, _ in parts)))
        if any(stats is None for _, stats in parts):
            return features, None
        stats = torch.cat([stats for _, stats in parts]).float().cpu()  # [V, L, 2]
        return features, pool_tile_stats(stats) if plan is not None else stats[0]

    def _postprocess(
        self, pred: torch.Tensor, metas: list[LetterboxMeta], records: list[TileRecord | None]
    ) -> list[dict[str, torch.Tensor]]:
        """:func:`postprocess` of each model input (uncapped, on the CPU). A letterboxed frame gets the weights'
        cross-class demotion here; a tile does not, since it is applied once to the merged frame (:meth:`_per_frame`), as
        to a single image: demoting within a tile and again across tiles would demote a call twice."""
        tile_rows = [record is not None for record in records for _ in range(len(record) if record is not None else 1)]
        rows: list[dict[str, torch.Tensor]] = [{} for _ in metas]
        for is_tile, cross_iou in ((False, self.cross_class[0]), (True, None)):
            index = [i for i, t in enumerate(tile_rows) if t == is_tile]
            if index:
                metas_in = [metas[i] for i in index]
                out = postprocess(pred[index], metas_in, self.floor, self.iou, PRE_NMS_TOPK, cross_iou, self.cross_class[1])
                for i, row in zip(index, out):
                    rows[i] = {k: v.cpu() for k, v in row.items()}
        return rows

    def _per_frame(
        self, rows: list[dict[str, torch.Tensor]], stats: torch.Tensor, metas: list[LetterboxMeta], records: list[TileRecord | None]
    ) -> list[tuple[dict[str, torch.Tensor], torch.Tensor, LetterboxMeta, int, int]]:
        """Per frame ``(detections in frame pixels, stats [L, 2], letterbox meta of its first row, calls dropped by
        max_det, calls merged into another)`` from the per-row postprocess output (uncapped; tile pixels for tiles) and
        ``stats [N, L, 2]``. The weights' merge of nested calls (``merge_ios``) runs on the whole frame, after its tiles
        are merged and demoted, so one defect on a seam is one call too."""
        out, first = [], 0
        for record in records:
            if record is None:
                row, merged = self._merge(rows[first])
                row, dropped = _cap(row, self.max_det)
                out.append((row, stats[first], metas[first], dropped, merged))
                first += 1
                continue
            margin = EDGE_MARGIN * record.tile / self.runtime.imgsz  # EDGE_MARGIN is in model pixels
            tiles = slice(first, first + len(record))
            capped = [_cap(row, self.max_det) for row in rows[tiles]]
            calls = merge_tile_detections([r for r, _ in capped], record, self.iou, PRE_NMS_TOPK, margin)
            if self.cross_class[0] is not None:  # across tiles as within one input: one defect on a seam, one call
                calls = demote_and_drop(calls, self.floor, *self.cross_class)
            calls, merged = self._merge(calls)
            calls, dropped = _cap(calls, self.max_det * len(record))
            out.append((calls, pool_tile_stats(stats[tiles]), metas[first], dropped + sum(d for _, d in capped), merged))
            first += len(record)
        return out

    def merge_at(self, floor: float) -> None:
        """Merge nested calls only among those scoring ``floor`` or more (validation keeps calls down to ``eval.conf``
        for mAP and merges at the weights' operating point, so mAP's ranking below the line's threshold stays as it
        was; a pipeline that inspects merges among all the calls it keeps)."""
        self.merge = (self.merge[0], float(floor))

    def _merge(self, calls: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], int]:
        """``calls`` after the weights' :func:`merge_nested` (unchanged when they set no ``merge_ios``), and how many
        were merged."""
        return (calls, 0) if self.merge[0] is None else merge_nested(calls, *self.merge)

    def _warn_shrink(self, images: Sequence[np.ndarray], records: list[TileRecord | None]) -> None:
        """Warn once when a frame letterboxed whole shrinks more than :data:`SHRINK_WARNING` times."""
        for image, record in zip(images, records):
            factor = max(image.shape[:2]) / self.runtime.imgsz
            if record is None and factor > SHRINK_WARNING and not self._shrink_warned:
                self._shrink_warned = True
                h, w = image.shape[:2]
                log.warning(
                    "%dx%d frame letterboxed whole to %d: shrunk %.0fx, and its defects with it; --tile keeps their scale",
                    w,
                    h,
                    self.runtime.imgsz,
                    factor,
                )


def _cap(detections: dict[str, torch.Tensor], max_det: int) -> tuple[dict[str, torch.Tensor], int]:
    """The ``max_det`` best of score-sorted ``detections``, and how many were cut."""
    dropped = max(0, len(detections["scores"]) - max_det)
    return ({k: v[:max_det] for k, v in detections.items()} if dropped else detections), dropped


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {value.shape}"
    return type(value).__name__
