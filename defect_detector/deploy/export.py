"""Export a trained detector as a self-describing TorchScript (or ONNX) artifact, or a Triton model repository.

The exported graph is :class:`DeployModel`: the detector, box decoding and the drift statistics of the
monitored layers, for one fixed square input size. NMS and un-letterboxing stay in the runtime.

- Input: float32 ``[B, C, S, S]`` (float16 for a ``half`` export), divided by 255, with ``C`` the model's
  ``in_channels`` (meta ``channels``): channel 0 the letterboxed grayscale image; for a reference model
  (``C = 2``, meta ``reference: true``) channel 1 its golden reference, already registered into the image's
  pixel frame and letterboxed with the image's ``LetterboxMeta``. The batch size is dynamic.
- Output 0 ``pred``: float32 ``[B, A, 4 + C]``: xyxy boxes in letterboxed pixels, then C class
  probabilities, for the ``A`` anchor points of strides 8, 16, 32.
- Output 1 ``stats``: float32 ``[B, L, 2]``: mean and std of each monitored layer's output
  (``monitor.hooks.layer_stats``; ``L = 0`` when no layer is monitored).

Conv + BatchNorm: :func:`fuse_conv_bn` folds every BatchNorm into its convolution in :class:`DeployModel`
(so the eager runtime path is fused too). ``torch.jit.freeze`` would fold them as well (checked on torch
2.14: the traced graph's 44 ``batch_norm`` nodes are gone after freezing), so the artifact is the same either way.

The model runs in ``channels_last`` memory format: on CPU (oneDNN) the depthwise convolutions of this
model are about twice as fast that way. Numerics do not change beyond float rounding.
"""

from __future__ import annotations

import copy
import io
import json
import logging
import os
import statistics
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from defect_detector.data.dataset import to_gray_uint8
from defect_detector.data.letterbox import letterbox
from defect_detector.data.synth import generate_board, generate_board_pair
from defect_detector.deploy.onednn import fuse_conv_silu, onednn_available
from defect_detector.io import atomic_write_bytes, atomic_write_json, atomic_write_text
from defect_detector.model.checkpoint import LoadedModel
from defect_detector.model.layers import ConvBNAct
from defect_detector.model.postprocess import decode, make_anchor_points
from defect_detector.monitor.hooks import DEFAULT_LAYERS, ActivationMonitor

log = logging.getLogger("defect_detector.deploy")

FORMAT_VERSION = 1
META_FILE = "meta.json"
ONNX_OPSET = 17
FP32_TOLERANCE = 1e-3
FP16_BOX_TOLERANCE = 2.0  # pixels
FP16_TOLERANCE = 2e-2  # probabilities, and stats relative to their magnitude
OPTIMIZE_MIN_GAIN = 0.05  # optimize_for_inference is kept only when it is at least 5% faster
TRACE_BATCH = 2
OUTPUTS = {
    "pred": "float32 [B, A, 4 + C]: xyxy boxes in letterboxed input pixels, then class probabilities",
    "stats": "float32 [B, L, 2]: mean and std of each monitored layer output (layers in meta 'layers' order)",
}


class ExportError(ValueError):
    """The model cannot be exported as asked (unsupported option, or the parity check failed)."""


def model_channels(model: nn.Module) -> int:
    """Input channels of a detector (``in_channels``; 1 for models built before reference inspection existed)."""
    return int(getattr(model, "in_channels", 1))


def fuse_conv_bn(model: nn.Module) -> int:
    """Fold the BatchNorm of every :class:`ConvBNAct` into its convolution, in place (eval mode only).

    The BatchNorm is replaced by ``nn.Identity`` so module names (and monitored layer names) stay valid.
    Returns the number of fused pairs.
    """
    if model.training:
        raise ValueError("fuse_conv_bn needs an eval-mode model")
    fused = 0
    for module in model.modules():
        if isinstance(module, ConvBNAct) and isinstance(module[1], nn.BatchNorm2d):
            module[0] = fuse_conv_bn_eval(module[0], module[1])
            module[1] = nn.Identity()
            fused += 1
    return fused


