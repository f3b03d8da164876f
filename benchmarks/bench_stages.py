"""Costs around one model pass, timed interleaved (:mod:`benchmarks.timing`): the frame pipeline's stages, test-time
augmentation, and registering a golden board to a frame (``align/register.py``) against the model's TorchScript latency.
:func:`cpu_artifact` is the TorchScript artifact as ``export`` writes it on this CPU, loaded back from bytes.
"""

from __future__ import annotations

import io
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

from benchmarks.timing import measure_interleaved, paired_ratio
from defect_detector.align.register import Registrar, register
from defect_detector.core.config_register import RegisterConfig
from defect_detector.core.constants import DEFAULT_LAYERS, PAD_VALUE
from defect_detector.data.synth import generate_board, generate_board_pair
from defect_detector.export import DeployModel, artifact_bytes, checkpoint_meta, model_channels, quiet_jit, trace_deploy_model
from defect_detector.export.onednn import onednn_available
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.runtime import Runtime
from defect_detector.model.checkpoint import LoadedModel
from defect_detector.model.postprocess import decode
from defect_detector.model.tta import TTA_MODES


def cpu_artifact(loaded: LoadedModel, imgsz: int, layers: Sequence[str], cpu_fusion: bool) -> torch.jit.ScriptModule:
    """The TorchScript artifact as ``export`` writes it on the CPU (without the parity run), loaded back from bytes."""
    deploy = DeployModel(loaded.model, imgsz, layers, cpu_fusion=cpu_fusion).float().cpu()
    meta = checkpoint_meta(loaded, deploy, cpu_only=cpu_fusion)
    data = artifact_bytes(trace_deploy_model(deploy), meta)
    with quiet_jit():
        return torch.jit.load(io.BytesIO(data), map_location="cpu")


def _portable_runtime(loaded: LoadedModel, imgsz: int) -> tuple[Runtime, DeployModel]:
    """A CPU :class:`Runtime` over a portable TorchScript artifact of ``loaded`` (traced via a temp file), and its eager wrapper."""
    deploy = DeployModel(loaded.model, imgsz, DEFAULT_LAYERS).float().cpu()
    meta = checkpoint_meta(loaded, deploy)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.torchscript.pt"
        path.write_bytes(artifact_bytes(trace_deploy_model(deploy), meta))
        runtime = Runtime.load(path, device="cpu")
    return runtime, deploy


def bench_pipeline(
    loaded: LoadedModel, imgsz: int, sizes: Sequence[tuple[int, int]], iters: int, conf: float = 0.25
) -> list[dict[str, Any]]:
    """Per-frame cost beyond the model: Runtime preprocess + postprocess medians (and decode) per frame size
    ``(height, width)``; a reference model's preprocess includes letterboxing the (already aligned) reference."""
    runtime, deploy = _portable_runtime(loaded, imgsz)
    pipeline = Pipeline(runtime, conf=conf)
    raw = torch.randn(1, int(deploy.points.shape[0]), 4 + deploy.num_classes)
    rows = []
    for height, width in sizes:
        frame, references = _board_and_references(runtime.channels, height, width)
        runtime.warmup()
        pipeline.detect([frame], references)
        stages: dict[str, list[float]] = {"preprocess": [], "model": [], "postprocess": []}
        detections = []
        for _ in range(iters):
            result = pipeline.detect([frame], references)[0]
            detections.append(len(result))
            for stage in stages:
                stages[stage].append(result.timings[stage])
        with torch.inference_mode():
            timed = measure_interleaved({"decode": lambda: decode(raw, deploy.points, deploy.anchor_strides)}, iters)
        decode_ms = timed["decode"]["median_ms"]
        medians = {stage: round(statistics.median(v), 3) for stage, v in stages.items()}
        rows.append(
            {
                "frame": f"{width}x{height}",
                **{f"{stage}_ms": v for stage, v in medians.items()},
                "decode_ms": decode_ms,
                "overhead_ms": round(medians["preprocess"] + medians["postprocess"], 3),
                "overhead_with_decode_ms": round(medians["preprocess"] + medians["postprocess"] + decode_ms, 3),
                "detections_median": statistics.median(detections),
                "conf": conf,
            }
        )
    return rows


