"""Inference runtime: load an exported artifact (or a training checkpoint) and detect defects in frames.

A frame is a numpy image as OpenCV returns it (``deploy/frames.py``: ``[H, W]``, ``[H, W, 1|3|4]``, uint8 or
uint16). Frames are converted to 8-bit grayscale, letterboxed to the model's
``imgsz`` and batched; the model returns decoded boxes and layer statistics (see ``deploy/export.py``);
:func:`defect_detector.model.postprocess.postprocess` applies NMS and maps boxes back to each frame's
original pixels.

A reference model (``channels == 2``, meta ``"reference": true``) also takes one golden reference per frame:
uint8 (or uint16 / colour, converted the same way) ``[H, W]`` with the frame's ``H, W``, already registered
into the frame's pixel frame (``defect_detector.data.register``: the runtime does not align anything). It is
letterboxed with its frame's :class:`LetterboxMeta` and stacked as channel 1 of the model input.

Frames larger than the training scale are tiled (``predict(tile=...)``, :meth:`Runtime.tile_plan`): cut into
overlapping tiles of ``round(imgsz / pixel_scale)`` original pixels (``data/tiles.py``), each letterboxed to
``imgsz`` (a no-op for a full tile), all tiles of all frames batched through the model, and the tiles' boxes
merged back into the frame (:func:`~defect_detector.data.tiles.merge_tile_detections`). A reference is cut
with its frame's :class:`~defect_detector.data.tiles.TileRecord`.

One model pass per input is the default: test-time augmentation only runs when asked for (``tta=``,
:meth:`Runtime.set_tta`), whatever the model's ``eval.tta`` / ``meta["tta"]`` says.
"""

from __future__ import annotations

import json
import logging
import os
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from defect_detector.core.constants import DEFAULT_LAYERS
from defect_detector.core.devices import resolve_device
from defect_detector.core.types import Detections, LetterboxMeta, TileRecord
from defect_detector.data.letterbox import letterbox
from defect_detector.data.tiles import EDGE_MARGIN, crop_tiles, merge_tile_detections, plan_tiles, pool_tile_stats
from defect_detector.export import (
    FORMAT_VERSION,
    META_FILE,
    DeployModel,
    ExportError,
    checkpoint_meta,
    quiet_jit,
    trace_deploy_model,
)
from defect_detector.export.meta import check_outputs, parse_meta
from defect_detector.export.onednn import onednn_available
from defect_detector.inspect.frames import gray_planes
from defect_detector.model.checkpoint import DEFAULT_WEIGHTS, is_torchscript_archive, load_checkpoint
from defect_detector.model.postprocess import postprocess
from defect_detector.model.tta import orientations, tta_forward

log = logging.getLogger("defect_detector.inspect")

TILE_WHEN_SHRUNK = 1.25
"""Auto tiling: a frame is tiled when letterboxing would scale it below ``pixel_scale / TILE_WHEN_SHRUNK``, i.e.
show its defects over 1.25x smaller than in training; milder shrinking (a 800x600 board into 640: 0.8) is
letterboxed whole, within the range scale augmentation and defect sizes already cover."""

TILE_OVERLAP = 96
"""Least overlap of neighbouring tiles, in model-input pixels (``round(96 / pixel_scale)`` original pixels):
wider than DeepPCB's defects (99% of the training boxes are under ~80 px), so each lies whole in some tile."""

SHRINK_WARNING = 8.0
"""Letterboxing a frame whole to over this many times smaller (per side) is logged once per runtime as a warning:
defects then shrink below what the model was trained on (tiling, ``predict --tile``, keeps their scale)."""

MAX_BATCH = 32
"""Most model inputs (letterboxed frames or tiles, before test-time augmentation) per model call on an accelerator:
:meth:`Runtime.predict` runs a larger set (many frames, or frames of many tiles) in chunks of this many."""