class DeployModel(nn.Module):
    """The deployed computation: detector + decode + layer statistics for a fixed ``imgsz``.

    Wraps a copy of ``model`` (the caller's model is not modified), with BatchNorm folded (``fuse``) and
    weights in channels_last memory format (``channels_last``). ``cpu_fusion`` (needs ``fuse``) also runs
    every conv + SiLU as one oneDNN kernel (:mod:`defect_detector.deploy.onednn`): faster, but the model
    then runs only on the CPU in float32. Anchor points are float32 buffers for ``imgsz x imgsz`` inputs.
    ``forward(x)``: ``x`` float ``[B, in_channels, imgsz, imgsz]`` in [0, 1] (the model's dtype;
    ``in_channels`` is the detector's, see the module docstring) -> ``(pred float32 [B, A, 4 + C],
    stats float32 [B, L, 2])`` as described in the module docstring. ``layers`` are module names (or globs)
    of the detector, resolved in model order into ``layer_names``; an empty sequence monitors nothing (``L = 0``).
    """

    def __init__(
        self,
        model: nn.Module,
        imgsz: int,
        layers: Sequence[str] = DEFAULT_LAYERS,
        fuse: bool = True,
        channels_last: bool = True,
        cpu_fusion: bool = False,
    ) -> None:
        super().__init__()
        if cpu_fusion and not fuse:
            raise ValueError("cpu_fusion needs fuse=True (the oneDNN kernel takes the BatchNorm-folded convolution)")
        detector = copy.deepcopy(model).eval()
        if fuse:
            fuse_conv_bn(detector)
        if channels_last:
            detector = detector.to(memory_format=torch.channels_last)
        if cpu_fusion:
            fuse_conv_silu(detector)
        self.model = detector
        self.in_channels = model_channels(model)
        self.imgsz = int(imgsz)
        self.strides = tuple(int(s) for s in model.strides)
        if self.imgsz % max(self.strides) != 0:
            raise ValueError(f"imgsz must be a multiple of {max(self.strides)}, got {imgsz}")
        device = next(detector.parameters()).device
        points, anchor_strides = make_anchor_points(self.imgsz, self.imgsz, self.strides, device)
        self.register_buffer("points", points, persistent=False)
        self.register_buffer("anchor_strides", anchor_strides, persistent=False)
        self.monitor = ActivationMonitor(detector, layers) if layers else None
        self.layer_names: tuple[str, ...] = tuple(self.monitor.layer_names) if self.monitor else ()

    @property
    def num_classes(self) -> int:
        return int(self.model.num_classes)

    def half_(self) -> DeployModel:
        """Convert the detector (not the anchor buffers, which must stay exact) to float16, in place."""
        self.model.half()
        return self

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raw = self.model(x)
        pred = decode(raw, self.points, self.anchor_strides)
        stats = self.monitor.stats() if self.monitor is not None else torch.zeros_like(pred[:, :0, :2])
        return pred, stats


