"""Runtime: a loaded model, any artifact kind (AOTInductor ``.pt2``, TorchScript, ONNX float32 or int8, or a training
checkpoint traced at load), ready to infer. The artifact loaders live in ``inspect/artifacts.py``.

The runtime runs the model on prepared input and says what the model is (classes, input size, channels, monitored
layers, training pixel scale, operating point). Everything a frame goes through before and after the model lives in
the frame pipeline (``inspect/pipeline.py``).

A reference model (``channels == 2``, meta ``"reference": true``) takes the letterboxed frame and its registered
golden image as channels 0 and 1. One model pass per input is the default: test-time augmentation runs only when
asked for (``tta=``, :meth:`Runtime.set_tta`).

A siamese golden-template model whose artifact carries its ``golden`` and ``frame`` graphs (``inspect/golden_graphs.py``;
:attr:`Runtime.caches_golden`) also serves the cached path: :meth:`Runtime.golden_features` once per golden image, then
:meth:`Runtime.infer_cached` for every frame against it (one trunk pass a frame instead of two).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from defect_detector.align.inspection_area import InspectionArea
from defect_detector.core.config import EvalConfig
from defect_detector.core.constants import DEFAULT_LAYERS
from defect_detector.core.devices import cpu_bf16, resolve_device
from defect_detector.core.limits import Limits
from defect_detector.export import GOLDEN_FEATURES, DeployModel, ExportError, checkpoint_meta, trace_deploy_model
from defect_detector.export.meta import check_outputs, parse_meta, stored_limits
from defect_detector.export.onednn import onednn_available
from defect_detector.export.triton import check_triton_config
from defect_detector.inspect.artifacts import (  # noqa: F401 - archive_meta re-exported
    archive_meta,
    artifact_kind,
    read_onnx,
    read_pt2,
    read_torchscript,
    verify_artifact,
)
from defect_detector.inspect.golden_graphs import GoldenGraphs, check_golden_graphs, load_golden_graphs
from defect_detector.inspect.tolerance import Tolerance
from defect_detector.model.checkpoint import DEFAULT_WEIGHTS, LoadedModel, load_checkpoint
from defect_detector.model.tta import orientations, tta_forward
from defect_detector.monitor.design_drift import DesignDrift

log = logging.getLogger("defect_detector.inspect")

DEFAULT_OPERATING_POINT = {"conf": 0.25, "iou": 0.5}
"""The operating point of an artifact that records none (exported before v0.9)."""


class Runtime:
    """A loaded model ready for :meth:`infer`. Build it with :meth:`load`.

    Attributes: ``model`` (the model callable: a TorchScript module, an AOTInductor model, an ONNX Runtime session
    wrapper or the eager :class:`DeployModel`), ``meta`` (the artifact's
    ``meta.json`` as a dict), ``class_names``, ``imgsz``, ``channels`` (model input channels, meta ``channels``,
    1 when absent: 1 the image, 2 the image and its registered reference), ``layer_names``, ``device``,
    ``dtype`` (model input dtype), ``kind`` (``"pt2"``, ``"torchscript"``, ``"onnx"`` or
    ``"checkpoint"``), ``path``, ``tta`` (the
    test-time augmentation mode :meth:`infer` applies: ``none``, one pass, unless ``load(tta=)`` or :meth:`set_tta`
    chose another; the model's ``meta["tta"]`` is not applied by default) and ``pixel_scale`` (``meta["pixel_scale"]``:
    model input pixels per original pixel in training, or None when not recorded; the frame pipeline tiles by it:
    :meth:`~defect_detector.inspect.pipeline.Pipeline.plan`).
    """

    def __init__(  # noqa: PLR0913 - the loaded model and what describes it
        self,
        model: torch.nn.Module,
        meta: dict[str, Any],
        device: torch.device,
        dtype: torch.dtype,
        kind: str,
        path: Path,
        golden_graphs: GoldenGraphs | None = None,
    ) -> None:
        self.model = model
        self.golden_graphs = golden_graphs
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

    @property
    def operating_point(self) -> dict[str, Any]:
        """The postprocess the weights were validated at (meta ``operating_point``): score threshold ``conf``
        (``eval.f1_conf``), per-class NMS ``iou`` (``eval.nms_iou``), and the cross-class demotion
        ``cross_class_iou`` (None: off) / ``cross_class_factor``; artifacts exported before v0.9 carry none and get
        ``DEFAULT_OPERATING_POINT``, those before v0.10 no cross-class demotion, those before v0.14 no merge of
        nested calls (``merge_ios`` None; ``model/postprocess.py`` ``merge_nested``). The limits the prepare stage
        judges frames by are :attr:`limits`."""
        point = self.meta.get("operating_point") or DEFAULT_OPERATING_POINT
        cross_iou, merge_ios = point.get("cross_class_iou"), point.get("merge_ios")
        return {
            "conf": float(point["conf"]),
            "iou": float(point["iou"]),
            "cross_class_iou": None if cross_iou is None else float(cross_iou),
            "cross_class_factor": float(point.get("cross_class_factor", EvalConfig().cross_class_factor)),
            "merge_ios": None if merge_ios is None else float(merge_ios),
        }

    @property
    def design_points(self) -> dict[str, float]:
        """The score threshold ``teach`` calibrated for each design it taught the weights (meta ``taught`` ``conf``), by
        the fingerprint of the design's golden image; {} when none (every design at :attr:`operating_point`)."""
        return {d["key"]: float(d["conf"]) for d in self.meta.get("taught") or [] if d.get("conf") is not None}

    @property
    def design_tolerances(self) -> dict[str, Tolerance]:
        """The tolerance map ``teach --good`` learnt for each design from its good boards (meta ``taught``
        ``tolerance``; ``inspect/tolerance.py``), by the fingerprint of the design's golden image; {} when none."""
        found = {d["key"]: Tolerance.from_entry(d) for d in self.meta.get("taught") or []}
        return {key: tolerance for key, tolerance in found.items() if tolerance is not None}

    @property
    def design_drifts(self) -> dict[str, DesignDrift]:
        """The drift level ``teach --good`` learnt for each design from its good boards (meta ``taught`` ``drift``;
        ``monitor/design_drift.py``), by the fingerprint of the design's golden image; {} when none."""
        found = {d["key"]: DesignDrift.from_entry(d) for d in self.meta.get("taught") or []}
        return {key: drift for key, drift in found.items() if drift is not None}

    @property
    def design_areas(self) -> dict[str, InspectionArea]:
        """The inspection area ``teach`` stored for each design (meta ``taught`` ``area``; ``align/inspection_area.py``),
        by the fingerprint of the design's golden image; {} when none."""
        found = {d["key"]: InspectionArea.from_entry(d) for d in self.meta.get("taught") or []}
        return {key: area for key, area in found.items() if area is not None}

    @property
    def limits(self) -> Limits:
        """Every limit the prepare stage judges this model's frames by (``core/limits.py``): exposure, photometric
        range, hidden area, registration and the golden check, as its training config validated them (meta
        ``limits``; artifacts before v0.19: their operating point's ``exposure`` and ``hidden_max_area`` and their
        ``register``, each absent: the defaults), so ``predict`` applies the limits the weights were validated with."""
        return stored_limits(self.meta, str(self.path))

    @property
    def design_limits(self) -> dict[str, Limits]:
        """The limits ``teach`` set for each design it taught (meta ``taught`` ``limits``: the keys it sets, over
        :attr:`limits`), by the fingerprint of the design's golden image; {} when none."""
        limits = self.limits
        return {d["key"]: limits.for_design(d["limits"]) for d in self.meta.get("taught") or [] if d.get("limits")}

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
        """Load an artifact from ``export`` (``.pt2``, TorchScript, ONNX float32 or int8: see ``inspect/artifacts.py``)
        or a training checkpoint (``None``: the bundled model).

        ``device``: ``auto`` | ``cpu`` | ``cuda[:N]``; an artifact that runs only on the CPU (a ``.pt2`` compiled for
        the CPU, a ``cpu_only`` TorchScript, ONNX) runs there under ``auto`` and is refused for an explicit other
        device. ``half``: ``auto`` runs float16 on CUDA (a checkpoint is converted; a TorchScript artifact must have
        been exported with ``--half``; the other kinds are float32) and float32 on the CPU; ``True`` forces float16,
        ``False`` float32; ``"bf16"`` runs a checkpoint in bfloat16 on a CPU that has it natively
        (:func:`checkpoint_dtype`). ``threads`` sets ``torch.set_num_threads`` (and ONNX Runtime's threads; None: leaves it as it is;
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
        kind = artifact_kind(path)
        if kind == "checkpoint":
            runtime = cls._load_checkpoint(path, resolved, half, monitor_layers, imgsz, trace)
        else:
            runtime = cls._load_artifact(path, kind, resolved, half, explicit_device=str(device) != "auto")
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
    def _load_artifact(cls, path: Path, kind: str, device: torch.device, half: bool | str, explicit_device: bool = True) -> Runtime:
        """An exported artifact of ``kind`` (see :func:`~defect_detector.inspect.artifacts.artifact_kind`), its meta
        checked (:func:`~defect_detector.export.meta.parse_meta`) and its outputs checked against it once."""
        if kind == "pt2":
            model, text, device = read_pt2(path, device, explicit_device)
        elif kind == "onnx":
            model, text, device = read_onnx(path, device, explicit_device)
        else:
            model, text, device = read_torchscript(path, device, explicit_device)
        meta = parse_meta(path, text)  # a .pt2's was checked, and verified, before its package was loaded (read_pt2)
        if half == "bf16":
            raise ValueError(f"{path}: --precision bf16 runs a checkpoint; this {kind} artifact runs as it was exported")
        exported_half = bool(meta.get("half", False))
        if half is True and not exported_half:
            raise ValueError(f"{path}: exported in float32; re-export as TorchScript with --half for float16")
        if half is False and exported_half:
            raise ValueError(f"{path}: exported in float16 (--half); export again without --half for float32")
        if exported_half and device.type == "cpu":
            log.warning("%s: float16 artifact on the CPU runs slowly; export without --half for CPU use", path)
        runtime = cls(model, meta, device, torch.float16 if exported_half else torch.float32, kind, path)
        check_outputs(runtime)  # a forged meta.json fails here, naming the key, not at the first frame
        if kind != "pt2":  # a meta that fits the graph (permuted class names, another pixel_scale) fails here (a .pt2: at read)
            verify_artifact(path, kind, meta)
        if kind == "torchscript":
            check_triton_config(path, meta)
        runtime.golden_graphs = load_golden_graphs(kind, path, model, meta, device)
        check_golden_graphs(runtime)
        return runtime

    @classmethod
    def _load_checkpoint(
        cls, path: Path, device: torch.device, half: bool | str, layers: Sequence[str], imgsz: int | None, trace: bool
    ) -> Runtime:
        return cls.from_loaded(load_checkpoint(path), device, half, layers, imgsz, trace)

    @classmethod
    def from_loaded(  # noqa: PLR0913 - load()'s checkpoint choices
        cls,
        loaded: LoadedModel,
        device: torch.device,
        half: bool | str = "auto",
        layers: Sequence[str] = DEFAULT_LAYERS,
        imgsz: int | None = None,
        trace: bool = True,
    ) -> Runtime:
        """The runtime of an in-memory model (a checkpoint :meth:`load` read, or the weights being trained: training-time
        validation), as :meth:`load` builds it for a checkpoint: ``half``, ``layers``, ``imgsz`` and ``trace`` as there;
        ``path`` is ``loaded.path``."""
        path = Path(loaded.path)
        dtype = checkpoint_dtype(device, half)
        size = int(imgsz or loaded.config.data.imgsz)
        model = DeployModel(loaded.model, size, layers).to(device)
        if dtype != torch.float32:
            model.half_(dtype)
        module: torch.nn.Module = model
        cpu_fusion = False
        if trace and device.type == "cpu" and dtype != torch.float16:
            try:
                cpu_fusion = onednn_available() and dtype == torch.float32  # the fused kernels are float32's
                deploy = DeployModel(loaded.model, size, layers, cpu_fusion=cpu_fusion)
                module = trace_deploy_model(deploy if dtype == torch.float32 else deploy.half_(dtype), device, dtype)
            except (ExportError, RuntimeError) as exc:
                cpu_fusion = False
                log.warning("%s: tracing failed, running the eager model: %s", path, exc)
        baseline = _carried_baseline(loaded, model.layer_names, size)
        meta = checkpoint_meta(loaded, model, baseline, dtype == torch.float16, cpu_only=cpu_fusion)
        graphs = load_golden_graphs("checkpoint", path, module, meta, device)
        return cls(module, meta, device, dtype, "checkpoint", path, graphs)

    def warmup(self, iterations: int = 2, batch: int = 1) -> None:
        """Run the model on blank ``[batch, channels, S, S]`` input so first-frame latency excludes one-time setup."""
        x = torch.zeros(batch, self.channels, self.imgsz, self.imgsz, device=self.device, dtype=self.dtype)
        for _ in range(iterations):
            self.infer(x)
            if self.caches_golden and self.tta == "none":
                self.infer_cached(x[:, :1], self.golden_features(x[:1, 1:2]))
        self.sync()

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
            x = batch.to(dtype=self.dtype)  # a float32 batch into a bfloat16 or float16 model
            pred, (stats,) = tta_forward(self.model, x, self._orientations, self.meta["strides"], self.imgsz, one_batch)
        return pred.float(), stats.float()

    @property
    def caches_golden(self) -> bool:
        """Whether this model serves the cached golden path (:meth:`golden_features`, :meth:`infer_cached`): a siamese
        golden-template model whose artifact holds its ``golden`` and ``frame`` graphs (a checkpoint, and TorchScript,
        ``.pt2`` and ONNX float32 exports since v0.13). False for single-image models, other reference models, int8 ONNX
        and older artifacts: they take the pair through :meth:`infer`."""
        return self.golden_graphs is not None

    def _graphs(self, what: str) -> GoldenGraphs:
        if self.golden_graphs is None:
            raise ValueError(
                f"{self.path}: {what} needs a siamese golden-template model exported with its golden and frame graphs "
                f"(runtime.caches_golden is False for this {self.kind}); run the image and its golden image through infer"
            )
        return self.golden_graphs

    def _planes(self, x: torch.Tensor, what: str) -> torch.Tensor:
        """``x`` as ``[B, 1, S, S]`` on the model's device and dtype; ``ValueError`` for another shape."""
        if x.ndim != 4 or x.shape[1] != 1 or tuple(x.shape[2:]) != (self.imgsz, self.imgsz) or len(x) == 0:
            raise ValueError(f"{what} must be [B, 1, {self.imgsz}, {self.imgsz}] (B >= 1), got {list(x.shape)}")
        return x.to(self.device, self.dtype)

    def golden_features(self, reference: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The golden image's trunk features, to compute once per golden image: ``reference`` float ``[B, 1, S, S]`` in
        [0, 1], letterboxed exactly like the frames it will be compared with (the pipeline's letterbox of the golden
        image registered into the frame) -> a tuple of tensors on ``self.device`` in ``self.dtype`` (``c3``, ``c4``:
        meta ``graphs.golden.outputs``) for :meth:`infer_cached`. ``ValueError`` when :attr:`caches_golden` is False
        or for another shape."""
        return self.golden_pass(reference)[0]

    def golden_pass(self, reference: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
        """:meth:`golden_features` and, from the same pass, float32 ``[B, L, 2]``: the drift statistics :meth:`infer`
        reports for the golden image paired with itself, or None when the artifact's golden graph gives none (exported
        before v0.17, or a monitored layer outside the trunk): see ``GoldenGraphs.golden_pass``."""
        graphs = self._graphs("golden_features")
        x = self._planes(reference, "golden_features: reference")
        with torch.inference_mode():
            features, stats = graphs.golden_pass(x)
        return features, None if stats is None else stats.float()

    def infer_cached(self, images: torch.Tensor, golden: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`infer` for frames against cached golden features, one model pass: ``images`` float ``[B, 1, S, S]`` (the
        letterboxed frames) and ``golden`` (:meth:`golden_features` of batch 1, shared by every frame, or of batch B, a
        golden image per frame) -> ``(pred float32 [B, A, 4 + C], stats float32 [B, L, 2])``, what :meth:`infer` gives
        for ``cat((images, reference), 1)`` (float tolerance; ``stats`` the frames' trunk pass). ``ValueError`` when
        :attr:`caches_golden` is False, with test-time augmentation (:attr:`tta` not ``none``: use :meth:`infer`), or for
        inputs of another shape."""
        graphs = self._graphs("infer_cached")
        if self.tta != "none":
            raise ValueError(f"infer_cached runs one pass; test-time augmentation {self.tta!r} needs infer with the two channels")
        x = self._planes(images, "infer_cached: images")
        features = tuple(golden)
        if len(features) != len(GOLDEN_FEATURES) or any(f.ndim != 4 or len(f) not in (1, len(x)) for f in features):
            shapes = [list(f.shape) for f in features]
            raise ValueError(f"infer_cached: golden must be the {len(GOLDEN_FEATURES)} golden_features, batch 1 or {len(x)}, got {shapes}")
        with torch.inference_mode():
            pred, stats = graphs.frame(x, [f.to(self.device, self.dtype) for f in features])
        return pred.float(), stats.float()

    def sync(self) -> None:
        """Wait for the device (CUDA) so timings cover the work."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


PRECISIONS = {"auto": "auto", "float32": False, "bf16": "bf16"}
"""``--precision`` -> :meth:`Runtime.load`'s ``half``."""


