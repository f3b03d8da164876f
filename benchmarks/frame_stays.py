"""The way of a frame through the package, counted (issue 57): its stays and returns from ``Inspector.run``.

``Inspector.run`` inspects a folder of one DeepPCB sample with the bundled golden-template weights, after a first run
that warms everything up. Every call into a package function that takes the frame along is recorded in order: a call
with an argument that is the SOURCE string, the opened source, a ``Frame``, a frame record (``Prepared``,
``Inspection``) or a list of them; the record's own accessors (``refused``, ``golden_key``, ``to_json``) are reading it,
not a step of its way, and are left out. A *stay* is a file entered (consecutive calls in one file are one stay); a
*return* is a stay in a file the way already left.

    python -m benchmarks.frame_stays [--json OUT]

prints the count and the way, one stay a line. The rule is this script's: a reading by hand that follows array
arguments too counts more.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import defect_detector
from defect_detector.core.io import atomic_write_json
from defect_detector.inspect.inspector import Inspector
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "samples"
PACKAGE = Path(defect_detector.__file__).resolve().parent
CARRIERS = ("Frame", "Prepared", "Inspection")
RECORDS = ("Prepared", "Inspection")


def _carries(value: Any, source: str, nested: bool = False) -> bool:
    if value is source or type(value).__name__ in CARRIERS or "Source" in type(value).__name__:
        return True
    return not nested and isinstance(value, (list, tuple)) and any(_carries(v, source, True) for v in list(value)[:3])


def way(source: str, run: Any) -> list[tuple[str, str]]:
    """``(file relative to the package, function)`` of each stay of ``run()`` (which inspects ``source``)."""
    stays: list[tuple[str, str]] = []

    def profile(frame: FrameType, event: str, _: Any) -> None:
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(str(PACKAGE)):
            return
        if type(frame.f_locals.get("self")).__name__ in RECORDS:
            return
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if any(_carries(frame.f_locals.get(n), source) for n in names):
            where = str(Path(code.co_filename).relative_to(PACKAGE))
            if not stays or stays[-1][0] != where:
                stays.append((where, code.co_name))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return stays


def count(stays: Sequence[tuple[str, str]]) -> dict[str, int]:
    """``{"stays", "returns", "files"}`` of a way (:func:`way`)."""
    left: set[str] = set()
    returns = 0
    for i, (where, _) in enumerate(stays):
        returns += where in left
        if i:
            left.add(stays[i - 1][0])
    return {"stays": len(stays), "returns": returns, "files": len({w for w, _ in stays})}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.frame_stays", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the count and the way here")
    args = parser.parse_args(argv)
    if args.json and not Path(args.json).resolve().parent.is_dir():
        parser.error(f"--json {args.json}: its folder does not exist")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "boards"
        folder.mkdir()
        board = sorted((SAMPLES / "deeppcb").glob("*_test.jpg"))[0]
        shutil.copy(board, folder / board.name)
        source = str(folder)
        with Inspector.load(DEFAULT_REFERENCE_WEIGHTS, reference=SAMPLES / "golden", device="cpu", threads=1, monitor=False) as inspector:
            inspector.run(source, save_json=str(Path(tmp) / "warm.json"))
            stays = way(source, lambda: inspector.run(source, save_json=str(Path(tmp) / "det.json")))
    counted = count(stays)
    print(f"{counted['stays']} stays, {counted['returns']} returns, {counted['files']} files")
    for where, function in stays:
        print(f"  {where} {function}")
    if args.json:
        try:
            atomic_write_json(args.json, {**counted, "way": [list(s) for s in stays]})
        except OSError as exc:
            print(f"frame_stays: error: --json {args.json}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
