"""``defect-detector``: the dispatcher. Each subcommand is one module of this folder (``add_parser`` registers its
flags, ``run`` parses them into one call of the package and prints); this module is the error boundary.

Every command exits non-zero with one clear line on stderr for bad arguments, missing files or malformed data.
"""

from __future__ import annotations

import logging
import os
import sys

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

from defect_detector.cli import (  # noqa: E402
    average,
    calibrate,
    convert,
    demo,
    export,
    info,
    predict,
    review,
    station,
    strip,
    synth,
    train,
    val,
)
from defect_detector.cli.errors import CliError, error_line, is_expected  # noqa: E402
from defect_detector.cli.parser import build_parser  # noqa: E402

COMMANDS = {
    "convert": convert,
    "train": train,
    "val": val,
    "synth": synth,
    "strip": strip,
    "average": average,
    "calibrate": calibrate,
    "demo": demo,
    "info": info,
    "export": export,
    "predict": predict,
    "station": station,
    "review": review,
}


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; the error boundary: an expected failure (see ``cli/errors.py``) prints one line
    ``defect-detector CMD: error: <file>: <problem>`` and returns 2 (3 when frames were not inspected:
    ``NotInspected``), Ctrl-C returns 130."""
    args = build_parser(COMMANDS).parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        COMMANDS[args.command].run(args)
    except KeyboardInterrupt:
        print(f"defect-detector {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if not is_expected(exc, (CliError,)):
            raise
        print(f"defect-detector {args.command}: error: {error_line(exc)}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
