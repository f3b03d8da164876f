"""The argument parser of ``defect-detector``: each subcommand module registers its own subparser."""

from __future__ import annotations

import argparse
from types import ModuleType

from defect_detector.core.version import __version__


def build_parser(commands: dict[str, ModuleType]) -> argparse.ArgumentParser:
    """The parser with one subparser per module of ``commands`` (each module's ``add_parser(sub)``)."""
    parser = argparse.ArgumentParser(prog="defect-detector", description="PCB defect detection on grayscale images.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in commands.values():
        module.add_parser(sub)
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, except that ``key=value`` overrides may follow options: argparse fills a ``nargs="*"``
    positional once, so in ``train --config c.yaml --resume train.lr=0.01`` the override after ``--resume`` came back
    as "unrecognized arguments". Such leftovers join ``args.overrides`` (in order) where the command takes overrides;
    anything else is still the usual usage error."""
    args, extra = parser.parse_known_args(argv)
    if extra and hasattr(args, "overrides") and all("=" in item and not item.startswith("-") for item in extra):
        args.overrides = [*(args.overrides or []), *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args
