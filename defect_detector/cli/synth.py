"""``defect-detector synth``: write synthetic boards with all six defect types."""

from __future__ import annotations

import argparse
from typing import Any

from defect_detector.cli.errors import CliError


def add_parser(sub: Any) -> None:
    """The ``synth`` subcommand."""
    p = sub.add_parser("synth", help="write synthetic PCB boards with all six defect types and a COCO json")
    p.add_argument("--out", required=True, help="output folder (images/ and annotations.json)")
    p.add_argument("--n", type=int, default=32, help="number of boards")
    p.add_argument("--size", default="640x640", help="WIDTHxHEIGHT, e.g. 2048x1536")
    p.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> None:
    from defect_detector.data.synth import write_synthetic_dataset

    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError as exc:
        raise CliError(f"--size must look like WIDTHxHEIGHT, e.g. 2048x1536, got {args.size!r}") from exc
    if min(width, height) < 64 or args.n < 1:
        raise CliError(f"need --n >= 1 and both sides >= 64, got --n {args.n} --size {args.size}")
    ann = write_synthetic_dataset(args.out, args.n, height, width, args.seed)
    print(f"wrote {args.n} boards of {width}x{height} and {ann}")
