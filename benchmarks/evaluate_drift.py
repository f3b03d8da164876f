"""Drift benchmark over the frame pipeline: multi-design streams, camera faults, both bundled models, the targets table.

    python -m benchmarks.evaluate_drift --threads 1          # both bundled models, their own baselines

Boards (``benchmarks/drift_streams.py``): the held-out json's boards and the training json's boards that
``calibrate --max-images 300`` does not take, i.e. boards the shipped baselines never saw. Streams take them design
by design in runs of 10-60 frames, in a random order of designs. Every frame goes through
:class:`~defect_detector.inspect.pipeline.Pipeline` as ``predict`` runs it (the golden-template model with each
board's golden image, registered; 2048x1536 frames of 6 boards tiled), and the drift monitor reads it as the inspector
feeds it: layer statistics, gray levels, and for the golden-template model the golden image's statistics (each DeepPCB
board has its own golden image: every frame is a changeover).

1. Clean: one stream of ``--frames`` boards (target: 0 alerts), and ``--large-frames`` composed 2048x1536 frames,
   cycled to 300 (target: 0 alerts).
2. Faults: per fault, ``--onsets`` streams (each its own design order): clean until frame 100, the fault from 100 to
   299, clean again to 359. Per onset: frames from onset to the first alert (the alerting frame included),
   ``recovered`` events while the fault lasts, frames to ``recovered`` after it ends, and whether the alert named the
   fault. Strong faults: defocus sigma 2, contrast x0.6, lighting -40%, 2% salt-and-pepper; mild: sigma 1, x0.8, -20%.
3. Cost: pipeline time per frame with and without the statistics in the model (alternating pairs), and the
   monitor's own work per frame (gray levels and blank check, golden image lookup, detector update).

Statistics are cached per model (``--cache``, keyed by the weights' tensors, not their baseline), so a model that only
got a new baseline is evaluated again in seconds. ``--calibrate`` builds the baseline from the cached calibration
boards instead of the one the weights carry (the same computation as ``calibrate``), to try monitor settings.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import logging
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.drift_streams import (
    MILD,
    STRONG,
    Board,
    add_run_arguments,
    calibration_split,
    coco_boards,
    collect,
    design_changes,
    design_stream,
    large_frames,
    monitor_config,
    write_results,
)
from defect_detector.core.config import MonitorConfig
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.runtime import Runtime
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, DEFAULT_WEIGHTS, load_checkpoint
from defect_detector.monitor.baseline import Baseline, calibrate
from defect_detector.monitor.drift import DriftDetector
from defect_detector.monitor.golden import Golden

logger = logging.getLogger("defect_detector.monitor")

ONSET, END, LENGTH = 100, 300, 360
TARGET_FRAMES = 30
MILD_TARGET_FRAMES = 60
LARGE_STREAM = 300


@dataclasses.dataclass
class Streams:
    """Per-frame monitor inputs of one model: ``stats[variant]`` ``[N, L, 2]``, ``levels[variant]`` ``[N, 4]`` (and
    ``"golden"``) for the ``N`` pool boards; the same for the large frames; the calibration boards'."""

    data: dict[str, np.ndarray]
    relative: bool

    def inputs(self, prefix: str, frames: Sequence[int], variants: Sequence[str]) -> tuple[np.ndarray, list[Golden] | None, np.ndarray]:
        """(stats ``[T, L, 2]``, goldens or None, levels ``[T, 4]``) of a stream: frame ``t`` is item ``frames[t]`` in
        variant ``variants[t]``; each item's golden image is its own (key: the item)."""
        stats = np.stack([self.data[f"{prefix}_{v}"][i] for i, v in zip(frames, variants)])
        levels = np.stack([self.data[f"{prefix}_levels_{v}"][i] for i, v in zip(frames, variants)])
        goldens = None
        if self.relative:
            g, gl = self.data[f"{prefix}_golden"], self.data[f"{prefix}_levels_golden"]
            goldens = [Golden(f"{prefix}:{i}", g[i], gl[i]) for i in frames]
        return stats, goldens, levels


def run(baseline: Baseline, cfg: MonitorConfig, inputs: tuple) -> tuple[list[Any], list[float]]:
    """Feed a stream to a new detector frame by frame; (events, per-frame scores)."""
    stats, goldens, levels = inputs
    detector = DriftDetector(baseline, cfg)
    events: list[Any] = []
    scores: list[float] = []
    for t in range(len(stats)):
        golden = goldens[t] if goldens is not None else None
        events += detector.update(stats[t], t, "benchmark", golden=golden if baseline.relative else None, levels=levels[t])
        scores.append(detector.score)
    return events, scores