def build_meta(
    class_names: Sequence[str],
    imgsz: int,
    strides: Sequence[int],
    layers: Sequence[str],
    baseline: dict[str, Any] | None = None,
    half: bool = False,
    optimize: dict[str, Any] | None = None,
    source: str | None = None,
    cpu_only: bool = False,
    tta: str = "none",
    channels: int = 1,
) -> dict[str, Any]:
    """The ``meta.json`` describing an exported model (also used for a checkpoint loaded eagerly).

    ``channels``: the model's input channels C (1: the image; 2: the image and its registered reference,
    written as ``"reference": true``); the input is ``["B", C, imgsz, imgsz]``.
    ``cpu_only``: the graph holds CPU-only kernels (oneDNN conv + SiLU, see ``DeployModel(cpu_fusion=True)``).
    ``tta``: the model's test-time augmentation mode (its config's ``eval.tta``), which :class:`Runtime`
    applies around the graph by default; the graph itself is always one pass.
    """
    return {
        "format_version": FORMAT_VERSION,
        "class_names": list(class_names),
        "imgsz": int(imgsz),
        "channels": int(channels),
        "reference": int(channels) == 2,
        "normalisation": "x/255",
        "letterbox": {"pad_value": 114, "centred": True},
        "input": {"name": "images", "dtype": "float16" if half else "float32", "shape": ["B", int(channels), int(imgsz), int(imgsz)]},
        "outputs": OUTPUTS,
        "strides": [int(s) for s in strides],
        "layers": list(layers),
        "baseline": baseline,
        "half": bool(half),
        "cpu_only": bool(cpu_only),
        "torch_version": torch.__version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "optimize_for_inference": optimize or {"applied": False, "reason": "not exported"},
        "source_weights": source,
        "tta": tta,
    }


