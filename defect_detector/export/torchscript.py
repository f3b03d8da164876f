"""TorchScript export: trace and freeze :class:`DeployModel`, choose ``optimize_for_inference``, save with ``meta.json``."""

from __future__ import annotations

import io
import json
import logging
import os
import statistics
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn

from defect_detector.core.constants import DEFAULT_LAYERS
from defect_detector.export.baseline import BaselineArg
from defect_detector.export.deploy_model import GOLDEN_FEATURES, GOLDEN_GRAPHS, META_FILE, DeployModel, ExportError
from defect_detector.export.digest import DIGEST_KEY, with_digest
from defect_detector.export.exporter import finish_export, start_export
from defect_detector.export.onednn import onednn_available
from defect_detector.export.parity import FP32_TOLERANCE, cached_outputs, check_parity, max_diffs, parity_inputs, reference_outputs
from defect_detector.model.checkpoint import LoadedModel

log = logging.getLogger("defect_detector.export")

OPTIMIZE_MIN_GAIN = 0.05  # optimize_for_inference is kept only when it is at least 5% faster
TRACE_BATCH = 2


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

    Inputs are random ``[B, deploy.in_channels, S, S]``. ``deploy`` must already be on ``device`` in ``dtype``. A siamese
    model (``deploy.caches_golden``) is traced with its methods ``golden`` and ``frame`` too (``torch.jit.trace_module``;
    kept by the freeze), checked the same way: ``frame(image, *golden(reference))`` against eager ``forward`` of the
    pair, the golden features of batch 1 and of the frames' batch. Raises :class:`ExportError` when the traced graph
    does not reproduce eager outputs at another batch size (the batch dimension must stay dynamic).
    """
    size, channels = deploy.imgsz, deploy.in_channels
    generator = torch.Generator().manual_seed(0)

    def rand(batch: int, planes: int = channels) -> torch.Tensor:
        return torch.rand(batch, planes, size, size, generator=generator).to(device, dtype)

    with torch.no_grad(), quiet_jit():
        methods: dict[str, tuple[torch.Tensor, ...]] = {"forward": (rand(TRACE_BATCH),)}
        if deploy.caches_golden:
            methods["golden"] = (rand(TRACE_BATCH, 1),)
            methods["frame"] = (rand(TRACE_BATCH, 1), *deploy.golden(rand(1, 1))[: len(GOLDEN_FEATURES)])
        traced = torch.jit.trace_module(deploy, methods, check_trace=False)
        frozen = torch.jit.freeze(traced.eval(), preserved_attrs=[m for m in methods if m != "forward"])
        for batch in (1, 3):
            x = rand(batch)
            _check_traced(frozen(x), deploy(x), f"batch {batch}")
        for golden_batch in (1, 3) if deploy.caches_golden else ():
            pair = torch.cat((x[:, :1], x[:golden_batch, 1:2].expand(3, -1, -1, -1)), 1)
            got = frozen.frame(x[:, :1], *frozen.golden(x[:golden_batch, 1:2])[: len(GOLDEN_FEATURES)])
            _check_traced(got, deploy(pair), f"batch 3 (methods golden and frame, golden features of batch {golden_batch})")
    return frozen


def _check_traced(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...], where: str) -> None:
    for name, a, b in zip(("pred", "stats"), got, want):
        if a.shape != b.shape or not torch.allclose(a, b, atol=FP32_TOLERANCE * 10, rtol=1e-3):
            raise ExportError(f"traced model differs from eager at {where} ({name}: {tuple(a.shape)} vs {tuple(b.shape)})")


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
    """``torch.jit.save`` ``module`` (with ``meta`` as ``meta.json``, plus the digest of the graph, weights and meta that
    the runtime checks: :mod:`.digest`) to bytes."""

    def save(extra: dict[str, str]) -> bytes:
        buffer = io.BytesIO()
        with quiet_jit():
            torch.jit.save(module, buffer, _extra_files=extra)
        return buffer.getvalue()

    if meta is None:
        return save({})
    signed = with_digest(save({META_FILE: "{}"}), meta)
    return save({META_FILE: json.dumps(signed, indent=2)})


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
            others = [m for m in GOLDEN_GRAPHS if deploy.caches_golden]
            candidate = torch.jit.optimize_for_inference(trace_deploy_model(deploy, device), other_methods=others)
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


def _parity(
    restored: torch.jit.ScriptModule, want: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor, golden: bool, half: bool
) -> dict[str, float]:
    """Max abs diffs of the saved module ``restored`` on ``x`` from ``want`` (the unfused eager outputs), checked
    (:class:`ExportError` past the tolerance); with ``golden``, its ``golden`` and ``frame`` methods too (the worst)."""
    with torch.no_grad():
        diffs = max_diffs(restored(x), want)
    check_parity(diffs, half, "TorchScript")
    if golden:
        cached = max_diffs(cached_outputs(restored.golden, restored.frame, x), want)
        check_parity(cached, half, "TorchScript golden + frame methods")
        diffs = {k: max(v, cached[k]) for k, v in diffs.items()}
    return diffs


def _resolve_device(half: bool) -> torch.device:
    """Where to trace: CUDA whenever available (unlike ``devices.resolve_device``, there is no device option), else
    the CPU; a ``half`` export on the CPU needs :func:`cpu_half_supported` (:class:`ExportError` otherwise)."""
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


def export_torchscript(  # noqa: PLR0913 - one keyword per export flag and per choice the tests pin (optimize, check_images)
    loaded: LoadedModel,
    out_path: str | os.PathLike[str],
    imgsz: int | None = None,
    half: bool = False,
    baseline: BaselineArg = None,
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
    ``baseline``: a baseline JSON file or dict, default the checkpoint's; checked against the model before
    tracing (:func:`~defect_detector.export.baseline.export_baseline`) and embedded in the meta.
    Parity: the saved bytes are loaded back and compared with the unfused float32 eager model on
    ``check_images`` (default: two synthetic boards; for a 2-channel model each with a shifted copy as its
    reference, see :func:`parity_inputs`), float32 within ``FP32_TOLERANCE``, float16 within
    ``FP16_BOX_TOLERANCE`` px and ``FP16_TOLERANCE`` (:mod:`.parity`); a siamese model's ``golden`` and ``frame``
    methods (meta ``graphs``) are checked alike, and ``parity`` reports the worst of all. Returns a report with the meta, parity
    diffs, file size, path and ``baseline_source``; raises :class:`ExportError` on a failed check.
    """
    device = _resolve_device(half)
    dtype = torch.float16 if half else torch.float32
    cpu_fusion = device.type == "cpu" and not half and not portable and onednn_available()
    start = start_export(loaded, imgsz, baseline, layers, device, cpu_fusion)
    deploy = start.deploy
    if half:
        deploy.half_()
    frozen = trace_deploy_model(deploy, device, dtype)
    module, optimize_info = choose_optimization(deploy, frozen, optimize, device, half)
    meta = start.meta(half=half, optimize=optimize_info, cpu_only=cpu_fusion)
    for name in meta["graphs"]:
        meta["graphs"][name]["method"] = name
    data = artifact_bytes(module, meta)

    restored, restored_meta = load_artifact_bytes(data, device)
    if {k: v for k, v in restored_meta.items() if k != DIGEST_KEY} != meta:
        raise ExportError("meta.json did not round-trip through the saved artifact")
    meta = restored_meta  # with its digest
    x = parity_inputs(start.imgsz, check_images, channels=deploy.in_channels)
    want = reference_outputs(loaded, start.imgsz, deploy.layer_names, x)
    diffs = _parity(restored, want, x.to(device, dtype), deploy.caches_golden, half)
    log.debug("TorchScript parity on %d images: max abs diff pred %.3g, stats %.3g", len(x), diffs["pred"], diffs["stats"])
    return finish_export(out_path, data, meta, start.baseline_source, device=str(device), parity=diffs, parity_images=len(x))
