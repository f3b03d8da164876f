"""``defect-detector average``: a model soup: the mean of fine-tunes of one parent."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    """The ``average`` subcommand."""
    p = sub.add_parser("average", help="inference checkpoint whose weights are the mean of fine-tunes of one parent (a model soup)")
    p.add_argument("weights", nargs="+", help="two or more checkpoints of one architecture (runs/A/weights/best.pt ...)")
    p.add_argument("--out", required=True)
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override for the result, e.g. eval.f1_conf=0.4 (repeatable)")


def run(args: argparse.Namespace) -> None:
    from defect_detector.core.io import atomic_torch_save
    from defect_detector.model.checkpoint import average_checkpoints, load_checkpoint

    ckpt = average_checkpoints(args.weights, args.set or [])
    atomic_torch_save(ckpt, args.out)
    load_checkpoint(args.out)  # the written file loads with weights_only=True into its model
    print(f"wrote {args.out} ({Path(args.out).stat().st_size / 1e6:.2f} MB): mean of {len(args.weights)} checkpoints' weights")
    if args.set:
        print(f"config set: {', '.join(args.set)}")