@contextmanager
def quiet_jit() -> Iterator[None]:
    """Silence torch 2.14's deprecation notices for torch.jit (trace, freeze, save, load, ...): TorchScript
    is still the format libtorch, Triton's PyTorch backend and the C++ example load."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, message=r".*torch\.jit\..*deprecated")
        # The layer statistics read layer shapes as Python ints (row step, row and value counts): constants
        # for the traced imgsz, as intended.
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning, module=r"defect_detector\.monitor\.hooks")
        yield


def trace_deploy_model(
    deploy: DeployModel, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> torch.jit.ScriptModule:
    """``torch.jit.trace`` ``deploy`` on a batch of :data:`TRACE_BATCH`, check batches 1 and 3 against eager, then freeze.

    Inputs are random ``[B, deploy.in_channels, S, S]``. ``deploy`` must already be on ``device`` in ``dtype``.
    Raises :class:`ExportError` when the traced graph does not reproduce eager outputs at another batch size
    (the batch dimension must stay dynamic).
    """
    size, channels = deploy.imgsz, deploy.in_channels
    generator = torch.Generator().manual_seed(0)
    example = torch.rand(TRACE_BATCH, channels, size, size, generator=generator).to(device, dtype)
    with torch.no_grad(), quiet_jit():
        traced = torch.jit.trace(deploy, example, check_trace=False)
        frozen = torch.jit.freeze(traced.eval())
        for batch in (1, 3):
            x = torch.rand(batch, channels, size, size, generator=generator).to(device, dtype)
            got, want = frozen(x), deploy(x)
            for name, a, b in zip(("pred", "stats"), got, want):
                if a.shape != b.shape or not torch.allclose(a, b, atol=FP32_TOLERANCE * 10, rtol=1e-3):
                    raise ExportError(f"traced model differs from eager at batch {batch} ({name}: {tuple(a.shape)} vs {tuple(b.shape)})")
    return frozen


def _median_ms(module: nn.Module, x: torch.Tensor, iters: int) -> float:
    times = []
    with torch.no_grad():
        module(x)
        for _ in range(iters):
            start = time.perf_counter()
            module(x)
            times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def artifact_bytes(module: torch.jit.ScriptModule, meta: dict[str, Any] | None = None) -> bytes:
    """``torch.jit.save`` ``module`` (with ``meta`` as ``meta.json``) to bytes."""
    buffer = io.BytesIO()
    extra = {META_FILE: json.dumps(meta, indent=2)} if meta is not None else {}
    with quiet_jit():
        torch.jit.save(module, buffer, _extra_files=extra)
    return buffer.getvalue()


def load_artifact_bytes(data: bytes, device: torch.device | str = "cpu") -> tuple[torch.jit.ScriptModule, dict[str, Any]]:
    """Inverse of :func:`artifact_bytes`: the module on ``device`` and its meta (empty dict when absent)."""
    extra = {META_FILE: ""}
    with quiet_jit():
        module = torch.jit.load(io.BytesIO(data), map_location=device, _extra_files=extra)
    return module, json.loads(extra[META_FILE]) if extra[META_FILE] else {}


def choose_optimization(
    deploy: DeployModel, frozen: torch.jit.ScriptModule, optimize: bool | str, device: torch.device, half: bool, iters: int = 10
) -> tuple[torch.jit.ScriptModule, dict[str, Any]]:
    """Decide whether to apply ``torch.jit.optimize_for_inference`` to ``frozen``.

    ``optimize``: False (never), True (whenever it works) or ``"auto"`` (only when it is at least
    :data:`OPTIMIZE_MIN_GAIN` faster on this machine, timed here at batch 1). It is tried on CPU float32
    only, and kept only if the optimized module survives a save/load round trip. Returns the module to
    save and a report ``{"requested", "applied", "frozen_ms", "optimized_ms", "reason"}``.
    """
    info: dict[str, Any] = {"requested": optimize, "applied": False, "frozen_ms": None, "optimized_ms": None, "reason": ""}
    if optimize is False:
        info["reason"] = "disabled"
        return frozen, info
    if device.type != "cpu" or half:
        info["reason"] = "only tried for CPU float32 exports"
        return frozen, info
    try:
        with torch.no_grad(), quiet_jit():
            candidate = torch.jit.optimize_for_inference(trace_deploy_model(deploy, device))
    except RuntimeError as exc:
        info["reason"] = f"optimize_for_inference failed on this graph: {exc}"
        return frozen, info
    with torch.no_grad(), quiet_jit():
        x = torch.rand(1, deploy.in_channels, deploy.imgsz, deploy.imgsz, device=device)
        frozen_ms, optimized_ms = [], []
        for _ in range(2):  # alternate to share background load fairly
            frozen_ms.append(_median_ms(frozen, x, iters // 2 or 1))
            optimized_ms.append(_median_ms(candidate, x, iters // 2 or 1))
    info["frozen_ms"], info["optimized_ms"] = round(min(frozen_ms), 3), round(min(optimized_ms), 3)
    gain = 1.0 - info["optimized_ms"] / info["frozen_ms"]
    if optimize == "auto" and gain < OPTIMIZE_MIN_GAIN:
        info["reason"] = f"not faster enough on this machine ({gain:+.1%}, needs {OPTIMIZE_MIN_GAIN:.0%})"
        return frozen, info
    try:
        load_artifact_bytes(artifact_bytes(candidate))
    except Exception as exc:  # noqa: BLE001 - any load failure means "not serializable"
        info["reason"] = f"optimized module does not survive save/load in torch {torch.__version__}: {type(exc).__name__}: {exc}"
        return frozen, info
    info["applied"] = True
    info["reason"] = f"{gain:+.1%} latency change at batch 1"
    return candidate, info


PARITY_REFERENCE_SHIFT = (3, 2)  # (dx, dy) original pixels: the parity reference is a slightly misaligned copy


def shifted_copy(image: np.ndarray, dx: int, dy: int, fill: int = 114) -> np.ndarray:
    """uint8 ``[H, W]`` ``image`` moved by ``dx, dy`` >= 0 pixels (right, down), uncovered pixels ``fill``: same size and frame."""
    out = np.full_like(image, fill)
    h, w = image.shape
    dx, dy = min(dx, w), min(dy, h)
    out[dy:, dx:] = image[: h - dy, : w - dx]
    return out


def parity_inputs(imgsz: int, check_images: Sequence[np.ndarray] | None = None, seed: int = 0, channels: int = 1) -> torch.Tensor:
    """Letterboxed float32 ``[N, channels, imgsz, imgsz]`` in [0, 1] from ``check_images`` (any size, gray or colour),
    or from two synthetic non-square boards when None.

    ``channels`` 2 (a reference model): channel 1 is each image's reference in the image's pixel frame,
    letterboxed with the image's geometry: a copy of the image shifted by :data:`PARITY_REFERENCE_SHIFT`
    (for the synthetic boards, their defect-free template shifted so), so the two channels differ.
    """
    if channels not in (1, 2):
        raise ValueError(f"channels must be 1 or 2, got {channels}")
    rng = np.random.default_rng(seed)
    pairs: list[tuple[np.ndarray, np.ndarray]]
    if check_images is None and channels == 1:
        check_images = [generate_board(imgsz * 3 // 4, imgsz, rng, n_defects=(4, 6))[0] for _ in range(2)]
    if check_images is None:
        boards = [generate_board_pair(imgsz * 3 // 4, imgsz, rng, n_defects=(4, 6))[:2] for _ in range(2)]
        pairs = [(image, shifted_copy(template, *PARITY_REFERENCE_SHIFT)) for image, template in boards]
    else:
        grays = [to_gray_uint8(image)[0] for image in check_images]
        pairs = [(gray, shifted_copy(gray, *PARITY_REFERENCE_SHIFT)) for gray in grays]
    stacks = []
    for image, reference in pairs:
        planes = [letterbox(image, imgsz)[0]] + ([letterbox(reference, imgsz)[0]] if channels == 2 else [])
        stacks.append(np.stack(planes))  # uint8 [channels, S, S]
    return torch.from_numpy(np.stack(stacks)).float().div_(255.0)


def _max_diffs(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> dict[str, float]:
    pred, stats = (t.detach().float().cpu() for t in got)
    ref_pred, ref_stats = (t.detach().float().cpu() for t in want)
    stats_abs = (stats - ref_stats).abs()
    return {
        "boxes": float((pred[..., :4] - ref_pred[..., :4]).abs().max()),
        "scores": float((pred[..., 4:] - ref_pred[..., 4:]).abs().max()),
        "pred": float((pred - ref_pred).abs().max()),
        "stats": float(stats_abs.max()) if stats_abs.numel() else 0.0,
        "stats_relative": float((stats_abs / ref_stats.abs().clamp_min(1.0)).max()) if stats_abs.numel() else 0.0,
    }


def check_parity(diffs: dict[str, float], half: bool, what: str) -> None:
    """Raise :class:`ExportError` when ``diffs`` (from a parity run) exceed the tolerance of the precision."""
    if half:
        limits = {"boxes": FP16_BOX_TOLERANCE, "scores": FP16_TOLERANCE, "stats_relative": FP16_TOLERANCE}
    else:
        limits = {"pred": FP32_TOLERANCE, "stats": FP32_TOLERANCE}
    failed = {k: diffs[k] for k, limit in limits.items() if not diffs[k] <= limit}
    if failed:
        raise ExportError(f"{what} parity check failed: max abs diff {failed} exceeds {limits}")


def _reference(loaded: LoadedModel, imgsz: int, layers: Sequence[str], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs of the unfused, float32, CPU eager model (the ground truth for parity checks)."""
    reference = DeployModel(loaded.model, imgsz, layers, fuse=False, channels_last=False).float().cpu()
    with torch.no_grad():
        return reference(x)


