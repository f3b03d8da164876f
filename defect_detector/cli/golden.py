"""``defect-detector golden build BOARDS --out GOLDEN`` and ``golden verify GOLDEN BOARDS``: a golden image from several
good boards, and a golden image checked against them (``align/golden_build.py``)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    """Register the ``golden`` subcommand and its ``build`` and ``verify`` actions."""
    p = sub.add_parser("golden", help="build a golden image from several good boards, or verify one against them")
    actions = p.add_subparsers(dest="golden_action", required=True)
    build = actions.add_parser("build", help="the median of 3 or more good boards of one design, in the first board's pixels")
    build.add_argument("boards", help="a folder or glob of good boards of one design (3 or more; sorted by name, the first is the anchor)")
    build.add_argument("--out", required=True, help="the golden image to write (PNG: lossless)")
    verify = actions.add_parser("verify", help="where a golden image differs from what 3 or more good boards agree on")
    verify.add_argument("golden", help="the golden image")
    verify.add_argument("boards", help="a folder or glob of good boards of its design (3 or more)")


def run(args: argparse.Namespace) -> None:
    """Build or verify; ``ValueError`` / ``OSError`` with one line for bad input; a :class:`CliError` (exit 2) when the
    golden image differs from the boards."""
    import cv2

    from defect_detector.align.golden_build import build_golden, golden_disagreements, places_words
    from defect_detector.cli.errors import CliError
    from defect_detector.core.io import atomic_write_bytes
    from defect_detector.data.images import load_image_gray

    boards = _boards(args.boards)
    if args.golden_action == "build":
        golden, aligned = build_golden(boards)
        ok, encoded = cv2.imencode(".png", golden)
        if not ok:
            raise ValueError(f"{args.out}: cannot encode the golden image as PNG")
        atomic_write_bytes(args.out, encoded.tobytes())
        print(f"wrote {args.out}: the median of {len(aligned.names)} boards in {aligned.names[0]}'s pixels{_left_out(aligned)}")
        return
    found, aligned = golden_disagreements(load_image_gray(args.golden), boards)
    if found:
        where = places_words(found, 5)
        raise CliError(
            f"{args.golden} differs from what {len(aligned.names)} good boards agree on in {len(found)} places ({where}): it may "
            f"carry a defect of the board it was taken from; build one with defect-detector golden build {args.boards} --out GOLDEN.png"
        )
    print(f"{args.golden}: agrees with {len(aligned.names)} good boards{_left_out(aligned)}")


def _boards(source: str) -> list[tuple[str, Any]]:
    """``(name, gray uint8 [H, W])`` of every image of a folder or glob, by name."""
    from defect_detector.data.images import load_image_gray
    from defect_detector.inspect.sources import list_images, source_kind

    kind = source_kind(source)
    if kind not in ("folder", "glob"):
        raise ValueError(f"{source}: golden build and verify take a folder or glob of good boards, not a {kind}")
    return [(name, load_image_gray(path)) for path, name in list_images(source, kind)]


def _left_out(aligned: Any) -> str:
    if not aligned.left_out:
        return ""
    return f" (left out, not of its design: {', '.join(name for name, _ in aligned.left_out)})"
