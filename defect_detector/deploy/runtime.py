"""Inference runtime: load an exported artifact (or a training checkpoint) and detect defects in frames.

A frame is a numpy image as OpenCV returns it: ``[H, W]``, ``[H, W, 1]``, BGR ``[H, W, 3]`` or BGRA
``[H, W, 4]``, uint8 or uint16. Frames are converted to 8-bit grayscale, letterboxed to the model's
``imgsz`` and batched; the model returns decoded boxes and layer statistics (see ``deploy/export.py``);
:func:`defect_detector.model.postprocess.postprocess` applies NMS and maps boxes back to each frame's
original pixels.

A reference model (``channels == 2``, meta ``"reference": true``) also takes one golden reference per frame:
uint8 (or uint16 / colour, converted the same way) ``[H, W]`` with the frame's ``H, W``, already registered
into the frame's pixel frame (``defect_detector.data.register``: the runtime does not align anything). It is
letterboxed with its frame's :class:`LetterboxMeta` and stacked as channel 1 of the model input.
"""

from __future__ import annotations

import json
import logging
import os
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from defect_detector.data.dataset import to_gray_uint8
from defect_detector.data.letterbox import LetterboxMeta, letterbox
from defect_detector.deploy.export import FORMAT_VERSION, META_FILE, DeployModel, ExportError, build_meta, quiet_jit, trace_deploy_model
from defect_detector.deploy.onednn import onednn_available
from defect_detector.devices import resolve_device
from defect_detector.model.checkpoint import DEFAULT_WEIGHTS, is_torchscript_archive, load_checkpoint
from defect_detector.model.postprocess import postprocess
from defect_detector.model.tta import merge_predictions, orient_images, orientations
from defect_detector.monitor.hooks import DEFAULT_LAYERS

log = logging.getLogger("defect_detector.deploy")

_CHANNELS = (1, 3, 4)


@dataclass
class Detections:
    """Detections of one frame.

    ``boxes`` float32 ``[K, 4]`` xyxy in the frame's original pixels, ``scores`` float32 ``[K]``,
    ``labels`` int64 ``[K]`` (indices into the model's class names), ``names`` the ``K`` class names,
    all on the CPU and sorted by score. ``stats`` float32 ``[L, 2]``: mean and std of each monitored
    layer (``Runtime.layer_names`` order). ``timings``: milliseconds per stage (``preprocess``, ``model``,
    ``postprocess``) of the batch this frame was in, divided by the batch size. ``letterbox`` says how
    the frame was placed on the model input.
    """

    boxes: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor
    names: list[str]
    stats: torch.Tensor
    timings: dict[str, float]
    letterbox: LetterboxMeta
    batch_size: int = 1

    def __len__(self) -> int:
        return int(self.labels.numel())


