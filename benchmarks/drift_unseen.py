"""Drift on board designs the baseline never saw: clean runs in name order, leave-one-design-out, faulted segments.

    python -m benchmarks.drift_unseen --threads 1
    python -m benchmarks.drift_unseen --threads 1 --weights defect_detector/weights/deeppcb_ref.pt \\
        --extra data/photo/holdout_val/annotations.json --extra data/photo/train_val/annotations.json

A line inspects boards in the order they come, one design after another, not shuffled. Boards (COCO jsons with their
golden ``reference`` entries; ``benchmarks/drift_streams.py``): the training json's boards (golden images listed as
images of their own, paired with themselves, left out, as ``data/bundled_model/recalibrate.sh`` leaves them out),
the held-out json's (designs no model was trained or calibrated on), and any ``--extra`` json (e.g. rendered looks).
A board's design is its first folder (DeepPCB: the group). Each stream is read by a new monitor, every frame through
the pipeline as ``predict`` runs it (the golden-template model against each board's golden image, registered):

1. The weights' own baseline, clean streams: all boards (training then held-out designs) in file-name order; the
   held-out boards in name order, twice (so the line reference, 256 frames, is set and then read on them); each
   ``--extra`` json in name order, twice. Reported: the highest score against ``z_warn``, frames at or above it, alerts.
2. Leave one design out (``--logo``): per training design, a baseline calibrated like ``calibrate --max-images 300``
   on the other designs' boards, then a stream of that design's boards and the held-out ones, in name order.
3. Faults on unseen designs: per fault (``drift_streams.STRONG`` and ``MILD``), ``--onsets`` streams of the held-out
   boards in name order (each from its own starting board, cycled), the fault from frame 100 to 299 of 360. Reported:
   streams alerted within 30 frames (mild: 60), the most frames it took, alerts before the onset.

Statistics are cached per model and json (``--cache``), so trying a monitor setting takes seconds.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.drift_streams import (
    MILD,
    STRONG,
    VARIANTS,
    Board,
    StatsCollector,
    add_run_arguments,
    coco_boards,
    monitor_config,
    write_results,
)
from benchmarks.evaluate_drift import END, LENGTH, ONSET, Streams, run, weights_fingerprint
from defect_detector.core.config import MonitorConfig
from defect_detector.data.dataset import evenly_spaced
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.runtime import Runtime
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, DEFAULT_WEIGHTS
from defect_detector.monitor.baseline import Baseline, calibrate

logger = logging.getLogger("defect_detector.monitor")

CALIBRATION = 300


def boards_of(ann_file: str | Path) -> list[Board]:
    """The boards of a json (``coco_boards``: design = folder), golden images paired with themselves left out."""
    return [b for b in coco_boards(ann_file) if b.golden is None or Path(b.golden) != Path(b.image)]


def name_order(boards: Sequence[Board]) -> list[int]:
    """Indices of ``boards`` sorted by file name (as a folder of frames is read)."""
    return sorted(range(len(boards)), key=lambda i: Path(boards[i].image).name)


def statistics(collector: StatsCollector, boards: Sequence[Board], variants: dict, key: str, cache: str, quiet: bool) -> dict:
    """``{variant: [N, L, 2], "levels_<variant>": [N, 4], "golden", "levels_golden"}`` of ``boards`` (cached by ``key``)."""
    path = Path(cache) / f"unseen_{key}.npz" if cache else None
    if path is not None and path.is_file():
        return dict(np.load(path))
    data = collector.boards(boards, variants, key, progress=not quiet)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, **data)
    return data


def clean_stream(baseline: Baseline, cfg: MonitorConfig, streams: Streams, prefix: str, frames: Sequence[int]) -> dict:
    """One clean stream: frames, highest score, frames at or above ``z_warn``, alerts ``[frame, severity]``."""
    events, scores = run(baseline, cfg, streams.inputs(prefix, frames, ["clean"] * len(frames)))
    alerts = [[e.frame, e.severity] for e in events if e.event == "drift"]
    top = int(np.argmax(scores))
    flagged = int(sum(s >= cfg.z_warn for s in scores))
    return {"frames": len(frames), "max_score": round(scores[top], 3), "at": top, "flagged": flagged, "alerts": alerts}


def fault_streams(baseline: Baseline, cfg: MonitorConfig, streams: Streams, prefix: str, order: Sequence[int], onsets: int) -> dict:
    """Per fault: streams alerted within 30 frames (mild: 60) of ``onsets``, the most frames it took, alerts before onset."""
    out = {}
    for fault in [*STRONG, *(f"{n}_mild" for n in MILD)]:
        delays, early = [], 0
        for k in range(onsets):
            start = k * len(order) // onsets
            frames = [order[(start + t) % len(order)] for t in range(LENGTH)]
            variants = [fault if ONSET <= t < END else "clean" for t in range(LENGTH)]
            events, _ = run(baseline, cfg, streams.inputs(prefix, frames, variants))
            alerts = [e.frame for e in events if e.event == "drift"]
            early += sum(f < ONSET for f in alerts)
            during = [f for f in alerts if ONSET <= f < END]
            delays.append(during[0] - ONSET + 1 if during else None)
        limit = 60 if fault.endswith("_mild") else 30
        found = [d for d in delays if d is not None]
        out[fault] = {"alerted": sum(d <= limit for d in found), "streams": onsets, "max": max(found, default=None), "early": early}
    return out


def left_out(runtime: Runtime, train: Sequence[Board], data: dict, relative: bool) -> dict[str, tuple[Baseline, list[int]]]:
    """Per training design: (a baseline calibrated on ``CALIBRATION`` boards of the other designs, that design's boards)."""
    out = {}
    for design in sorted({b.design for b in train}):
        others = [i for i, b in enumerate(train) if b.design != design]
        chosen = [others[j] for j in evenly_spaced(len(others), CALIBRATION)]
        golden = [data["golden"][chosen]] if relative else None
        levels = data["levels_clean"][chosen]
        baseline = calibrate([data["clean"][chosen]], runtime.layer_names, runtime.imgsz, golden=golden, image_levels=levels)
        out[design] = (baseline, [i for i, b in enumerate(train) if b.design == design])
    return out


def evaluate(weights: Path, args: argparse.Namespace, cfg: MonitorConfig) -> dict[str, Any]:
    """Every stream of one model (module docstring)."""
    runtime = Runtime.load(weights, device="cpu", threads=args.threads)
    if not runtime.meta.get("baseline"):
        raise SystemExit(f"{weights} carries no drift baseline")
    baseline = Baseline.from_dict(runtime.meta["baseline"], where=f"{weights} baseline")
    collector, relative = StatsCollector(Pipeline(runtime)), runtime.channels == 2
    tag = f"{weights.stem}_{weights_fingerprint(weights)}"
    train, val = boards_of(args.train), boards_of(args.val)
    train, val = (train[: args.max_boards], val[: args.max_boards]) if args.max_boards else (train, val)
    faults = {k: v for k, v in VARIANTS.items() if args.onsets or v is None}
    data = {"train": statistics(collector, train, {"clean": None}, f"{tag}_train{len(train)}", args.cache, args.quiet)}
    data["val"] = statistics(collector, val, faults, f"{tag}_val{len(val)}_{len(faults)}", args.cache, args.quiet)
    extras = {Path(e).parent.name or Path(e).stem: boards_of(e) for e in args.extra}
    for name, boards in extras.items():
        boards = boards[: args.max_boards] if args.max_boards else boards
        extras[name] = boards
        variants = faults if args.extra_faults else {"clean": None}
        data[name] = statistics(collector, boards, variants, f"{tag}_{name}{len(boards)}_{len(variants)}", args.cache, args.quiet)
    merged = {f"{p}_{k}": v for p, part in data.items() for k, v in part.items()}
    both = {k: np.concatenate([data["train"][k], data["val"][k]]) for k in data["train"]}
    merged.update({f"all_{k}": v for k, v in both.items()})
    streams = Streams(merged, relative)
    result: dict[str, Any] = {"baseline": baseline.source, "z_warn": cfg.z_warn, "clean": {}}
    result["clean"]["all designs, name order"] = clean_stream(baseline, cfg, streams, "all", name_order([*train, *val]))
    result["clean"]["held-out designs, name order x2"] = clean_stream(baseline, cfg, streams, "val", name_order(val) * 2)
    for name, boards in extras.items():
        result["clean"][f"{name}, name order x2"] = clean_stream(baseline, cfg, streams, name, name_order(boards) * 2)
    if args.logo:
        for design, (own, members) in left_out(runtime, train, data["train"], relative).items():
            frames = sorted(members, key=lambda i: Path(train[i].image).name) + [len(train) + i for i in name_order(val)]
            result["clean"][f"{design} left out of calibration, then held-out"] = clean_stream(own, cfg, streams, "all", frames)
    if args.onsets:
        result["faults"] = {"held-out": fault_streams(baseline, cfg, streams, "val", name_order(val), args.onsets)}
        if args.extra_faults:
            for name, boards in extras.items():
                result["faults"][name] = fault_streams(baseline, cfg, streams, name, name_order(boards), args.onsets)
    return result


def print_table(name: str, result: dict) -> None:
    """The clean streams and the faults of one model."""
    print(f"\n== {name}: baseline {result['baseline']}; z_warn {result['z_warn']:g}")
    for stream, r in result["clean"].items():
        head = f"{stream:52s} {r['frames']:5d} frames  max score {r['max_score']:6.2f} (frame {r['at']})"
        print(f"{head}  >= z_warn: {r['flagged']:3d}  alerts: {r['alerts'] or 'none'}")
    for where, faults in result.get("faults", {}).items():
        line = ", ".join(f"{f} {r['alerted']}/{r['streams']} (max {r['max']}, early {r['early']})" for f, r in faults.items())
        print(f"faults on {where}: {line}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.drift_unseen", description=__doc__.splitlines()[0])
    parser.add_argument("--weights", action="append", help="checkpoint (repeatable; default: both bundled DeepPCB models)")
    parser.add_argument("--train", default="data/deeppcb/deeppcb_train.json", help="training json (default: DeepPCB's)")
    parser.add_argument("--val", default="data/deeppcb/deeppcb_val.json", help="held-out json: designs never seen")
    parser.add_argument("--extra", action="append", default=[], help="another json streamed clean in name order (repeatable)")
    parser.add_argument("--extra-faults", action="store_true", help="also run the fault streams on each --extra json")
    parser.add_argument("--logo", action="store_true", help="leave each training design out of calibration in turn")
    parser.add_argument("--onsets", type=int, default=8, help="fault streams per fault (0: no faults; default 8)")
    parser.add_argument("--max-boards", type=int, help="at most this many boards per json (smoke tests)")
    add_run_arguments(parser, "drift_unseen.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    cfg = monitor_config(args)
    results = {}
    for weights in [Path(w) for w in (args.weights or [DEFAULT_WEIGHTS, DEFAULT_REFERENCE_WEIGHTS])]:
        results[str(weights)] = evaluate(weights, args, cfg)
        print_table(weights.name, results[str(weights)])
    write_results(args.out, cfg, results)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(main())
