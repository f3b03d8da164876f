"""Latency and throughput benchmark of the deployed model (and, optionally, a traced YOLOv8n for scale).

Candidates run interleaved (one call of each per round) so that background load affects them alike:

- ``eager_model``: the detector as trained (no decode, no statistics), eager;
- ``eager_stats`` / ``eager_nostats``: :class:`DeployModel` (fused, channels_last, decode) with / without the
  monitored layers' statistics, eager;
- ``torchscript_stats`` / ``torchscript_nostats``: the exported artifact (saved and loaded back) with / without
  the statistics, as ``export`` writes it on this machine (oneDNN conv + SiLU kernels where available);
- ``torchscript_portable`` (only where oneDNN fusion is available): the ``export --portable`` artifact, with
  statistics, which also runs on CUDA;
- ``yolov8n`` / ``yolov8n_channels_last`` (batch 1, with ``yolo=True``): ultralytics' YOLOv8n built from
  ``yolov8n.yaml`` (random weights, no download), fused, traced and frozen at the same size with 3 channels,
  as ultralytics exports it (NCHW) and in channels_last like ours.

Latencies are per call (a whole batch); throughput is images per second. Every candidate of ours gets the
model's input channels (``in_channels``: 2 for a reference model, the image and its registered reference).
The pipeline part times the frame pipeline's (:meth:`Pipeline.detect`) preprocess (validate, letterbox, tensor; for a reference
model the reference too) and postprocess (NMS, un-letterbox) stages on synthetic boards, plus box decoding
(which the artifact runs inside the model). The registration part (:func:`bench_registration`) times aligning
a golden reference to a frame (``data/register.py``), fully and with the cached transform reused, against
the model's one-pass TorchScript latency in the same rounds.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from defect_detector.core.config import load_config
from defect_detector.core.constants import DEFAULT_LAYERS, PAD_VALUE
from defect_detector.core.io import atomic_write_json
from defect_detector.data.register import RegisterConfig, Registrar, register
from defect_detector.data.synth import generate_board, generate_board_pair
from defect_detector.export import DeployModel, artifact_bytes, checkpoint_meta, model_channels, quiet_jit, trace_deploy_model
from defect_detector.export.onednn import onednn_available
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.runtime import Runtime
from defect_detector.model.checkpoint import DEFAULT_WEIGHTS, LoadedModel, load_checkpoint
from defect_detector.model.detector import build_model
from defect_detector.model.postprocess import decode
from defect_detector.model.summary import count_flops
from defect_detector.model.tta import TTA_MODES

TARGETS = {
    "yolo_ratio_max": 0.25,
    "stats_overhead_pct_max": 3.0,
    "pipeline_ms_max_640": 2.0,
    "registration_full_ratio_max": 0.25,
    "registration_reuse_ratio_max": 0.05,
}


def load_bench_model(weights: str | os.PathLike[str] | None, config: str | os.PathLike[str]) -> tuple[LoadedModel, str]:
    """The model to benchmark and a description: ``weights``, else the bundled weights, else a randomly
    initialised model of ``config``'s architecture (speed does not depend on the weight values)."""
    if weights is not None or DEFAULT_WEIGHTS.is_file():
        loaded = load_checkpoint(weights)
        return loaded, str(loaded.path)
    cfg = load_config(config)
    model = build_model(cfg.model, len(cfg.data.class_names)).eval()
    return LoadedModel(model, cfg, tuple(cfg.data.class_names), {}, Path(config)), f"random init of {config} (bundled weights not found)"


def measure_interleaved(
    candidates: dict[str, Callable[[], Any]], iters: int, warmup: int = 2, raw: dict[str, list[float]] | None = None
) -> dict[str, dict[str, float]]:
    """Time each callable ``iters`` times, one call of each per round; ``{name: {"median_ms", "p90_ms", "min_ms"}}``.
    ``raw``, when given, receives every call's time in ms, in round order, per name."""
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(iters):
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1000.0)
    if raw is not None:
        raw.update(times)
    return {name: _summary(values) for name, values in times.items()}


def paired_ratio(times: list[float], reference: list[float]) -> float:
    """Median over rounds of ``times[i] / reference[i]`` (two candidates timed in the same rounds): unlike a
    ratio of medians, it cancels the machine speeding up or slowing down between rounds."""
    return statistics.median(a / b for a, b in zip(times, reference))


