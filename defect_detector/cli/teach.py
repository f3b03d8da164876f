"""``defect-detector teach``: learn a new board design from its golden images alone (``inspect/teach.py``)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from defect_detector.cli.errors import CliError


def add_parser(sub: Any) -> None:
    """The ``teach`` subcommand."""
    p = sub.add_parser(
        "teach",
        help="learn a new design from its golden images alone: fine-tune a golden-template model on defects painted on them",
    )
    p.add_argument("--golden", required=True, help="the design's golden image, or a folder of golden images")
    p.add_argument("--weights", help="golden-template weights to start from (default: photo_ref.pt, trained on photographs too)")
    p.add_argument("--minutes", type=float, default=20.0, help="the whole command ends within this many minutes (default: 20)")
    p.add_argument("--out", required=True, help="the taught weights (.pt), which predict takes as they are")
    p.add_argument("--held", type=int, default=8, help="painted boards per golden image held back to score before and after (default: 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="torch CPU threads")


def _line(name: str, m: dict[str, Any]) -> str:
    return (
        f"{name}: {m['caught']:.1%} of {m['defects']} defects caught, {m['false_calls_per_image']:.2f} false calls per board "
        f"(score >= {m['conf']:g}), mAP@0.5 {m['map50']:.4f}"
    )


def run(args: argparse.Namespace) -> None:
    from defect_detector.inspect.teach import teach

    if args.held < 1:
        raise CliError(f"--held must be >= 1, got {args.held}")
    if not math.isfinite(args.minutes) or args.minutes <= 0:
        raise CliError(f"--minutes must be a finite number > 0, got {args.minutes}")
    report = teach(args.golden, args.out, args.weights, args.minutes, args.held, args.seed, threads=args.threads)
    held = report.before["images"]
    print(f"taught {len(report.designs)} golden image(s) in {report.minutes:.1f} min; scored on {held} held-back painted boards:")
    print("  " + _line("before", report.before))
    print("  " + _line("after ", report.after))
    print(f"wrote {report.weights} (the painted boards and the run: {report.work})")