def _resolve_device(half: bool) -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda")
    if half and not cpu_half_supported():
        raise ExportError("--half needs CUDA, or a torch build that runs float16 convolutions on the CPU; this one does not")
    return torch.device("cpu")


def cpu_half_supported() -> bool:
    """Whether this torch build runs float16 convolutions on the CPU (torch 2.14 does, slowly)."""
    try:
        with torch.no_grad():
            torch.nn.functional.conv2d(torch.ones(1, 2, 8, 8, dtype=torch.float16), torch.ones(2, 1, 3, 3, dtype=torch.float16), groups=2)
        return True
    except RuntimeError:
        return False


def export_torchscript(
    loaded: LoadedModel,
    out_path: str | os.PathLike[str],
    imgsz: int | None = None,
    half: bool = False,
    baseline: dict[str, Any] | None = None,
    optimize: bool | str = "auto",
    check_images: Sequence[np.ndarray] | None = None,
    layers: Sequence[str] = DEFAULT_LAYERS,
    portable: bool = False,
) -> dict[str, Any]:
    """Trace, freeze, check and atomically save ``loaded`` as a TorchScript artifact with ``meta.json``.

    ``imgsz`` defaults to the training config's. ``half`` traces a float16 model: on CUDA when available,
    else on the CPU when :func:`cpu_half_supported` (the artifact is meant for CUDA/Jetson; CPU float16
    is slow). A float32 export traced on the CPU runs conv + SiLU as oneDNN kernels (``DeployModel``'s
    ``cpu_fusion``; meta ``cpu_only``) unless ``portable``, which keeps a graph that also runs on CUDA.
    Parity: the saved bytes are loaded back and compared with the unfused float32 eager model on
    ``check_images`` (default: two synthetic boards; for a 2-channel model each with a shifted copy as its
    reference, see :func:`parity_inputs`), float32 within :data:`FP32_TOLERANCE`, float16
    within :data:`FP16_BOX_TOLERANCE` px and :data:`FP16_TOLERANCE`. Returns a report with the meta,
    parity diffs, file size and path; raises :class:`ExportError` on a failed check.
    """
    imgsz = int(imgsz or loaded.config.data.imgsz)
    device = _resolve_device(half)
    dtype = torch.float16 if half else torch.float32
    cpu_fusion = device.type == "cpu" and not half and not portable and onednn_available()
    deploy = DeployModel(loaded.model, imgsz, layers, cpu_fusion=cpu_fusion).float().to(device)
    if half:
        deploy.half_()
    frozen = trace_deploy_model(deploy, device, dtype)
    module, optimize_info = choose_optimization(deploy, frozen, optimize, device, half)
    meta = build_meta(
        loaded.class_names,
        imgsz,
        deploy.strides,
        deploy.layer_names,
        baseline,
        half,
        optimize_info,
        str(loaded.path),
        cpu_fusion,
        loaded.config.eval.tta,
        deploy.in_channels,
    )
    data = artifact_bytes(module, meta)

    restored, restored_meta = load_artifact_bytes(data, device)
    if restored_meta != meta:
        raise ExportError("meta.json did not round-trip through the saved artifact")
    x = parity_inputs(imgsz, check_images, channels=deploy.in_channels)
    with torch.no_grad():
        got = restored(x.to(device, dtype))
    diffs = _max_diffs(got, _reference(loaded, imgsz, deploy.layer_names, x))
    check_parity(diffs, half, "TorchScript")

    out_path = Path(out_path)
    atomic_write_bytes(out_path, data)
    log.debug("TorchScript parity on %d images: max abs diff pred %.3g, stats %.3g", len(x), diffs["pred"], diffs["stats"])
    return {"path": str(out_path), "bytes": len(data), "device": str(device), "parity": diffs, "parity_images": len(x), "meta": meta}


