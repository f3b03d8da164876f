"""``defect-detector teach``: bring a new design in from its golden images alone (``inspect/teach.py``)."""

from __future__ import annotations

import argparse
from typing import Any

from defect_detector.cli.errors import CliError


def add_parser(sub: Any) -> None:
    """The ``teach`` subcommand."""
    p = sub.add_parser(
        "teach",
        help="bring a new design in from its golden images: calibrate its own operating point on line captures of it, "
        "fine-tune on painted defects only when that pays",
    )
    p.add_argument("--golden", required=True, help="the design's golden image, or a folder of golden images")
    p.add_argument("--weights", help="golden-template weights to start from (default: photo_ref.pt, trained on photographs too)")
    p.add_argument("--minutes", type=float, default=10.0, help="the whole command ends within this many minutes (default: 10)")
    p.add_argument("--out", required=True, help="the taught weights (.pt), which predict takes as they are")
    p.add_argument("--held", type=int, default=8, help="painted boards per golden image scored before and after (default: 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="torch CPU threads")


def _point(p: Any) -> str:
    return f"{p.caught:.1%} of painted defects caught, {p.false_calls:.2f} false calls per defect-free board (score >= {p.conf:.3f})"


def _captures(boards: dict[str, int]) -> str:
    """The captures the figures are over: all of them, or how many of each set were refused (not inspected) and so left out."""
    clean, held = boards["clean"], boards["held"]
    if not boards["clean_refused"] and not boards["held_refused"]:
        return f"{clean} defect-free and {held} painted line captures"
    return (
        f"{clean - boards['clean_refused']} of {clean} defect-free and {held - boards['held_refused']} of {held} painted line captures "
        f"({boards['clean_refused']} of {clean} and {boards['held_refused']} of {held} captures refused, not inspected: the figures "
        "below leave them out; the reasons are in the warnings above)"
    )


def run(args: argparse.Namespace) -> None:
    from defect_detector.inspect.teach import check_minutes, teach

    if args.held < 1:
        raise CliError(f"--held must be >= 1, got {args.held}")
    try:
        check_minutes(args.minutes)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    report = teach(args.golden, args.out, args.weights, args.minutes, args.held, args.seed, threads=args.threads)
    print(f"teach: {len(report.designs)} golden image(s) in {report.minutes:.1f} min, on {_captures(report.boards)}:")
    for d in report.designs:
        print(f"  {d.name}: {'taught' if d.taught else 'NOT taught (its frames keep their design warning)'}")
        print(f"    before (the weights' own point): {_point(d.before)}")
        print(f"    after  (its own point):          {_point(d.after)}")
    print(f"  {report.tuning}")
    if report.rehearsal is not None:
        print(f"  rehearsal boards (real DeepPCB defects): mAP@0.5 {report.rehearsal[0]:.3f} -> {report.rehearsal[1]:.3f}")
    print(f"  {report.baseline}")
    print(f"wrote {report.weights} (the boards and any run: {report.work})")
