"""``defect-detector calibrate``: a drift baseline from clean frames, through the frame pipeline (as ``predict`` sees them)."""

from __future__ import annotations

import argparse
from typing import Any

from defect_detector.cli.errors import CliError, check_imgsz


def add_parser(sub: Any) -> None:
    p = sub.add_parser("calibrate", help="drift baseline: layer statistics of the model over clean frames, as predict measures them")
    p.add_argument("--weights", help="checkpoint or artifact: .pt2, TorchScript, ONNX, int8 ONNX (default: the bundled DeepPCB model)")
    frames = p.add_argument_group("clean frames: a COCO json, or a folder of good frames (no annotations needed)")
    frames.add_argument("--data", help="COCO json of clean images (for a golden-template model, with their reference entries)")
    frames.add_argument("--images", help="with --data: its images root (default: from the json); alone: a folder or glob of good frames")
    frames.add_argument("--reference", help="with a folder of frames and a golden-template model: the golden image, or a folder of them")
    p.add_argument("--imgsz", type=int, help="input size for checkpoints (default: the model's)")
    p.add_argument("--max-images", type=int, help="use this many frames, spread evenly over the file or folder")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--out", required=True, help="baseline JSON to write (carry it in the weights with `strip --baseline`)")


def run(args: argparse.Namespace) -> None:
    from defect_detector.jobs.calibrate import run_calibrate

    check_imgsz(args.imgsz)
    if args.data is None and args.images is None:
        raise CliError("give the clean frames: --data ANN.json, or --images DIR (a folder of good frames)")
    if args.data is not None and args.reference is not None:
        raise CliError("--reference goes with --images DIR; a COCO json names its golden images in its reference entries")
    baseline = run_calibrate(
        args.weights, args.data, args.images, args.out, args.imgsz, args.max_images, args.batch, reference=args.reference
    )
    against = ", each relative to its golden image" if baseline.relative else ""
    print(f"wrote {args.out}: {len(baseline.layer_names)} layers from {baseline.count} frames{against}")
    print(f"carry it in the weights: defect-detector strip WEIGHTS --baseline {args.out} --out WEIGHTS_WITH_BASELINE")