def export_onnx(
    loaded: LoadedModel,
    out_path: str | os.PathLike[str],
    imgsz: int | None = None,
    baseline: dict[str, Any] | None = None,
    check_images: Sequence[np.ndarray] | None = None,
    layers: Sequence[str] = DEFAULT_LAYERS,
) -> dict[str, Any]:
    """Export ``loaded`` as ONNX (opset :data:`ONNX_OPSET`), input ``images`` float32 ``[B, C, S, S]`` (C: the
    model's channels, meta ``channels``) and outputs ``pred``, ``stats``.

    Uses the TorchScript-based exporter (``dynamo=False``): it traces the same :class:`DeployModel`
    (hooks included) and needs neither ``onnx`` nor ``onnxscript``. The batch axis is dynamic. The meta
    is embedded as ``metadata_props["meta.json"]`` when the ``onnx`` package is importable, and always
    written beside the model as ``<out>.meta.json``. Parity with the eager model is checked with
    ``onnxruntime`` when it is importable (skipped with a log message otherwise). Float32 only: use
    TensorRT's ``--fp16`` on the ONNX model for half precision.
    """
    imgsz = int(imgsz or loaded.config.data.imgsz)
    deploy = DeployModel(loaded.model, imgsz, layers).float().cpu()
    channels = deploy.in_channels
    meta = build_meta(
        loaded.class_names,
        imgsz,
        deploy.strides,
        deploy.layer_names,
        baseline,
        False,
        None,
        str(loaded.path),
        tta=loaded.config.eval.tta,
        channels=channels,
    )
    meta["onnx_opset"] = ONNX_OPSET
    buffer = io.BytesIO()
    example = torch.rand(TRACE_BATCH, channels, imgsz, imgsz)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*legacy TorchScript-based ONNX export")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
        torch.onnx.export(
            deploy,
            (example,),
            buffer,
            input_names=["images"],
            output_names=["pred", "stats"],
            opset_version=ONNX_OPSET,
            dynamic_axes={"images": {0: "batch"}, "pred": {0: "batch"}, "stats": {0: "batch"}},
            dynamo=False,
        )
    data = _with_onnx_metadata(buffer.getvalue(), meta)

    report: dict[str, Any] = {"path": str(out_path), "bytes": len(data), "opset": ONNX_OPSET, "meta": meta, "parity": None}
    try:
        import onnxruntime as ort
    except ImportError:
        log.warning("onnxruntime is not installed: ONNX parity check skipped (pip install onnxruntime)")
        report["parity_skipped"] = "onnxruntime not installed"
    else:
        x = parity_inputs(imgsz, check_images, channels=channels)
        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        got = [torch.from_numpy(a) for a in session.run(["pred", "stats"], {"images": x.numpy()})]
        diffs = _max_diffs(got, _reference(loaded, imgsz, deploy.layer_names, x))
        check_parity(diffs, False, "ONNX")
        report["parity"], report["parity_images"] = diffs, len(x)
        log.debug(
            "ONNX parity on %d images (onnxruntime %s): max abs diff pred %.3g, stats %.3g",
            len(x),
            ort.__version__,
            diffs["pred"],
            diffs["stats"],
        )
    out_path = Path(out_path)
    atomic_write_bytes(out_path, data)
    atomic_write_json(onnx_meta_path(out_path), meta)
    return report


