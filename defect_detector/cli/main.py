"""``defect-detector``: the dispatcher. Each subcommand is one module of this folder (``add_parser`` registers its
flags, ``run`` parses them into one call of the package and prints); this module is the error boundary.

Every command exits non-zero with one clear line on stderr for bad arguments, missing files or malformed data.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

from defect_detector.cli import (  # noqa: E402
    STARTED,
    align,
    average,
    calibrate,
    convert,
    demo,
    export,
    golden,
    info,
    predict,
    review,
    station,
    strip,
    synth,
    teach,
    train,
    val,
)
from defect_detector.cli.errors import CliError, error_line, is_expected  # noqa: E402
from defect_detector.cli.parser import build_parser, parse_args  # noqa: E402
from defect_detector.core.errors import Stopped  # noqa: E402
from defect_detector.core.safe_text import install_masking, mask_secrets  # noqa: E402

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
    "teach": teach,
    "golden": golden,
    "align": align,
}


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; the error boundary: an expected failure (see ``cli/errors.py``) prints one line
    ``defect-detector CMD: error: <file>: <problem>`` and returns 2 (3 when frames were not inspected:
    ``NotInspected``), Ctrl-C returns 130 (``predict``: SIGTERM 143, SIGHUP 129, each after writing the outputs of
    the frames so far)."""
    started = STARTED if argv is None else time.perf_counter()  # the shell command's start, its imports included
    args = parse_args(build_parser(COMMANDS), argv)
    args.started = started
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    install_masking()  # no password, user info or query key of a URL (--db, --webhook, a stream) in any log line
    try:
        COMMANDS[args.command].run(args)
    except KeyboardInterrupt as exc:  # Ctrl-C, or core.errors.Stopped (predict: SIGTERM, SIGHUP, SIGINT after its outputs)
        signum = getattr(exc, "signum", signal.SIGINT)
        how = f"stopped by {exc.name}" if isinstance(exc, Stopped) else "interrupted"
        print(f"defect-detector {args.command}: {how}", file=sys.stderr)
        return 128 + signum
    except Exception as exc:
        if not is_expected(exc, (CliError,)):
            raise
        print(f"defect-detector {args.command}: error: {mask_secrets(error_line(exc))}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