def evaluate_fault(
    streams: Streams, boards: Sequence[Board], baseline: Baseline, cfg: MonitorConfig, fault: str, seeds: Sequence[int]
) -> dict:
    """Per onset (one stream per seed): frames to alert, recovered while faulty, frames to recovered after, cause named."""
    name = fault.removesuffix("_mild")
    delays: list[int | None] = []
    back: list[int | None] = []
    flaps = early = named = changes = 0
    reasons: list[str] = []
    for seed in seeds:
        frames = design_stream(boards, LENGTH, seed)
        changes += sum(ONSET <= t < END for t in design_changes(boards, frames))
        variants = [fault if ONSET <= t < END else "clean" for t in range(LENGTH)]
        events, _ = run(baseline, cfg, streams.inputs("pool", frames, variants))
        alerts = [e for e in events if e.event == "drift"]
        early += sum(e.frame < ONSET for e in alerts)
        during = [e for e in alerts if ONSET <= e.frame < END]
        delays.append(during[0].frame - ONSET + 1 if during else None)
        first = during[0].frame if during else END
        flaps += sum(e.event == "recovered" and first <= e.frame < END for e in events)
        after = [e.frame for e in events if e.event == "recovered" and e.frame >= END]
        back.append(after[0] - END + 1 if after and during else None)
        named += bool(during) and during[0].cause == name
        reasons += [during[0].reason] if during else []
    found = [d for d in delays if d is not None]
    return {
        "frames_to_alert": delays,
        "median": statistics.median(found) if found else None,
        "max": max(found) if found else None,
        "alerted_within_30": sum(d <= TARGET_FRAMES for d in found),
        "alerted_within_60": sum(d <= MILD_TARGET_FRAMES for d in found),
        "recovered_while_faulty": flaps,
        "frames_to_recovered": back,
        "recovered_within_30": sum(r is not None and r <= TARGET_FRAMES for r in back),
        "cause_named": named,
        "alerts_before_onset": early,
        "design_changes_during_fault": changes,
        "reason": reasons[0] if reasons else None,
    }


def evaluate(streams: Streams, boards: Sequence[Board], baseline: Baseline, cfg: MonitorConfig, args: argparse.Namespace) -> dict:
    """Clean streams and every fault (module docstring)."""
    clean = design_stream(boards, args.frames, 0)
    events, scores = run(baseline, cfg, streams.inputs("pool", clean, ["clean"] * len(clean)))
    result: dict[str, Any] = {
        "clean": {
            "frames": len(clean),
            "design_changes": len(design_changes(boards, clean)),
            "alerts": [e.to_dict() for e in events if e.event == "drift"],
            "changeovers": sum(e.event == "changeover" for e in events),
            "max_score": round(max(scores), 3),
        }
    }
    if "large_clean" in streams.data:
        count = len(streams.data["large_clean"])
        frames = [t % count for t in range(max(LARGE_STREAM, count))]
        events, scores = run(baseline, cfg, streams.inputs("large", frames, ["clean"] * len(frames)))
        size = f"{args.large_size[1]}x{args.large_size[0]}"
        result["large"] = {
            "size": size,
            "frames": len(frames),
            "distinct": count,
            "alerts": [e.to_dict() for e in events if e.event == "drift"],
        }
        result["large"]["max_score"] = round(max(scores), 3)
    seeds = [101 + k for k in range(args.onsets)]
    faults = [*STRONG, *(f"{n}_mild" for n in MILD)]
    result["faults"] = {fault: evaluate_fault(streams, boards, baseline, cfg, fault, seeds) for fault in faults}
    return result


