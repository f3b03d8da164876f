"""The end of a JSON benchmark command: its result printed and written, or its bad input in one line."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from defect_detector.core.io import atomic_write_json


def json_command(run: Callable[[], dict[str, Any]], out: str | None) -> int:
    """Run ``run``; print its result as JSON and write it atomically to ``out`` (when given): exit status 0. A
    ``ValueError`` or ``FileNotFoundError`` (bad input) is one line on stderr: exit status 2."""
    try:
        result = run()
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    if out:
        atomic_write_json(out, result)
    return 0
