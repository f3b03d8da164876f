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
a golden reference to a frame (``align/register.py``), fully and with the cached transform reused, against
the model's one-pass TorchScript latency in the same rounds.
"""

from __future__ import annotations

import argparse
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.bench_stages import bench_pipeline, bench_registration, bench_tta, cpu_artifact
from benchmarks.timing import measure_interleaved, paired_ratio
from defect_detector.core.config import load_config
from defect_detector.core.constants import DEFAULT_LAYERS
from defect_detector.core.io import atomic_write_json
from defect_detector.export import DeployModel, model_channels, quiet_jit
from defect_detector.export.onednn import onednn_available
from defect_detector.model.checkpoint import DEFAULT_WEIGHTS, LoadedModel, load_checkpoint
from defect_detector.model.detector import build_model
from defect_detector.model.summary import count_flops

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


def _add_yolov8n(models: dict[str, torch.nn.Module], imgsz: int) -> dict[str, Any]:
    """Add the traced YOLOv8n (and its channels-last twin) to ``models`` when ultralytics is installed; its info."""
    built = build_yolov8n(imgsz)
    if built is None:
        return {"available": False, "reason": "ultralytics is not installed"}
    models["yolov8n"], yolo_flops = built
    models["yolov8n_channels_last"] = build_yolov8n(imgsz, channels_last=True)[0]
    return {"available": True, "gflops": yolo_flops / 1e9, "source": "ultralytics yolov8n.yaml, random init, fused, traced"}


def _add_paired_ratios(timings: dict[str, dict[str, Any]], raw: dict[str, list[float]]) -> None:
    """Add the paired ratios to ``timings``: each ``*_stats`` against its ``*_nostats``, and ``torchscript_stats`` against the
    portable graph and YOLOv8n where they ran (``raw``: per-call times by candidate)."""
    for kind in ("eager", "torchscript"):
        timings[f"{kind}_stats"]["paired_vs_nostats"] = round(paired_ratio(raw[f"{kind}_stats"], raw[f"{kind}_nostats"]), 4)
    if "torchscript_portable" in raw:
        fusion_ratio = paired_ratio(raw["torchscript_stats"], raw["torchscript_portable"])
        timings["torchscript_stats"]["paired_vs_portable"] = round(fusion_ratio, 4)
    for name in ("yolov8n", "yolov8n_channels_last"):
        if name in raw:
            timings["torchscript_stats"][f"paired_vs_{name}"] = round(paired_ratio(raw["torchscript_stats"], raw[name]), 4)


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
        "torchscript_stats": cpu_artifact(loaded, imgsz, DEFAULT_LAYERS, fusion),
        "torchscript_nostats": cpu_artifact(loaded, imgsz, (), fusion),
    }
    if fusion:
        models["torchscript_portable"] = cpu_artifact(loaded, imgsz, DEFAULT_LAYERS, False)
    yolo_info = _add_yolov8n(models, imgsz) if yolo else {"available": False}
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
            _add_paired_ratios(timings, raw)
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


def _derived(rows: list[dict[str, Any]], registration: dict[str, Any], batches: Sequence[int], threads: Sequence[int]) -> dict[str, Any]:
    """The ratios :func:`run_bench` reports against the targets: the statistics' overhead (%), oneDNN fusion, ours vs
    YOLOv8n per thread count, and registration vs the model (``rows``: the latency rows of :func:`bench_models`)."""
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
    return derived


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
    derived = _derived(rows, registration, batches, threads)
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