def _summary(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return {"median_ms": round(statistics.median(ordered), 3), "p90_ms": round(p90, 3), "min_ms": round(ordered[0], 3), "n": len(ordered)}


def _artifact(loaded: LoadedModel, imgsz: int, layers: Sequence[str], cpu_fusion: bool) -> torch.jit.ScriptModule:
    """The TorchScript artifact as ``export`` writes it on the CPU (without the parity run), loaded back from bytes."""
    deploy = DeployModel(loaded.model, imgsz, layers, cpu_fusion=cpu_fusion).float().cpu()
    meta = checkpoint_meta(loaded, deploy, cpu_only=cpu_fusion)
    data = artifact_bytes(trace_deploy_model(deploy), meta)
    with quiet_jit():
        return torch.jit.load(io.BytesIO(data), map_location="cpu")


def build_yolov8n(imgsz: int, channels_last: bool = False) -> tuple[torch.jit.ScriptModule, int] | None:
    """YOLOv8n from ultralytics' ``yolov8n.yaml`` (no weights download), fused, traced and frozen at
    ``[1, 3, imgsz, imgsz]`` as ultralytics' TorchScript export does; with its FLOPs. None without ultralytics."""
    os.environ.setdefault("YOLO_OFFLINE", "1")
    try:
        from ultralytics import YOLO
    except ImportError:
        return None
    model = YOLO("yolov8n.yaml").model.eval()
    detect = model.model[-1]
    detect.export, detect.format = True, "torchscript"
    model = model.fuse(verbose=False)
    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.rand(1, 3, imgsz, imgsz)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(x)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    with torch.no_grad(), quiet_jit():
        traced = torch.jit.freeze(torch.jit.trace(model, x, strict=False, check_trace=False))
    return traced, int(counter.get_total_flops())


def bench_models(
    loaded: LoadedModel, imgsz: int, batches: Sequence[int], threads: Sequence[int], iters: int, yolo: bool
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Latency rows (one per candidate, batch and thread count) and the YOLOv8n info (None when not run).

    Our candidates run on random float32 ``[batch, in_channels, imgsz, imgsz]``, YOLOv8n on ``[1, 3, imgsz, imgsz]``."""
    flops = count_flops(loaded.model, imgsz)
    fusion = onednn_available()
    models: dict[str, torch.nn.Module] = {
        "eager_model": loaded.model.eval(),
        "eager_stats": DeployModel(loaded.model, imgsz, DEFAULT_LAYERS),
        "eager_nostats": DeployModel(loaded.model, imgsz, ()),
        "torchscript_stats": _artifact(loaded, imgsz, DEFAULT_LAYERS, fusion),
        "torchscript_nostats": _artifact(loaded, imgsz, (), fusion),
    }
    if fusion:
        models["torchscript_portable"] = _artifact(loaded, imgsz, DEFAULT_LAYERS, False)
    yolo_info: dict[str, Any] = {"available": False}
    if yolo:
        built = build_yolov8n(imgsz)
        if built is not None:
            models["yolov8n"], yolo_flops = built
            models["yolov8n_channels_last"] = build_yolov8n(imgsz, channels_last=True)[0]
            yolo_info = {"available": True, "gflops": yolo_flops / 1e9, "source": "ultralytics yolov8n.yaml, random init, fused, traced"}
        else:
            yolo_info["reason"] = "ultralytics is not installed"
    channels = model_channels(loaded.model)
    rows = []
    for n_threads in threads:
        torch.set_num_threads(n_threads)
        for batch in batches:
            x1 = torch.rand(batch, channels, imgsz, imgsz)  # ours: [B, in_channels, S, S]
            x3 = torch.rand(batch, 3, imgsz, imgsz)
            candidates = {}
            for name, model in models.items():
                if name.startswith("yolo"):
                    if batch == 1:
                        candidates[name] = lambda m=model, x=x3: m(x)
                else:
                    candidates[name] = lambda m=model, x=x1: m(x)
            n_iters = iters if batch == 1 else max(3, iters // 4)
            raw: dict[str, list[float]] = {}
            with torch.inference_mode():
                timings = measure_interleaved(candidates, n_iters, warmup=2 if batch == 1 else 1, raw=raw)
            for kind in ("eager", "torchscript"):
                timings[f"{kind}_stats"]["paired_vs_nostats"] = round(paired_ratio(raw[f"{kind}_stats"], raw[f"{kind}_nostats"]), 4)
            if "torchscript_portable" in raw:
                fusion_ratio = paired_ratio(raw["torchscript_stats"], raw["torchscript_portable"])
                timings["torchscript_stats"]["paired_vs_portable"] = round(fusion_ratio, 4)
            for name in ("yolov8n", "yolov8n_channels_last"):
                if name in raw:
                    timings["torchscript_stats"][f"paired_vs_{name}"] = round(paired_ratio(raw["torchscript_stats"], raw[name]), 4)
            for name, t in timings.items():
                model_flops = yolo_info.get("gflops", 0.0) * 1e9 if name.startswith("yolo") else flops
                rows.append(
                    {
                        "candidate": name,
                        "batch": batch,
                        "threads": n_threads,
                        **t,
                        "images_per_s": round(batch * 1000.0 / t["median_ms"], 2),
                        "gflops_per_s": round(model_flops * batch / (t["median_ms"] / 1000.0) / 1e9, 2),
                    }
                )
    return rows, yolo_info


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
    artifact = _artifact(loaded, imgsz, DEFAULT_LAYERS, onednn_available())
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


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _find(rows: list[dict[str, Any]], candidate: str, batch: int, threads: int) -> dict[str, Any] | None:
    return next((r for r in rows if r["candidate"] == candidate and r["batch"] == batch and r["threads"] == threads), None)


def run_bench(
    loaded: LoadedModel,
    description: str,
    imgsz: int = 640,
    batches: Sequence[int] = (1, 8),
    threads: Sequence[int] = (1, 2),
    iters: int = 20,
    yolo: bool = False,
    pipeline_sizes: Sequence[tuple[int, int]] = ((640, 640), (1536, 2048)),
) -> dict[str, Any]:
    """The whole benchmark as a JSON-ready dict: environment, FLOPs, latency rows, pipeline and TTA costs,
    ``registration`` (:func:`bench_registration`, at ``max(threads)`` torch threads) and derived ratios vs the
    targets (``derived["registration_ratio"]``: ``full`` / ``fixed`` / ``reuse`` time over the model's)."""
    threads_before = torch.get_num_threads()
    load_before = os.getloadavg()
    try:
        rows, yolo_info = bench_models(loaded, imgsz, batches, threads, iters, yolo)
        torch.set_num_threads(max(threads))
        pipeline = bench_pipeline(loaded, imgsz, pipeline_sizes, iters)
        tta = bench_tta(loaded, imgsz, max(3, iters // 4))
        registration = bench_registration(loaded, imgsz, iters)
    finally:
        torch.set_num_threads(threads_before)
    derived: dict[str, Any] = {"stats_overhead_pct": {}, "yolo_ratio": {}, "onednn_fusion_ratio": {}}
    derived["registration_ratio"] = {k: registration[f"register_{k}_ratio"] for k in ("full", "fixed", "reuse")}
    for n_threads in threads:
        for batch in batches:
            for kind in ("eager", "torchscript"):
                with_stats, without = _find(rows, f"{kind}_stats", batch, n_threads), _find(rows, f"{kind}_nostats", batch, n_threads)
                derived["stats_overhead_pct"][f"{kind}_b{batch}_t{n_threads}"] = {
                    **{stat: round(100.0 * (with_stats[stat] / without[stat] - 1.0), 2) for stat in ("median_ms", "min_ms")},
                    "paired": round(100.0 * (with_stats["paired_vs_nostats"] - 1.0), 2),
                }
            fused = _find(rows, "torchscript_stats", batch, n_threads)
            if "paired_vs_portable" in fused:
                derived["onednn_fusion_ratio"][f"b{batch}_t{n_threads}"] = round(fused["paired_vs_portable"], 3)
        ours = _find(rows, "torchscript_stats", 1, n_threads)
        for yolo_name in ("yolov8n", "yolov8n_channels_last"):
            other = _find(rows, yolo_name, 1, n_threads)
            if other is not None:
                ratios = {stat: round(ours[stat] / other[stat], 3) for stat in ("median_ms", "min_ms")}
                ratios["paired"] = round(ours[f"paired_vs_{yolo_name}"], 3)
                derived["yolo_ratio"][f"{yolo_name}_t{n_threads}"] = ratios
    return {
        "weights": description,
        "imgsz": imgsz,
        "gflops": round(count_flops(loaded.model, imgsz) / 1e9, 4),
        "params": sum(p.numel() for p in loaded.model.parameters()),
        "yolov8n": yolo_info,
        "environment": {
            "torch": torch.__version__,
            "cpu": _cpu_name(),
            "cpu_count": os.cpu_count(),
            "loadavg_before": [round(v, 2) for v in load_before],
            "loadavg_after": [round(v, 2) for v in os.getloadavg()],
            "note": "latencies are per call (whole batch); candidates were timed interleaved; on a loaded machine min_ms "
            "is the better estimate of the compute cost, median_ms of what a deployment sharing the CPU would see; "
            "'paired' is the median of the per-round ratios, which cancels drift in machine speed between rounds",
        },
        "latency": rows,
        "pipeline": pipeline,
        "tta": {"threads": max(threads), "modes": tta},
        "registration": registration,
        "derived": derived,
        "targets": TARGETS,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.bench``: print the latency table (and write ``--out``)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench", description=__doc__.splitlines()[0])
    p.add_argument("--weights", help="checkpoint (default: bundled model, else random init of --config)")
    p.add_argument("--config", default="configs/deeppcb.yaml", help="architecture used when no weights exist")
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--batches", default="1,8", help="comma-separated batch sizes")
    p.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    p.add_argument("--iters", type=int, default=20, help="timed calls per candidate at batch 1 (a quarter of that for larger batches)")
    p.add_argument("--yolo", action="store_true", help="also time a traced YOLOv8n from ultralytics' yolov8n.yaml (needs ultralytics)")
    p.add_argument(
        "--kinds",
        action="store_true",
        help="instead: every artifact kind (TorchScript, .pt2, ONNX float32, int8; YOLOv8n with --yolo) in one interleaved run "
        "at batch 1 and the last --threads count (benchmarks/bench_kinds.py)",
    )
    p.add_argument("--calib", help="--kinds: int8 calibration json (default: 8 synthetic boards)")
    p.add_argument("--calib-images", type=int, default=100, help="--kinds: int8 calibration frames (default 100)")
    p.add_argument("--keep", metavar="DIR", help="--kinds: export into DIR and keep the artifacts; a rerun reuses them")
    p.add_argument("--out", help="write the results JSON here")
    args = p.parse_args(argv)
    if args.kinds:
        _report_kinds(args)
    else:
        _report(args)
    return 0


def _report_kinds(args: argparse.Namespace) -> None:
    from benchmarks.bench_kinds import bench_kinds, print_kinds

    threads = int(args.threads.split(",")[-1])
    loaded, description = load_bench_model(args.weights, args.config)
    result = bench_kinds(loaded, args.imgsz, threads, args.iters, args.yolo, args.calib, args.calib_images, keep=args.keep)
    result["model"] = description
    print(f"model: {description}")
    print_kinds(result)
    if args.out:
        atomic_write_json(args.out, result)
        print(f"wrote {args.out}")


def _report(args: argparse.Namespace) -> None:

    def int_list(text: str, name: str) -> list[int]:
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError as exc:
            raise ValueError(f"{name} must be comma-separated integers, got {text!r}") from exc
        if not values or min(values) < 1:
            raise ValueError(f"{name} must list integers >= 1, got {text!r}")
        return values

    batches, threads = int_list(args.batches, "--batches"), int_list(args.threads, "--threads")

    loaded, description = load_bench_model(args.weights, args.config)
    result = run_bench(loaded, description, args.imgsz, batches, threads, args.iters, args.yolo)
    for row in result["latency"]:
        print(
            f"{row['candidate']:>22} b{row['batch']} t{row['threads']}: median {row['median_ms']:8.2f} ms  p90 {row['p90_ms']:8.2f} ms  "
            f"{row['images_per_s']:7.2f} img/s  {row['gflops_per_s']:6.2f} GFLOP/s"
        )
    for row in result["pipeline"]:
        print(
            f"pipeline {row['frame']}: preprocess {row['preprocess_ms']:.2f} ms, postprocess {row['postprocess_ms']:.2f} ms, "
            f"decode {row['decode_ms']:.2f} ms (inside the model)"
        )
    tta = result["tta"]
    print(
        f"test-time augmentation, model time per {args.imgsz}x{args.imgsz} frame at {tta['threads']} threads: "
        + ", ".join(f"{mode} {t['median_ms']:.1f} ms (x{t['paired_vs_none']:.2f})" for mode, t in tta["modes"].items())
    )
    print(f"drift statistics overhead (%): {result['derived']['stats_overhead_pct']}")
    if result["derived"]["onednn_fusion_ratio"]:
        print(f"latency ratio oneDNN-fused / portable artifact: {result['derived']['onednn_fusion_ratio']}")
    if result["derived"]["yolo_ratio"]:
        print(f"latency ratio ours/YOLOv8n at batch 1: {result['derived']['yolo_ratio']}")
    reg, target = result["registration"], result["targets"]
    print(
        f"registration of the reference at {reg['frame']} ({reg['torch_threads']} torch / {reg['cv2_threads']} OpenCV threads), "
        f"against one model pass of {reg['model']['median_ms']:.2f} ms: every frame {reg['register_full']['median_ms']:.2f} ms "
        f"(x{reg['register_full_ratio']:.3f}, target <= {target['registration_full_ratio_max']}), fixed golden board "
        f"{reg['register_fixed']['median_ms']:.2f} ms (x{reg['register_fixed_ratio']:.3f}), transform reused "
        f"{reg['register_reuse']['median_ms']:.2f} ms (x{reg['register_reuse_ratio']:.3f}, "
        f"target <= {target['registration_reuse_ratio_max']})"
    )
    if args.out:
        atomic_write_json(args.out, result)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    raise SystemExit(main())