def weights_fingerprint(path: Path) -> str:
    """A digest of the model's tensors (not its baseline or settings): statistics cached under it stay valid when
    only the baseline changes."""
    loaded = load_checkpoint(path)
    digest = hashlib.sha256()
    for key, tensor in sorted(loaded.model.state_dict().items()):
        digest.update(key.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def load_streams(pipeline: Pipeline, weights: Path, calib: Sequence[Board], pool: Sequence[Board], args: argparse.Namespace) -> Streams:
    """Collect (or read from ``--cache``) every statistic the streams need."""
    height, width = args.large_size
    key = f"{weights.stem}_{weights_fingerprint(weights)}_{len(calib)}_{len(pool)}_{args.large_frames}x{width}x{height}"
    path = Path(args.cache) / f"drift_{key}.npz" if args.cache else None
    if path is not None and path.is_file():
        data = dict(np.load(path))
        logger.info("statistics read from %s", path)
    else:
        large = large_frames(pool, args.large_frames, 1234) if args.large_frames else []
        data = collect(pipeline, calib, pool, large, progress=not args.quiet, large_size=args.large_size)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(path, **data)
    return Streams(data, pipeline.runtime.channels == 2)


def baseline_from(streams: Streams, runtime: Runtime, source: str) -> Baseline:
    """The baseline ``calibrate`` would write for the cached calibration boards."""
    data = streams.data
    faults = {k.removeprefix("calib_faults_"): v for k, v in data.items() if k.startswith("calib_faults_")}
    golden = [data["calib_golden"]] if streams.relative else None
    info = {"weights": str(runtime.path), "kind": runtime.kind, "class_names": list(runtime.class_names)}
    return calibrate(
        [data["calib_clean"]],
        runtime.layer_names,
        runtime.imgsz,
        info,
        source,
        faults,
        golden=golden,
        image_levels=data["calib_levels_clean"],
    )


def print_table(name: str, result: dict) -> None:
    """The targets table of one model."""
    clean, large = result["clean"], result.get("large")
    print(f"\n== {name}: baseline {result['baseline']}")
    print(
        f"clean: {len(clean['alerts'])} alerts in {clean['frames']} frames ({clean['design_changes']} design changes, "
        f"{clean['changeovers']} changeovers; max score {clean['max_score']})"
    )
    if large:
        alerts, frames = len(large["alerts"]), large["frames"]
        distinct, top = large["distinct"], large["max_score"]
        print(f"clean {large['size']}, tiled: {alerts} alerts in {frames} frames ({distinct} distinct; max score {top})")
    head = (
        f"{'fault':22s} {'alerted':>8s} {'median':>6s} {'max':>4s} {'rec.faulty':>10s} {'rec.<=30':>8s} {'cause':>5s} {'early':>5s}  reason"
    )
    print(head + "\n" + "-" * len(head))
    for fault, r in result["faults"].items():
        n = len(r["frames_to_alert"])
        within = r["alerted_within_60"] if fault.endswith("_mild") else r["alerted_within_30"]
        print(
            f"{fault:22s} {within:>4d}/{n:<3d} {_fmt(r['median']):>6s} {_fmt(r['max']):>4s} {r['recovered_while_faulty']:>10d} "
            f"{r['recovered_within_30']:>4d}/{n:<3d} {r['cause_named']:>3d}/{n} {r['alerts_before_onset']:>5d}  {r['reason'] or '-'}"
        )
    cost = result.get("cost")
    if cost:
        print(
            f"cost per frame ({cost['frame']}): pipeline {cost['frame_ms']:.1f} ms; statistics in the model x{cost['stats_ratio']:.4f}; "
            f"monitor work {cost['monitor_ms']:.3f} ms; total {cost['percent']:.2f}% of frame time"
            + (f"; a new golden image: one more model pass ({cost['golden_ms']:.1f} ms)" if cost.get("golden_ms") else "")
        )


def _size(text: str) -> tuple[int, int]:
    """``WxH`` -> (H, W)."""
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WxH, got {text!r}") from None
    return height, width


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:g}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.evaluate_drift", description=__doc__.splitlines()[0])
    parser.add_argument("--weights", action="append", help="checkpoint (repeatable; default: both bundled models)")
    parser.add_argument("--train", default="data/deeppcb/deeppcb_train.json", help="training json: calibration and stream boards")
    parser.add_argument("--val", default="data/deeppcb/deeppcb_val.json", help="held-out json: stream boards")
    parser.add_argument("--calibration", type=int, default=300, help="training boards calibrate takes (--max-images; default 300)")
    parser.add_argument("--max-boards", type=int, help="use at most this many stream boards (smoke tests)")
    parser.add_argument("--frames", type=int, default=2000, help="clean stream length (default 2000)")
    parser.add_argument("--onsets", type=int, default=8, help="streams per fault (default 8)")
    parser.add_argument("--large-frames", type=int, default=150, help="distinct 2048x1536 frames (0: none; default 150)")
    parser.add_argument("--large-size", type=_size, default=(1536, 2048), help="large frame size WxH (default 2048x1536)")
    parser.add_argument("--calibrate", action="store_true", help="baseline from the cached calibration boards, not the weights'")
    parser.add_argument("--cost-repeats", type=int, default=40, help="alternating pairs for the cost (0: skip)")
    add_run_arguments(parser, "drift_eval.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from benchmarks.drift_cost import measure_cost

    cfg = monitor_config(args)
    train, val = coco_boards(args.train), coco_boards(args.val)
    chosen, rest = calibration_split(train, args.calibration)
    calib, pool = [train[i] for i in chosen], val + [train[i] for i in rest]
    pool = pool[: args.max_boards] if args.max_boards else pool
    results = {}
    for weights in [Path(w) for w in (args.weights or [DEFAULT_WEIGHTS, DEFAULT_REFERENCE_WEIGHTS])]:
        runtime = Runtime.load(weights, device="cpu", threads=args.threads)
        pipeline = Pipeline(runtime)
        started = time.perf_counter()
        streams = load_streams(pipeline, weights, calib, pool, args)
        if args.calibrate:
            baseline = baseline_from(streams, runtime, f"{args.train} ({len(calib)} images, cached)")
        elif runtime.meta.get("baseline"):
            baseline = Baseline.from_dict(runtime.meta["baseline"], where=f"{weights} baseline")
        else:
            parser.error(f"{weights} carries no drift baseline: pass --calibrate")
        result = evaluate(streams, pool, baseline, cfg, args)
        result["baseline"] = f"{'relative to the golden image, ' if baseline.relative else ''}{baseline.source}"
        result["seconds"] = round(time.perf_counter() - started, 1)
        if args.cost_repeats:
            result["cost"] = measure_cost(pipeline, baseline, cfg, pool[0], args.cost_repeats)
        results[str(weights)] = result
        print_table(weights.name, result)
    write_results(args.out, cfg, results)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(main())
