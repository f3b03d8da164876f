"""``defect-detector align BOARD --reference GOLDEN --out DIR``: the golden image registered into each board's pixels,
as ``predict --reference`` gives it to the model, for callers that run the model themselves (``jobs/registered.py``)."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

EXIT_HELP = (
    "exit 0: every pair registered; 3: some pair refused (its DIR/NAME.json says why, no DIR/NAME.png is written); "
    "2: bad input (one line on stderr)"
)


def add_parser(sub: Any) -> None:
    """The ``align`` subcommand."""
    p = sub.add_parser(
        "align",
        help="write each board's golden image registered into its pixels (and a JSON record), for Triton, ONNX and C++ callers",
        description="Registers the golden image into each board's pixels exactly as predict --reference does (registration, "
        "golden check, photometric fit, exposure and hidden-area screens) and writes DIR/NAME.png (the board's size: feed "
        "it with the board to an exported artifact) and DIR/NAME.json (geometry, score, photometric fit, or why the pair "
        f"was refused). {EXIT_HELP}.",
    )
    p.add_argument("board", help="a board image, or a folder or glob of them (NAME: the path relative to it, without its extension)")
    p.add_argument(
        "--reference",
        required=True,
        help="golden (defect-free) board: one image for every board, or a folder with each board's golden image under its "
        "relative path (else its file name), as predict --reference",
    )
    p.add_argument(
        "--out", required=True, help="the folder to write NAME.png and NAME.json into (outside the boards' and golden images' folders)"
    )
    p.add_argument(
        "--weights",
        help="the golden-template weights whose register settings, exposure and photometric range judge the pairs, as predict "
        "(default: the bundled ones, chosen per design as predict chooses them)",
    )


def run(args: argparse.Namespace) -> None:
    """Align every board; ``NotInspected`` (exit 3) after writing every record when some pair was refused."""
    from defect_detector.cli.errors import NotInspected
    from defect_detector.inspect.inspector import Inspector
    from defect_detector.jobs.registered import align_boards, open_boards

    refused: Counter[str] = Counter()
    total = 0
    boards = open_boards(args.board)  # checked before the weights load
    with Inspector.load(args.weights, reference=args.reference, device="cpu", threads=1, monitor=False) as inspector:  # no model runs
        for aligned in align_boards(inspector, boards, args.out):
            total += 1
            if aligned.refused:
                refusal = aligned.record["refusal"]
                refused[refusal["kind"]] += 1
                print(f"{aligned.name}: refused ({refusal['kind']}): {refusal['message']} -> {aligned.record_path}")
            else:
                print(f"{aligned.name}: wrote {aligned.image} and {aligned.record_path}")
    if refused:
        why = ", ".join(f"{kind} x{n}" for kind, n in sorted(refused.items()))
        words = "their records say why; no registered golden image was written for them"
        raise NotInspected(f"{sum(refused.values())} of {total} pairs refused ({why}): {words}")
