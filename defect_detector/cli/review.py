"""``defect-detector review export --db URL --out DIR``: the reviewed frames of a station database as a COCO training
set (``DIR/annotations.json``, images and golden images beside it) that ``train`` reads as is."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    """Register the ``review`` subcommand and its ``export`` action."""
    p = sub.add_parser("review", help="reviewed frames of a station database")
    actions = p.add_subparsers(dest="review_action", required=True)
    export = actions.add_parser(
        "export",
        help="write the fully reviewed frames as COCO: confirmed calls (corrected classes) and drawn misses, no false calls",
    )
    export.add_argument("--db", required=True, help="station database: a file path, sqlite:///PATH or postgresql://...")
    export.add_argument("--out", required=True, help="output folder: annotations.json, images/, references/")
    export.add_argument("--images", help="folder of the stored frames (default: beside a SQLite file, else the one the database names)")


def run(args: argparse.Namespace) -> None:
    """Export; ``ValueError`` / ``OSError`` with one line for bad input, a :class:`CliError` (exit 2, nothing written)
    when no frame is fully reviewed yet."""
    from defect_detector.cli.errors import CliError
    from defect_detector.core.safe_text import mask_secrets
    from defect_detector.station.export import export_review

    summary = export_review(args.db, args.out, images=args.images)
    skipped = ", ".join(f"{why} x{n}" for why, n in sorted(summary["skipped"].items())) or "none"
    if not summary["images"]:
        db = mask_secrets(args.db)
        raise CliError(
            f"nothing to export, nothing written: no frame of {db} is fully reviewed "
            f"({summary['verdicts']} verdicts on {summary['reviewed_frames']} frames, {summary['waiting']} calls waiting for review; "
            f"left out: {skipped}); a frame is exported once every call of it in the review queue has a defect or false-call "
            f"verdict (a skip keeps it out): review at defect-detector station --db {db}, then export again"
        )
    print(f"wrote {summary['annotations_file']}: {summary['images']} images, {summary['annotations']} annotations (left out: {skipped})")
    print(f"train on it: defect-detector train --config CONFIG data.train={summary['annotations_file']}")