def archive_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``meta.json`` of a TorchScript archive read straight from the zip (no model load); ``{}`` when absent or unreadable."""
    try:
        with zipfile.ZipFile(path) as archive:
            name = next((n for n in archive.namelist() if n.endswith(f"/extra/{META_FILE}")), None)
            return json.loads(archive.read(name)) if name else {}
    except (zipfile.BadZipFile, OSError, ValueError):
        return {}


class Runtime:
    """A loaded model ready for :meth:`predict`. Build it with :meth:`load`.

    Attributes: ``model`` (TorchScript module or eager :class:`DeployModel`), ``meta`` (the artifact's
    ``meta.json`` as a dict), ``class_names``, ``imgsz``, ``channels`` (model input channels, meta ``channels``,
    1 when absent: 1 the image, 2 the image and its registered reference), ``layer_names``, ``device``,
    ``dtype`` (model input dtype), ``kind`` (``"torchscript"`` or ``"checkpoint"``), ``path`` and ``tta`` (the
    test-time augmentation mode :meth:`infer` applies; default: the model's own, ``meta["tta"]``, else ``none``).
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
        self.set_tta(str(meta.get("tta", "none")))

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
        forces float16, ``False`` float32. ``threads`` sets ``torch.set_num_threads``. ``monitor_layers``,
        ``imgsz`` and ``trace`` apply to checkpoints only (an artifact fixes them at export). With ``trace``, a
        checkpoint run in float32 on the CPU is traced and frozen at load, as ``export`` does (checked against
        the eager model; a few seconds at 640), with conv + SiLU as oneDNN kernels where this torch build has
        them (``DeployModel``'s ``cpu_fusion``). If tracing fails, it runs eagerly and logs why. ``tta``
        overrides the model's test-time augmentation mode (see :meth:`set_tta`).
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
        return cls(module, meta, device, torch.float16 if exported_half else torch.float32, "torchscript", path)

    @staticmethod
    def _read_torchscript(path: Path, device: torch.device) -> tuple[torch.jit.ScriptModule, dict[str, Any]]:
        """``torch.jit.load`` onto ``device`` with its ``meta.json``; ``ValueError`` naming ``path`` when either is missing."""
        extra = {META_FILE: ""}
        try:
            with quiet_jit():
                module = torch.jit.load(str(path), map_location=device, _extra_files=extra)
        except RuntimeError as exc:
            raise ValueError(f"{path}: not a loadable TorchScript archive: {exc}") from exc
        if not extra[META_FILE]:
            raise ValueError(f"{path}: TorchScript archive without {META_FILE}; export it with `defect-detector export`")
        return module, json.loads(extra[META_FILE])

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
        meta = build_meta(
            loaded.class_names,
            size,
            model.strides,
            model.layer_names,
            None,
            use_half,
            None,
            str(path),
            cpu_fusion,
            loaded.config.eval.tta,
            model.in_channels,
        )
        return cls(module, meta, device, torch.float16 if use_half else torch.float32, "checkpoint", path)

    def warmup(self, iterations: int = 2, batch: int = 1) -> None:
        """Run the model on blank ``[batch, channels, S, S]`` input so first-frame latency excludes one-time setup."""
        x = torch.zeros(batch, self.channels, self.imgsz, self.imgsz, device=self.device, dtype=self.dtype)
        for _ in range(iterations):
            self.infer(x)
        self._sync()

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
        """
        if len(frames) == 0:
            raise ValueError("no frames to preprocess")
        pairs = self._reference_list(frames, references)
        canvases, metas = [], []
        for i, (frame, reference) in enumerate(zip(frames, pairs)):
            gray = to_gray_uint8(_check_frame(frame, i))[0]
            canvas, meta = letterbox(gray, self.imgsz)
            planes = [canvas]
            if reference is not None:
                ref = to_gray_uint8(_check_frame(reference, i, "reference of frame"))[0]
                if ref.shape != gray.shape:
                    raise ValueError(
                        f"frame {i}: reference is {ref.shape[1]}x{ref.shape[0]} px, the frame {gray.shape[1]}x{gray.shape[0]}; "
                        "register it into the frame first (defect_detector.data.register)"
                    )
                planes.append(letterbox(ref, self.imgsz)[0])
            canvases.append(np.stack(planes))  # uint8 [channels, S, S]
            metas.append(meta)
        batch = torch.from_numpy(np.stack(canvases))  # uint8 [B, channels, S, S]
        batch = batch.to(self.device, non_blocking=True).to(self.dtype).div_(255.0)
        return batch, metas

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

        With test-time augmentation, every frame runs in ``T`` orientations, ``pred`` is their merged average and
        ``stats`` are those of the frames as given (the identity orientation), so drift baselines need no
        augmentation. Every channel (the image and its reference) is oriented alike. On CUDA the orientations run
        as one ``[T*B, channels, S, S]`` batch; on the CPU as ``T`` calls of ``B`` frames, which measured 20-25%
        faster here than one large batch (d8, batch 1, 1 and 2 threads).
        """
        modes = self._orientations
        with torch.inference_mode():
            if len(modes) == 1:
                return self.model(batch)
            if self.device.type == "cuda":
                pred, stats = self.model(orient_images(batch, modes))  # [T*B, A, 4 + C], [T*B, L, 2]
            else:
                outputs = [self.model(orient_images(batch, (mode,))) for mode in modes]
                pred, stats = torch.cat([p for p, _ in outputs]), outputs[0][1]  # [T*B, A, 4 + C], [B, L, 2]
            merged = merge_predictions(pred, modes, self.meta["strides"], self.imgsz)  # [B, A, 4 + C]
        return merged, stats[: batch.shape[0]]

    def predict(
        self,
        frames: Sequence[np.ndarray],
        conf: float = 0.25,
        iou: float = 0.5,
        max_det: int = 100,
        references: Sequence[np.ndarray | None] | None = None,
    ) -> list[Detections]:
        """Detect defects in ``frames`` (one batch); one :class:`Detections` per frame, boxes in original pixels.

        ``references``: one registered golden image per frame, required by (and only accepted by) a 2-channel
        model; see :meth:`preprocess`. The ``preprocess`` timing includes letterboxing them (not registration).
        """
        if not 0.0 <= conf <= 1.0 or not 0.0 <= iou <= 1.0 or max_det < 1:
            raise ValueError(f"need 0 <= conf <= 1, 0 <= iou <= 1 and max_det >= 1, got conf={conf}, iou={iou}, max_det={max_det}")
        start = time.perf_counter()
        batch, metas = self.preprocess(frames, references)
        self._sync()
        t_pre = time.perf_counter()
        pred, stats = self.infer(batch)
        self._sync()
        t_model = time.perf_counter()
        with torch.inference_mode():
            results = postprocess(pred, metas, conf, iou, max_det)
            results = [{k: v.cpu() for k, v in r.items()} for r in results]
            stats = stats.float().cpu()
        t_post = time.perf_counter()
        n = len(frames)
        timings = {
            "preprocess": (t_pre - start) * 1000.0 / n,
            "model": (t_model - t_pre) * 1000.0 / n,
            "postprocess": (t_post - t_model) * 1000.0 / n,
        }
        out = []
        for i, (result, meta) in enumerate(zip(results, metas)):
            labels = result["labels"]
            out.append(
                Detections(
                    boxes=result["boxes"],
                    scores=result["scores"],
                    labels=labels,
                    names=[self.class_names[j] for j in labels.tolist()],
                    stats=stats[i],
                    timings=dict(timings),
                    letterbox=meta,
                    batch_size=n,
                )
            )
        return out

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def _check_frame(frame: Any, index: int, what: str = "frame") -> np.ndarray:
    """Return ``frame`` if it is an image :func:`to_gray_uint8` accepts with 1, 3 or 4 channels, else raise ``ValueError``
    starting ``"{what} {index}: "``."""
    name = f"{what} {index}"
    if not isinstance(frame, np.ndarray):
        raise ValueError(f"{name}: expected a numpy array, got {type(frame).__name__}")
    if frame.ndim not in (2, 3):
        raise ValueError(f"{name}: expected shape [H, W] or [H, W, C], got {frame.shape}")
    if frame.ndim == 3 and frame.shape[2] not in _CHANNELS:
        raise ValueError(f"{name}: expected 1, 3 (BGR) or 4 (BGRA) channels, got {frame.shape[2]} (shape {frame.shape})")
    if frame.shape[0] == 0 or frame.shape[1] == 0:
        raise ValueError(f"{name}: empty image, shape {frame.shape}")
    if frame.dtype not in (np.uint8, np.uint16):
        raise ValueError(f"{name}: expected dtype uint8 or uint16, got {frame.dtype}")
    return frame