def onnx_meta_path(onnx_path: str | os.PathLike[str]) -> Path:
    """``model.onnx`` -> ``model.meta.json`` (the sidecar meta written by :func:`export_onnx`)."""
    path = Path(onnx_path)
    return path.with_name(path.stem + ".meta.json")


def _with_onnx_metadata(data: bytes, meta: dict[str, Any]) -> bytes:
    try:
        import onnx
    except ImportError:
        return data
    model = onnx.load_from_string(data)
    entry = model.metadata_props.add()
    entry.key, entry.value = META_FILE, json.dumps(meta)
    return model.SerializeToString()


TRITON_INPUT = "INPUT__0"
TRITON_OUTPUTS = ("OUTPUT__0", "OUTPUT__1")


def triton_config(model_name: str, meta: dict[str, Any], max_batch_size: int = 8) -> str:
    """``config.pbtxt`` for Triton's PyTorch (libtorch) backend serving an artifact described by ``meta``.

    Input dims (without the batch axis) ``[C, S, S]``, C = ``meta["channels"]`` (1 for metas that predate it)."""
    size, channels = meta["imgsz"], int(meta.get("channels", 1))
    anchors = sum((size // s) ** 2 for s in meta["strides"])
    outputs_dims = ([anchors, 4 + len(meta["class_names"])], [len(meta["layers"]), 2])
    input_type = "TYPE_FP16" if meta["half"] else "TYPE_FP32"
    output_lines = [f'  {{ name: "{n}", data_type: TYPE_FP32, dims: [ {d[0]}, {d[1]} ] }}' for n, d in zip(TRITON_OUTPUTS, outputs_dims)]
    lines = [
        f'name: "{model_name}"',
        'platform: "pytorch_libtorch"',
        f"max_batch_size: {max_batch_size}",
        "input [",
        f'  {{ name: "{TRITON_INPUT}", data_type: {input_type}, dims: [ {channels}, {size}, {size} ] }}',
        "]",
        "output [",
        ",\n".join(output_lines),
        "]",
        "dynamic_batching { }",
        "",
    ]
    return "\n".join(lines)


_TRITON_README = """# Triton model repository: {name}

Generated by `defect-detector export --triton`. Layout:

    {name}/config.pbtxt      PyTorch (libtorch) backend, max_batch_size {max_batch}, dynamic batching
    {name}/1/model.pt        the TorchScript artifact (meta.json inside it)

Input  `{inp}`: {dtype} [B, {channels}, {size}, {size}], {input_text}
Output `OUTPUT__0`: float32 [B, {anchors}, {cols}]: xyxy boxes in letterboxed pixels, then class probabilities
for {classes}.
Output `OUTPUT__1`: float32 [B, {layers}, 2]: mean and std of the monitored layers {layer_names}.
NMS and mapping boxes back to the original image are the client's job.

Serve: `tritonserver --model-repository=$PWD` (see deploy/triton/README.md in the source tree).
"""

_TRITON_INPUT_TEXT = {
    1: "a letterboxed grayscale image / 255 (pad value 114, centred).",
    2: "/ 255: channel 0 the letterboxed grayscale image (pad value 114, centred), channel 1\n"
    "its golden reference, already registered into the image's pixel frame (the client's job:\n"
    "defect_detector.data.register in Python) and letterboxed with the image's scale and padding.",
}


def export_triton(
    loaded: LoadedModel,
    repo_dir: str | os.PathLike[str],
    model_name: str = "defect_detector",
    imgsz: int | None = None,
    half: bool = False,
    baseline: dict[str, Any] | None = None,
    max_batch_size: int = 8,
    check_images: Sequence[np.ndarray] | None = None,
) -> dict[str, Any]:
    """Write a Triton model repository: ``repo_dir/<model_name>/1/model.pt``, ``.../config.pbtxt`` and
    ``repo_dir/README.md``. Returns the TorchScript export report plus the written paths."""
    repo = Path(repo_dir)
    model_dir = repo / model_name
    # Triton's libtorch backend picks its own threads/device; optimize_for_inference would pin the graph to CPU.
    report = export_torchscript(loaded, model_dir / "1" / "model.pt", imgsz, half, baseline, optimize=False, check_images=check_images)
    meta = report["meta"]
    config_path = model_dir / "config.pbtxt"
    atomic_write_text(config_path, triton_config(model_name, meta, max_batch_size))
    size = meta["imgsz"]
    readme = _TRITON_README.format(
        name=model_name,
        max_batch=max_batch_size,
        inp=TRITON_INPUT,
        dtype="float16" if meta["half"] else "float32",
        size=size,
        channels=meta["channels"],
        input_text=_TRITON_INPUT_TEXT[meta["channels"]],
        anchors=sum((size // s) ** 2 for s in meta["strides"]),
        cols=4 + len(meta["class_names"]),
        classes=", ".join(meta["class_names"]),
        layers=len(meta["layers"]),
        layer_names=", ".join(meta["layers"]) or "(none)",
    )
    atomic_write_text(repo / "README.md", readme)
    report.update({"repository": str(repo), "config": str(config_path)})
    return report
