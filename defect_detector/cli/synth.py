"""``defect-detector synth``: write synthetic boards with all six defect types, DeepPCB pairs rendered as
photographs, or defects painted on golden images."""

from __future__ import annotations

import argparse
from typing import Any

from defect_detector.cli.errors import CliError


def add_parser(sub: Any) -> None:
    """The ``synth`` subcommand."""
    p = sub.add_parser(
        "synth",
        help="write synthetic PCB boards, photograph-like renders of a dataset's pairs (--render) "
        "or defects painted on golden images (--golden)",
    )
    p.add_argument("--out", required=True, help="output folder (images and annotations.json)")
    p.add_argument("--n", type=int, default=32, help="number of boards (--golden: boards per golden image)")
    p.add_argument("--size", default="640x640", help="WIDTHxHEIGHT, e.g. 2048x1536 (synthetic boards)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--golden", default=None, help="paint defects on these golden images (a folder or one image)")
    p.add_argument("--defects", type=int, default=4, help="--golden: defects per board (at most)")
    p.add_argument("--render", default=None, help="render the (board, golden) pairs of this COCO json as photographs")
    p.add_argument("--family", default="holdout", choices=("train", "holdout"), help="--render: look family")
    p.add_argument("--paint", type=int, default=0, help="--render: defects painted on each rendered board")
    p.add_argument("--scale", type=float, default=1.0, help="--render: pixels per layout pixel (1-4)")


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError as exc:
        raise CliError(f"--size must look like WIDTHxHEIGHT, e.g. 2048x1536, got {text!r}") from exc
    return width, height


def run(args: argparse.Namespace) -> None:
    from defect_detector.data.photo_sets import golden_files, write_painted_set, write_rendered_set
    from defect_detector.data.synth import write_synthetic_dataset

    if args.golden and args.render:
        raise CliError("give --golden or --render, not both")
    if args.n < 1 or args.defects < 1 or args.paint < 0 or not 1.0 <= args.scale <= 4.0:
        got = f"{args.n}, {args.defects}, {args.paint}, {args.scale}"
        raise CliError(f"need --n >= 1, --defects >= 1, --paint >= 0 and --scale in [1, 4], got {got}")
    try:
        if args.golden:
            ann = write_painted_set(golden_files(args.golden), args.out, args.n, args.defects, args.seed)
        elif args.render:
            ann = write_rendered_set(args.render, args.out, args.family, args.paint, args.scale, args.seed)
        else:
            width, height = _size(args.size)
            if min(width, height) < 64:
                raise CliError(f"need both sides >= 64, got --size {args.size}")
            ann = write_synthetic_dataset(args.out, args.n, height, width, args.seed)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    print(f"wrote {ann}")