MAX_BATCH_CPU = 2
""":data:`MAX_BATCH` on the CPU. Per-input time of the bundled model at 640, 1 thread, measured here: batch 1 38 ms,
2 34, 3 35, 4 44, 6 47, 12 52-59 ms (larger batches' activations outgrow the caches), so a 12-tile frame runs as
6 calls of 2."""




def archive_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``meta.json`` of a TorchScript archive read straight from the zip (no model load); ``{}`` when absent or unreadable."""
    try:
        with zipfile.ZipFile(path) as archive:
            name = next((n for n in archive.namelist() if n.endswith(f"/extra/{META_FILE}")), None)
            meta = json.loads(archive.read(name)) if name else {}
            return meta if isinstance(meta, dict) else {}
    except (zipfile.BadZipFile, OSError, ValueError):
        return {}


class Runtime:
    """A loaded model ready for :meth:`predict`. Build it with :meth:`load`.

    Attributes: ``model`` (TorchScript module or eager :class:`DeployModel`), ``meta`` (the artifact's
    ``meta.json`` as a dict), ``class_names``, ``imgsz``, ``channels`` (model input channels, meta ``channels``,
    1 when absent: 1 the image, 2 the image and its registered reference), ``layer_names``, ``device``,
    ``dtype`` (model input dtype), ``kind`` (``"torchscript"`` or ``"checkpoint"``), ``path``, ``tta`` (the
    test-time augmentation mode :meth:`infer` applies: ``none``, one pass, unless ``load(tta=)`` or :meth:`set_tta`
    chose another; the model's ``meta["tta"]`` is not applied by default) and ``pixel_scale`` (``meta["pixel_scale"]``:
    model input pixels per original pixel in training, or None when not recorded; see :meth:`tile_plan`).
    """

    def __init__(
        self, model: torch.nn.Module, meta: dict[str, Any], device: torch.device, dtype: torch.dtype, kind: str, path: Path
    ) -> None:
        self.model = model
        self.meta = meta
        self.class_names: tuple[str, ...] = tuple(meta["class_names"])
        self.imgsz = int(meta["imgsz"])
        self.channels = int(meta.get("channels", 1))
        if self.channels not in (1, 2):
            raise ValueError(f"{path}: meta.json channels must be 1 or 2, got {self.channels}")
        self.layer_names: tuple[str, ...] = tuple(meta["layers"])
        self.device = device
        self.dtype = dtype
        self.kind = kind
        self.path = path
        scale = meta.get("pixel_scale")
        self.pixel_scale: float | None = float(scale) if scale is not None else None
        self.set_tta("none")
        self._shrink_warned = False

    @classmethod
    def load(
        cls,
        weights: str | os.PathLike[str] | None = None,
        device: str | torch.device = "auto",
        half: bool | str = "auto",
        threads: int | None = None,
        monitor_layers: Sequence[str] = DEFAULT_LAYERS,
        imgsz: int | None = None,
        trace: bool = True,
        tta: str | None = None,
    ) -> Runtime:
        """Load a TorchScript artifact from ``export`` or a training checkpoint (``None``: the bundled model).

        ``device``: ``auto`` | ``cpu`` | ``cuda[:N]``. ``half``: ``auto`` runs float16 on CUDA (a checkpoint is
        converted; an artifact must have been exported with ``--half``) and float32 on the CPU; ``True``
        forces float16, ``False`` float32. ``threads`` sets ``torch.set_num_threads`` (None: leaves it as it is;
        ``Inspector.load`` and ``predict`` choose the cores actually free). ``monitor_layers``,
        ``imgsz`` and ``trace`` apply to checkpoints only (an artifact fixes them at export). With ``trace``, a
        checkpoint run in float32 on the CPU is traced and frozen at load, as ``export`` does (checked against
        the eager model; a few seconds at 640), with conv + SiLU as oneDNN kernels where this torch build has
        them (``DeployModel``'s ``cpu_fusion``). If tracing fails, it runs eagerly and logs why. ``tta``: the
        test-time augmentation mode (see :meth:`set_tta`); None: ``none``, one model pass.
        Raises ``FileNotFoundError`` or ``ValueError`` naming the file and the problem.
        """
        path = Path(weights) if weights is not None else DEFAULT_WEIGHTS
        if not path.is_file():
            raise FileNotFoundError(f"{path}: weights file not found")
        if threads is not None:
            if threads < 1:
                raise ValueError(f"threads must be >= 1, got {threads}")
            torch.set_num_threads(threads)
        if tta is not None:
            orientations(tta)
        resolved = resolve_device(device)
        if is_torchscript_archive(path):
            runtime = cls._load_torchscript(path, resolved, half, explicit_device=str(device) != "auto")
        else:
            runtime = cls._load_checkpoint(path, resolved, half, monitor_layers, imgsz, trace)
        if tta is not None:
            runtime.set_tta(tta)
        return runtime

    def set_tta(self, mode: str) -> None:
        """Use test-time augmentation ``mode`` (``none``, ``flip2``, ``flip4``, ``d8``: see model/tta.py) in
        :meth:`infer`: each frame runs in that many orientations, one model pass each, and the predictions
        are averaged. ``ValueError`` for an unknown mode."""
        self._orientations = orientations(mode)
        self.tta = mode

    @classmethod
    def _load_torchscript(cls, path: Path, device: torch.device, half: bool | str, explicit_device: bool = True) -> Runtime:
        if archive_meta(path).get("cpu_only") and device.type != "cpu":
            if explicit_device:
                raise ValueError(f"{path}: exported with CPU-only (oneDNN) kernels; export with --portable (or --half) to run on {device}")
            log.warning("%s: exported with CPU-only (oneDNN) kernels, running on the CPU; export with --portable for %s", path, device)
            device = torch.device("cpu")
        module, meta = cls._read_torchscript(path, device)
        if meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{path}: artifact format_version {meta.get('format_version')!r}, this runtime reads {FORMAT_VERSION}")
        exported_half = bool(meta.get("half", False))
        if half is True and not exported_half:
            raise ValueError(f"{path}: exported in float32; re-export with --half for float16")
        if half is False and exported_half:
            raise ValueError(f"{path}: exported in float16 (--half); export again without --half for float32")
        if exported_half and device.type == "cpu":
            log.warning("%s: float16 artifact on the CPU runs slowly; export without --half for CPU use", path)
        module.eval()
        runtime = cls(module, meta, device, torch.float16 if exported_half else torch.float32, "torchscript", path)
        check_outputs(runtime)  # a forged meta.json fails here, naming the key, not at the first frame
        return runtime

    @staticmethod
    def _read_torchscript(path: Path, device: torch.device) -> tuple[torch.jit.ScriptModule, dict[str, Any]]:
        """``torch.jit.load`` onto ``device`` with its ``meta.json``; ``ValueError`` naming ``path`` when either is missing
        or a key of the meta is malformed (:func:`~defect_detector.export.meta.parse_meta`)."""
        extra = {META_FILE: ""}
        try:
            with quiet_jit():
                module = torch.jit.load(str(path), map_location=device, _extra_files=extra)
        except RuntimeError as exc:
            raise ValueError(f"{path}: not a loadable TorchScript archive: {exc}") from exc
        if not extra[META_FILE]:
            raise ValueError(f"{path}: TorchScript archive without {META_FILE}; export it with `defect-detector export`")
        return module, parse_meta(path, extra[META_FILE])

    @classmethod
    def _load_checkpoint(
        cls, path: Path, device: torch.device, half: bool | str, layers: Sequence[str], imgsz: int | None, trace: bool
    ) -> Runtime:
        loaded = load_checkpoint(path)
        use_half = device.type == "cuda" if half == "auto" else bool(half)
        size = int(imgsz or loaded.config.data.imgsz)
        model = DeployModel(loaded.model, size, layers).to(device)
        if use_half:
            model.half_()
        module: torch.nn.Module = model
        cpu_fusion = False
        if trace and device.type == "cpu" and not use_half:
            try:
                cpu_fusion = onednn_available()
                module = trace_deploy_model(DeployModel(loaded.model, size, layers, cpu_fusion=cpu_fusion), device)
            except (ExportError, RuntimeError) as exc:
                cpu_fusion = False
                log.warning("%s: tracing failed, running the eager model: %s", path, exc)
        meta = checkpoint_meta(loaded, model, _carried_baseline(loaded, model.layer_names, size), use_half, cpu_only=cpu_fusion)
        return cls(module, meta, device, torch.float16 if use_half else torch.float32, "checkpoint", path)

    def warmup(self, iterations: int = 2, batch: int = 1) -> None:
        """Run the model on blank ``[batch, channels, S, S]`` input so first-frame latency excludes one-time setup."""
        x = torch.zeros(batch, self.channels, self.imgsz, self.imgsz, device=self.device, dtype=self.dtype)
        for _ in range(iterations):
            self.infer(x)
        self._sync()

    def tile_plan(self, height: int, width: int, tile: bool | None = None) -> TileRecord | None:
        """How :meth:`predict` places a ``height x width`` frame: its :class:`TileRecord`, or None to letterbox it whole.

        ``tile`` None (auto): tile when the model records its training ``pixel_scale`` and the letterbox scale
        ``min(imgsz / height, imgsz / width)`` is below ``pixel_scale / TILE_WHEN_SHRUNK``; True always tiles,
        False never. Tiles are ``round(imgsz / pixel_scale)`` original pixels square (``imgsz`` when no scale is
        recorded), overlapping by at least ``round(TILE_OVERLAP / pixel_scale)`` pixels (at most half a tile).
        """
        scale = self.pixel_scale
        if tile is None:
            tile = scale is not None and min(self.imgsz / height, self.imgsz / width) < scale / TILE_WHEN_SHRUNK
        if not tile:
            return None
        side = max(1, round(self.imgsz / scale)) if scale else self.imgsz
        overlap = round(TILE_OVERLAP / scale) if scale else TILE_OVERLAP
        return plan_tiles(height, width, side, min(overlap, side // 2))

    def preprocess(
        self, frames: Sequence[np.ndarray], references: Sequence[np.ndarray | None] | None = None
    ) -> tuple[torch.Tensor, list[LetterboxMeta]]:
        """Validate, convert to gray uint8, letterbox and batch ``frames`` (and, for a reference model, ``references``).

        ``references``: required for a 2-channel model, one per frame (see the module docstring: ``[H, W]`` of its
        frame, already registered into it), letterboxed with its frame's meta into channel 1; must be None (or all
        None) for a 1-channel model. Returns the model input ``[B, channels, imgsz, imgsz]`` (``self.dtype`` on
        ``self.device``, values x/255) and one :class:`LetterboxMeta` per frame. Raises ``ValueError`` naming the
        frame and the problem for a non-array, an empty image, a shape other than ``[H, W]`` / ``[H, W, 1|3|4]``,
        a dtype other than uint8 / uint16, or a reference missing, unexpected or of another size than its frame.
        Frames are letterboxed whole; :meth:`predict` tiles them (see :meth:`tile_plan`).
        """
        batch, metas, _ = self._prepare(frames, references, tile=False)
        return batch, metas

    def _prepare(
        self, frames: Sequence[np.ndarray], references: Sequence[np.ndarray | None] | None, tile: bool | None
    ) -> tuple[torch.Tensor, list[LetterboxMeta], list[TileRecord | None]]:
        """:meth:`preprocess` with tiling: the model input ``[N, channels, imgsz, imgsz]`` of all frames (one row per
        letterboxed frame, or one per tile in ``TileRecord.origins`` order, frame by frame), one :class:`LetterboxMeta`
        per row and one tile record (None: letterboxed) per frame."""
        if len(frames) == 0:
            raise ValueError("no frames to preprocess")
        pairs = self._reference_list(frames, references)
        canvases, metas, records = [], [], []
        for i, (frame, reference) in enumerate(zip(frames, pairs)):
            planes = gray_planes(frame, reference, i)  # uint8 [H, W]: the frame (and its reference)
            record = self.tile_plan(*planes[0].shape, tile=tile)
            records.append(record)
            inputs = zip(*(crop_tiles(p, record) for p in planes)) if record is not None else [planes]
            for views in inputs:  # one model input: the frame, or one tile of it (and of its reference)
                boxed = [letterbox(view, self.imgsz) for view in views]
                canvases.append(np.stack([canvas for canvas, _ in boxed]))  # uint8 [channels, S, S]
                metas.append(boxed[0][1])
        batch = torch.from_numpy(np.stack(canvases))  # uint8 [N, channels, S, S]
        batch = batch.to(self.device, non_blocking=True).to(self.dtype).div_(255.0)
        return batch, metas, records

    def _reference_list(self, frames: Sequence[np.ndarray], references: Sequence[np.ndarray | None] | None) -> list[np.ndarray | None]:
        """One reference (or None) per frame, checked against the model's channel count; ``ValueError`` naming the frame."""
        given = [None] * len(frames) if references is None else list(references)
        if len(given) != len(frames):
            raise ValueError(f"got {len(given)} references for {len(frames)} frames; pass one per frame")
        for i, reference in enumerate(given):
            if self.channels == 2 and reference is None:
                raise ValueError(
                    f"frame {i}: no reference; this is a reference model (2 input channels): pass references=, "
                    "one registered golden image per frame"
                )
            if self.channels == 1 and reference is not None:
                raise ValueError(f"frame {i}: a reference was given, but this model takes 1 input channel (no reference)")
        return given

    def infer(self, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Model forward: ``[B, channels, S, S]`` -> ``(pred float32 [B, A, 4 + C] letterboxed xyxy + probabilities,
        stats float32 [B, L, 2])``, on ``self.device``.

        With test-time augmentation (:func:`~defect_detector.model.tta.tta_forward`), every input runs in ``T``
        orientations, ``pred`` is their merged average and ``stats`` are those of the inputs as given (the
        identity orientation), so drift baselines need no augmentation. Every channel (the image and its
        reference) is oriented alike. On CUDA the orientations run as one ``[T*B, channels, S, S]`` batch; on
        the CPU as ``T`` calls of ``B`` inputs.
        """
        with torch.inference_mode():
            one_batch = self.device.type == "cuda"
            pred, (stats,) = tta_forward(self.model, batch, self._orientations, self.meta["strides"], self.imgsz, one_batch)
        return pred, stats

    def predict(
        self,
        frames: Sequence[np.ndarray],
        conf: float = 0.25,
        iou: float = 0.5,
        max_det: int = 100,
        references: Sequence[np.ndarray | None] | None = None,
        tile: bool | None = None,
    ) -> list[Detections]:
        """Detect defects in ``frames`` (one batch); one :class:`Detections` per frame, boxes in original pixels.

        ``references``: one registered golden image per frame, required by (and only accepted by) a 2-channel
        model; see :meth:`preprocess`. The ``preprocess`` timing includes letterboxing them (not registration).
        ``tile``: None tiles the frames that letterboxing would shrink well below the training scale, True tiles
        every frame, False letterboxes every frame whole (see :meth:`tile_plan`). All letterboxed frames and tiles
        of the call run through the model together, in chunks of :data:`MAX_BATCH` (:data:`MAX_BATCH_CPU` on the
        CPU); a tiled frame's boxes are
        merged across its tiles (:func:`~defect_detector.data.tiles.merge_tile_detections`) and its ``stats``
        pooled over them (:func:`~defect_detector.data.tiles.pool_tile_stats`).
        """
        if not 0.0 <= conf <= 1.0 or not 0.0 <= iou <= 1.0 or max_det < 1:
            raise ValueError(f"need 0 <= conf <= 1, 0 <= iou <= 1 and max_det >= 1, got conf={conf}, iou={iou}, max_det={max_det}")
        start = time.perf_counter()
        batch, metas, records = self._prepare(frames, references, tile)
        self._warn_shrink(frames, records)
        self._sync()
        t_pre = time.perf_counter()
        chunk = MAX_BATCH_CPU if self.device.type == "cpu" else MAX_BATCH
        outputs = [self.infer(batch[i : i + chunk]) for i in range(0, batch.shape[0], chunk)]
        pred, stats = torch.cat([p for p, _ in outputs]), torch.cat([s for _, s in outputs])  # [N, A, 4 + C], [N, L, 2]
        self._sync()
        t_model = time.perf_counter()
        with torch.inference_mode():
            rows = [{k: v.cpu() for k, v in r.items()} for r in postprocess(pred, metas, conf, iou, max_det)]
            per_frame = self._per_frame(rows, stats.float().cpu(), metas, records, iou, max_det)
        t_post = time.perf_counter()
        n = len(frames)
        timings = {
            "preprocess": (t_pre - start) * 1000.0 / n,
            "model": (t_model - t_pre) * 1000.0 / n,
            "postprocess": (t_post - t_model) * 1000.0 / n,
        }
        out = []
        for (result, frame_stats, meta), record in zip(per_frame, records):
            labels = result["labels"]
            names = [self.class_names[j] for j in labels.tolist()]
            out.append(
                Detections(result["boxes"], result["scores"], labels, names, frame_stats, dict(timings), meta, batch_size=n, tiles=record)
            )
        return out

    def _per_frame(
        self,
        rows: list[dict[str, torch.Tensor]],
        stats: torch.Tensor,
        metas: list[LetterboxMeta],
        records: list[TileRecord | None],
        iou: float,
        max_det: int,
    ) -> list[tuple[dict[str, torch.Tensor], torch.Tensor, LetterboxMeta]]:
        """Per frame ``(detections in frame pixels, stats [L, 2], letterbox meta of its first input row)`` from the
        per-row postprocess output (tile pixels for tiles), ``stats [N, L, 2]`` and :meth:`_prepare`'s rows."""
        out, first = [], 0
        for record in records:
            if record is None:
                out.append((rows[first], stats[first], metas[first]))
                first += 1
                continue
            margin = EDGE_MARGIN * record.tile / self.imgsz  # EDGE_MARGIN is in model pixels
            tiles = slice(first, first + len(record))
            out.append((merge_tile_detections(rows[tiles], record, iou, max_det, margin), pool_tile_stats(stats[tiles]), metas[first]))
            first += len(record)
        return out

    def _warn_shrink(self, frames: Sequence[np.ndarray], records: list[TileRecord | None]) -> None:
        """Warn once when a frame letterboxed whole shrinks more than :data:`SHRINK_WARNING` times."""
        for frame, record in zip(frames, records):
            factor = max(frame.shape[:2]) / self.imgsz
            if record is None and factor > SHRINK_WARNING and not self._shrink_warned:
                self._shrink_warned = True
                h, w = frame.shape[:2]
                log.warning(
                    "%dx%d frame letterboxed whole to %d: shrunk %.0fx, and its defects with it; --tile keeps their scale",
                    w,
                    h,
                    self.imgsz,
                    factor,
                )

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def _carried_baseline(loaded: Any, layers: Sequence[str], imgsz: int) -> dict[str, Any] | None:
    """The drift baseline the checkpoint carries, when it fits the model as loaded (layers, input size, classes);
    otherwise None, with a warning saying why (``predict`` then runs without drift monitoring unless given ``--baseline``)."""
    from defect_detector.export.baseline import export_baseline

    try:
        return export_baseline(loaded, None, layers, imgsz)[0]
    except ValueError as exc:
        log.warning("%s; drift monitoring needs --baseline", exc)
        return None