def _board_and_references(channels: int, height: int, width: int) -> tuple[np.ndarray, list[np.ndarray] | None]:
    """A synthetic uint8 ``[height, width]`` board, and for a 2-channel model its defect-free template as the
    (already aligned) reference of :meth:`Pipeline.detect`; None for a 1-channel model."""
    if channels == 1:
        return generate_board(height, width, np.random.default_rng(0))[0], None
    image, template = generate_board_pair(height, width, np.random.default_rng(0))[:2]
    return image, [template]


def bench_tta(loaded: LoadedModel, imgsz: int, iters: int) -> dict[str, dict[str, float]]:
    """Model time of one ``imgsz`` board frame through ``Runtime.infer`` in each test-time augmentation mode,
    timed interleaved: ``{mode: {"median_ms", "min_ms", ..., "paired_vs_none"}}`` (median per-round ratio)."""
    runtime, _ = _portable_runtime(loaded, imgsz)
    frame, references = _board_and_references(runtime.channels, imgsz, imgsz)
    batch = Pipeline(runtime).inputs([frame], references)[0]

    def run(mode: str) -> None:
        runtime.set_tta(mode)
        runtime.infer(batch)

    raw: dict[str, list[float]] = {}
    timings = measure_interleaved({mode: lambda m=mode: run(m) for mode in TTA_MODES}, iters, raw=raw)
    for mode in TTA_MODES:
        timings[mode]["paired_vs_none"] = round(paired_ratio(raw[mode], raw["none"]), 3)
    return timings


REGISTRATION_MOTION = (0.6, 4.5, -3.2)  # degrees, dx, dy (px): how far the bench's golden board sits from the frame


def registration_pair(size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(frame, reference)``, both uint8 ``[size, size]``: a synthetic defective board, and its defect-free template
    rotated and shifted by :data:`REGISTRATION_MOTION` (border 114), so registration has a real motion to find."""
    image, template = generate_board_pair(size, size, np.random.default_rng(seed))[:2]
    angle, dx, dy = REGISTRATION_MOTION
    matrix = cv2.getRotationMatrix2D(((size - 1) / 2, (size - 1) / 2), angle, 1.0)
    matrix[:, 2] += (dx, dy)
    return image, cv2.warpAffine(template, matrix, (size, size), flags=cv2.INTER_LINEAR, borderValue=PAD_VALUE)


def bench_registration(loaded: LoadedModel, imgsz: int, iters: int) -> dict[str, Any]:
    """Registration cost at ``imgsz x imgsz`` frames against the model, timed interleaved in the same rounds.

    Candidates: ``model`` (the TorchScript artifact as ``export`` writes it on this CPU, one pass of
    ``[1, in_channels, imgsz, imgsz]``), ``register_full`` (:func:`register` per frame: reference prepared and
    transform estimated every time), ``register_fixed`` (a :class:`Registrar` over one golden board with reuse
    off: transform estimated every frame) and ``register_reuse`` (the Registrar's cached transform, scored and
    kept). Returns the summaries, ``<candidate>_ratio`` (median per-round ratio to ``model``), the fraction of
    reuse calls that really reused, and the registration's ``score`` / ``ok`` on this pair.
    """
    artifact = cpu_artifact(loaded, imgsz, DEFAULT_LAYERS, onednn_available())
    x = torch.rand(1, model_channels(loaded.model), imgsz, imgsz)
    image, reference = registration_pair(imgsz)
    fixed = Registrar(reference, RegisterConfig(reuse=False))
    cached = Registrar(reference)
    first = cached(image)[1]  # primes the cache
    reused: list[bool] = []
    candidates = {
        "model": lambda: artifact(x),
        "register_full": lambda: register(reference, image),
        "register_fixed": lambda: fixed(image),
        "register_reuse": lambda: reused.append(cached(image)[1].reused),
    }
    raw: dict[str, list[float]] = {}
    with torch.inference_mode():
        timings = measure_interleaved(candidates, iters, raw=raw)
    result: dict[str, Any] = {"frame": f"{imgsz}x{imgsz}", "model_channels": model_channels(loaded.model)}
    result.update({"torch_threads": torch.get_num_threads(), "cv2_threads": cv2.getNumThreads(), **timings})
    for name in ("register_full", "register_fixed", "register_reuse"):
        result[f"{name}_ratio"] = round(paired_ratio(raw[name], raw["model"]), 4)
    result.update({"reused_fraction": round(sum(reused) / len(reused), 3), "score": round(first.score, 4), "ok": first.ok})
    return result