def precision_half(precision: str) -> bool | str:
    """:meth:`Runtime.load`'s ``half`` for a ``--precision`` (:data:`PRECISIONS`); ``ValueError`` naming the choices."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return PRECISIONS[precision]


def checkpoint_dtype(device: torch.device, half: bool | str) -> torch.dtype:
    """The dtype a checkpoint runs in on ``device``: ``half`` ``auto`` float16 on CUDA, float32 on the CPU (what the
    exported artifacts and training-time validation run); ``True`` float16; ``False`` float32; ``"bf16"`` bfloat16 on
    a CPU whose oneDNN runs it natively (``core/devices.py`` ``cpu_bf16``; the bundled golden-template model scores the
    same there at 0.75-0.8x float32's model time: ``docs/inspection.md``), ``ValueError`` elsewhere (emulated, it is
    slower than float32)."""
    if half == "bf16":
        if device.type != "cpu" or not cpu_bf16():
            raise ValueError(f"bfloat16 needs a CPU with native bfloat16 (AVX512-BF16 or AMX); {device} has none: leave half at auto")
        return torch.bfloat16
    if half not in ("auto", True, False):
        raise ValueError(f"half must be auto, True, False or 'bf16', got {half!r}")
    use_half = device.type == "cuda" if half == "auto" else bool(half)
    return torch.float16 if use_half else torch.float32


def _carried_baseline(loaded: Any, layers: Sequence[str], imgsz: int) -> dict[str, Any] | None:
    """The drift baseline the checkpoint carries, when it fits the model as loaded (layers, input size, classes);
    otherwise None, with a warning saying why (``predict`` then runs without drift monitoring unless given ``--baseline``)."""
    from defect_detector.export.baseline import export_baseline

    try:
        return export_baseline(loaded, None, layers, imgsz)[0]
    except ValueError as exc:
        log.warning("%s; drift monitoring needs --baseline", exc)
        return None
