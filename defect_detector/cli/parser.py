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
