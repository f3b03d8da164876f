"""Drift benchmark: false alerts on clean streams, frames-to-alert after simulated camera faults.

    python -m benchmarks.evaluate_drift --data data/deeppcb/deeppcb_val.json   # the bundled model and its baseline

1. The baseline: the one the weights carry, or (``--baseline-data``) one calibrated here on clean frames of
   that json (``--baseline-max`` images spread evenly over the file, in file order; ``FAULT_FRAMES`` of them,
   spread likewise, are also run with each simulated fault, so alerts can name their cause).
2. (a) Stream the clean frames of ``--data`` in file order, repeated to ``--frames`` frames, and
   count drift alerts (all false). (b) For each fault of ``monitor/faults.py``, stream clean frames,
   switch to faulted versions of the same frames at an onset frame (``--onsets`` onsets spread over
   one pass of the data, each after ``window + reference`` clean frames so the line reference
   exists) for ``--fault-frames`` frames, then back to clean frames. Per onset: the faulted frames
   until the first alert (the alerting frame included), whether a ``recovered`` came while the fault
   lasted, the clean frames until ``recovered`` after it ended, and whether the alert named the
   fault's cause. A fault present from frame 0 (no line reference yet: only the baseline test) too.
3. Latency: model forward (640x640, batch 1) with and without an ActivationMonitor in alternating
   back-to-back pairs (median of the per-pair ratios), and the detector's own update time.

The model runs once per distinct image and fault; streams reuse the cached statistics. Results are
printed as a table and written to ``--out`` (JSON). Scores are also recorded with alerting disabled
(``headroom``), so thresholds can be re-chosen from one run: clean maxima must stay below
``z_warn`` and fault maxima within 30 frames above it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from defect_detector.core.config import ModelConfig, MonitorConfig
from defect_detector.core.constants import DEEPPCB_CLASSES, DEFAULT_LAYERS
from defect_detector.core.io import atomic_write_json
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.data.images import load_image_gray
from defect_detector.data.letterbox import letterbox
from defect_detector.model.checkpoint import DEFAULT_WEIGHTS, load_checkpoint
from defect_detector.model.detector import build_model
from defect_detector.monitor import faults
from defect_detector.monitor.baseline import FAULT_FRAMES, Baseline, calibrate, fault_statistics
from defect_detector.monitor.drift import DriftDetector
from defect_detector.monitor.hooks import ActivationMonitor

logger = logging.getLogger("defect_detector.monitor")

TARGET_FRAMES_TO_ALERT = 30
TARGET_CLEAN_FRAMES = 2000
_NO_ALERTS = 1e9


def load_model(weights: str | None, seed: int = 0) -> tuple[nn.Module, dict[str, Any]]:
    """The eval-mode model: ``weights``, else the bundled weights, else a random init (``seed``) when neither exists."""
    if weights is not None:
        loaded = load_checkpoint(weights)
        return loaded.model, {"weights": str(loaded.path), "trained": True, "metrics": loaded.metrics, "baseline": loaded.baseline}
    if DEFAULT_WEIGHTS.is_file():
        loaded = load_checkpoint(None)
        return loaded.model, {"weights": str(loaded.path), "trained": True, "metrics": loaded.metrics, "baseline": loaded.baseline}
    torch.manual_seed(seed)
    logger.warning("no --weights and no bundled weights (%s): using a randomly initialised model", DEFAULT_WEIGHTS)
    return build_model(ModelConfig(), len(DEEPPCB_CLASSES)).eval(), {"weights": None, "trained": False, "seed": seed}


def image_paths(ann_file: str, images_root: str | None, max_images: int | None = None) -> list[Path]:
    """Image files of a COCO json in image-id order; ``max_images`` spread evenly over them."""
    dataset = CocoDetectionDataset(ann_file, images_root, DEEPPCB_CLASSES, 640)
    paths = [dataset.images_root / dataset.coco.imgs[i]["file_name"] for i in dataset.image_ids]
    if max_images is not None and max_images < len(paths):
        keep = sorted({int(i) for i in np.linspace(0, len(paths) - 1, max_images).round()})
        paths = [paths[i] for i in keep]
    return paths


def frame_stats(
    model: nn.Module,
    monitor: ActivationMonitor,
    frames: Sequence[np.ndarray],
    imgsz: int,
    batch: int,
    desc: str,
) -> np.ndarray:
    """Layer statistics of uint8 ``[H, W]`` frames (letterboxed to ``imgsz``) -> float64 ``[N, L, 2]``."""
    out: list[np.ndarray] = []
    with torch.inference_mode():
        for start in tqdm(range(0, len(frames), batch), desc=desc, unit="batch", leave=False):
            canvases = [letterbox(f, imgsz)[0] for f in frames[start : start + batch]]
            x = torch.from_numpy(np.stack(canvases)).unsqueeze(1).float().div_(255.0)
            model(x)
            out.append(monitor.stats().double().numpy())
    return np.concatenate(out)


def run_stream(
    baseline: Baseline, cfg: MonitorConfig, clean: np.ndarray, faulted: np.ndarray | None, onset: int, length: int, end: int | None = None
) -> tuple[list[Any], list[float]]:
    """Stream ``length`` frames: ``faulted[t % N]`` for ``onset <= t < end`` (``end`` None: to the end), else
    ``clean[t % N]``. Returns (events, scores)."""
    detector = DriftDetector(baseline, cfg)
    events: list[Any] = []
    scores: list[float] = []
    n = len(clean)
    for t in range(length):
        fault = faulted is not None and onset <= t and (end is None or t < end)
        events += detector.update((faulted if fault else clean)[t % n], t, "benchmark")
        scores.append(detector.score)
    return events, scores


def first_event(events: list[Any], kind: str, start: int, stop: int | None = None) -> int | None:
    """Frames from ``start`` until the first ``kind`` event at or after it (that frame included; before ``stop``), or None."""
    frames = [e.frame for e in events if e.event == kind and e.frame >= start and (stop is None or e.frame < stop)]
    return frames[0] - start + 1 if frames else None


def evaluate_fault(
    baseline: Baseline, cfg: MonitorConfig, clean: np.ndarray, faulted: np.ndarray, onsets: list[int], duration: int, name: str
) -> dict[str, Any]:
    """Per onset: frames to alert, recovered while faulty, frames to recovered after the fault, cause named."""
    quiet = dataclasses.replace(cfg, z_warn=_NO_ALERTS, z_alert=_NO_ALERTS, z_clear=None)
    delays: list[int | None] = []
    recoveries: list[int | None] = []
    flaps = false_before = named = 0
    reached: list[float] = []
    reasons: list[str] = []
    for onset in onsets:
        end = onset + duration
        events, _ = run_stream(baseline, cfg, clean, faulted, onset, end + TARGET_FRAMES_TO_ALERT * 2, end)
        false_before += sum(e.event == "drift" and e.frame < onset for e in events)
        delays.append(first_event(events, "drift", onset, end))
        flaps += sum(e.event == "recovered" and onset <= e.frame < end for e in events)
        recoveries.append(first_event(events, "recovered", end))
        alerts = [e for e in events if e.event == "drift" and onset <= e.frame < end]
        named += bool(alerts) and alerts[0].cause == name
        reasons += [a.reason for a in alerts][:1]
        _, scores = run_stream(baseline, quiet, clean, faulted, onset, onset + TARGET_FRAMES_TO_ALERT)
        reached.append(max(scores[onset:]))
    found = [d for d in delays if d is not None]
    back = [r for r in recoveries if r is not None]
    events, _ = run_stream(baseline, cfg, clean, faulted, 0, duration)
    return {
        "onsets": onsets,
        "frames_to_alert": delays,
        "detected": len(found),
        "detected_within_target": sum(d <= TARGET_FRAMES_TO_ALERT for d in found),
        "median": statistics.median(found) if found else None,
        "max": max(found) if found else None,
        "recovered_while_faulty": flaps,
        "frames_to_recovered": recoveries,
        "recovered_within_target": sum(r <= TARGET_FRAMES_TO_ALERT for r in back),
        "cause_named": named,
        "false_alerts_before_onset": false_before,
        "from_frame_0": first_event(events, "drift", 0),
        "headroom_min_score_30_frames": round(min(reached), 3),
        "reason": reasons[0] if reasons else None,
    }


def measure_overhead(model: nn.Module, imgsz: int, repeats: int, baseline: Baseline, cfg: MonitorConfig) -> dict[str, float]:
    """Forward latency ``[1, 1, imgsz, imgsz]`` without and with an ActivationMonitor (``stats()`` included).

    The two run as ``repeats`` back-to-back pairs, alternating which goes first, so load from other
    processes hits both alike; ``hooks_ratio`` is the median of the per-pair ratios. Also the median
    time of one ``DriftDetector.update`` (host copy included).
    """
    x = torch.rand(1, 1, imgsz, imgsz)
    plain: list[float] = []
    hooked: list[float] = []
    ratios: list[float] = []
    monitor = ActivationMonitor(model)
    monitor.detach()
    with torch.inference_mode():
        for _ in range(3):
            model(x)
        for i in range(repeats):
            times = {}
            for attached in (False, True) if i % 2 == 0 else (True, False):
                if attached:
                    monitor.attach()
                start = time.perf_counter()
                model(x)
                if attached:
                    monitor.stats()
                times[attached] = time.perf_counter() - start
                monitor.detach()
            plain.append(times[False])
            hooked.append(times[True])
            ratios.append(times[True] / times[False])
        monitor.attach()
        model(x)
        stats = monitor.stats()[0]
        monitor.detach()
        detector = DriftDetector(baseline, cfg)
        updates: list[float] = []
        for t in range(500):
            start = time.perf_counter()
            detector.update(stats, t)
            updates.append(time.perf_counter() - start)
    without = statistics.median(plain)
    update = statistics.median(updates)
    hooks_ratio = statistics.median(ratios)
    return {
        "repeats": repeats,
        "forward_ms_without": round(1000 * without, 3),
        "forward_ms_with_monitor": round(1000 * statistics.median(hooked), 3),
        "hooks_ratio": round(hooks_ratio, 4),
        "detector_update_ms": round(1000 * update, 4),
        "total_ratio": round(hooks_ratio + update / without, 4),
    }


FaultFn = Callable[[np.ndarray, int], np.ndarray]


def fault_functions() -> dict[str, FaultFn]:
    """Each fault at its default strength; salt-and-pepper noise differs per image (seeded by its index)."""
    out: dict[str, FaultFn] = {}
    for name, fn in faults.FAULTS.items():
        if fn is faults.salt_and_pepper:
            out[name] = lambda img, i: faults.salt_and_pepper(img, rng=np.random.default_rng(i))
        else:
            out[name] = lambda img, i, fn=fn: fn(img)
    return out


def _fault_stats(model: nn.Module, monitor: ActivationMonitor, paths: Sequence[Path], args: argparse.Namespace) -> dict[str, np.ndarray]:
    """``Baseline.faults`` of calibration images, letterboxed as :func:`frame_stats` does."""
    tensors = [torch.from_numpy(letterbox(load_image_gray(p), args.imgsz)[0]).unsqueeze(0).float().div_(255.0) for p in paths]

    def forward(x: torch.Tensor) -> torch.Tensor:
        model(x)
        return monitor.stats()

    with torch.inference_mode():
        return fault_statistics(forward, tensors, len(monitor.layer_names), args.batch)


def print_table(result: dict[str, Any]) -> None:
    clean = result["clean"]
    print(f"\nmodel: {result['model']['description']}")
    print(f"baseline: {result['baseline']['count']} frames of {result['baseline']['source']}")
    print(f"monitor config: {result['monitor_config']}")
    print(
        f"clean stream: {clean['frames']} frames of {clean['distinct_images']} held-out images -> {clean['false_alerts']} false alerts "
        f"(max score {clean['headroom_max_score']:.2f}; calibration replay max {_fmt(result['baseline']['replay_max_score'])}; "
        f"z_warn {result['monitor_config']['z_warn']})"
    )
    header = (
        f"{'fault':16s} {'detected<=30':>12s} {'median':>7s} {'max':>5s} {'from 0':>7s} {'min score@30':>12s} "
        f"{'rec. faulty':>11s} {'rec.<=30':>8s} {'cause':>6s}  reason"
    )
    print(header)
    print("-" * len(header))
    for name, r in result["faults"].items():
        n = len(r["onsets"])
        print(
            f"{name:16s} {r['detected_within_target']:>5d}/{n:<6d} {_fmt(r['median']):>7s} {_fmt(r['max']):>5s} "
            f"{_fmt(r['from_frame_0']):>7s} {r['headroom_min_score_30_frames']:>12.2f} {r['recovered_while_faulty']:>11d} "
            f"{r['recovered_within_target']:>4d}/{n:<3d} {r['cause_named']:>3d}/{n:<2d}  {r['reason'] or '-'}"
        )
    lat = result["latency"]
    if not lat:
        return
    print(
        f"latency (batch 1, {result['imgsz']}x{result['imgsz']}, {lat['repeats']} alternating pairs, medians): "
        f"{lat['forward_ms_without']:.2f} ms without monitor, {lat['forward_ms_with_monitor']:.2f} ms with "
        f"(x{lat['hooks_ratio']:.4f}); detector update {lat['detector_update_ms']:.3f} ms; total x{lat['total_ratio']:.4f}"
    )


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:g}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.evaluate_drift", description=__doc__.splitlines()[0])
    parser.add_argument("--weights", help="checkpoint (default: the bundled weights; a random init if there are none)")
    parser.add_argument(
        "--baseline-data", help="COCO json of clean calibration frames (training split; default: use the baseline the weights carry)"
    )
    parser.add_argument("--baseline-images", help="images folder for --baseline-data (default: its info.images_root)")
    parser.add_argument("--baseline-max", type=int, default=300, help="calibration images, spread evenly over the file (default 300)")
    parser.add_argument("--data", required=True, help="COCO json of held-out clean frames to stream (validation split)")
    parser.add_argument("--images", help="images folder for --data")
    parser.add_argument("--data-max", type=int, help="use this many --data images, spread evenly (default: all)")
    parser.add_argument("--frames", type=int, default=TARGET_CLEAN_FRAMES, help="clean stream length (default 2000)")
    parser.add_argument("--onsets", type=int, default=8, help="fault onsets per fault type (default 8)")
    parser.add_argument("--fault-frames", type=int, default=200, help="faulty frames after each onset (default 200)")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads")
    parser.add_argument("--latency-repeats", type=int, default=100, help="with/without pairs for the latency ratio (0: skip)")
    parser.add_argument("--monitor-config", help="YAML with drift thresholds (see monitor/service.py)")
    parser.add_argument("--out", default="drift_eval.json", help="JSON results (default drift_eval.json)")
    parser.add_argument("--save-stats", help="also save the per-frame statistics (calibration, clean, each fault) to this .npz")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    from defect_detector.monitor.setup import load_monitor_config

    cfg = load_monitor_config(args.monitor_config) if args.monitor_config else MonitorConfig()
    model, model_info = load_model(args.weights)
    model_info["description"] = model_info["weights"] or "randomly initialised TinyDetector (no trained weights available)"
    monitor = ActivationMonitor(model, DEFAULT_LAYERS)

    embedded = model_info.pop("baseline", None)
    quiet = dataclasses.replace(cfg, z_warn=_NO_ALERTS, z_alert=_NO_ALERTS)
    if args.baseline_data:
        calib_paths = image_paths(args.baseline_data, args.baseline_images, args.baseline_max)
        calib = frame_stats(model, monitor, [load_image_gray(p) for p in calib_paths], args.imgsz, args.batch, "calibration")
        faults_of = _fault_stats(model, monitor, calib_paths[:: max(1, len(calib_paths) // FAULT_FRAMES)][:FAULT_FRAMES], args)
        baseline = calibrate(
            [calib], monitor.layer_names, imgsz=args.imgsz, model_info=model_info, source=args.baseline_data, faults=faults_of
        )
        _, replay = run_stream(baseline, quiet, calib, None, 0, max(len(calib), cfg.window + cfg.reference) * 2)
        replay_max = round(max(replay[cfg.window :]), 3)
    elif embedded is not None:
        baseline, calib, replay_max = Baseline.from_dict(embedded, where="the weights' baseline"), None, None
    else:
        parser.error("the weights carry no drift baseline: give --baseline-data")

    val_paths = image_paths(args.data, args.images, args.data_max)
    val_images = [load_image_gray(p) for p in val_paths]
    clean = frame_stats(model, monitor, val_images, args.imgsz, args.batch, "clean")
    n = len(clean)
    length = max(args.frames, n)
    events, _ = run_stream(baseline, cfg, clean, None, 0, length)
    _, clean_scores = run_stream(baseline, quiet, clean, None, 0, length)
    warmup = cfg.window + cfg.reference
    onsets = [warmup + 8 + int(k * n / args.onsets) for k in range(args.onsets)]
    fault_results = {}
    cached = {"clean": clean} if calib is None else {"calibration": calib, "clean": clean}
    for name, fn in fault_functions().items():
        cached[name] = frame_stats(model, monitor, [fn(img, i) for i, img in enumerate(val_images)], args.imgsz, args.batch, name)
        fault_results[name] = evaluate_fault(baseline, cfg, clean, cached[name], onsets, args.fault_frames, name)
    if args.save_stats:
        np.savez(args.save_stats, layers=np.array(monitor.layer_names), **cached)
    monitor.detach()
    latency = measure_overhead(model, args.imgsz, args.latency_repeats, baseline, cfg) if args.latency_repeats > 0 else {}

    false_alerts = [e.to_dict() for e in events if e.event == "drift"]
    result = {
        "model": model_info,
        "imgsz": args.imgsz,
        "threads": torch.get_num_threads(),
        "monitor_config": dataclasses.asdict(cfg),
        "baseline": {
            "source": baseline.source,
            "count": baseline.count,
            "layers": baseline.layer_names,
            "replay_max_score": replay_max,
        },
        "clean": {
            "data": args.data,
            "distinct_images": n,
            "frames": length,
            "false_alerts": len(false_alerts),
            "false_alert_events": false_alerts[:20],
            "headroom_max_score": round(max(clean_scores), 3),
        },
        "faults": fault_results,
        "latency": latency,
    }
    result["targets"] = {
        "zero_false_alerts_on_2000_clean_frames": length >= TARGET_CLEAN_FRAMES and not false_alerts,
        "every_fault_alerts_within_30_frames": all(r["detected_within_target"] == len(r["onsets"]) for r in fault_results.values()),
        "no_recovered_while_faulty": all(r["recovered_while_faulty"] == 0 for r in fault_results.values()),
        "recovered_within_30_frames_after": all(r["recovered_within_target"] == len(r["onsets"]) for r in fault_results.values()),
        "every_cause_named": all(r["cause_named"] == len(r["onsets"]) for r in fault_results.values()),
        "monitor_overhead_below_3_percent": bool(latency) and latency["hooks_ratio"] < 1.03,
    }
    atomic_write_json(args.out, json.loads(json.dumps(result, default=float)))
    print_table(result)
    print(f"targets: {result['targets']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
