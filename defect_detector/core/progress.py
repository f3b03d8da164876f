"""Progress of long work on stderr (``val``, ``calibrate``, training): a live tqdm bar on a terminal; where stderr is a
log or a pipe, the same bar as whole lines, one at the start, one at least every :data:`LOG_INTERVAL` seconds and one
at the end, so a run that is not watched live still shows how far it got (tqdm alone draws nothing there, or one line
of carriage returns)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from tqdm import tqdm

LOG_INTERVAL = 30.0
"""Least seconds between two progress lines where stderr is not a terminal."""


class _Lines(tqdm):
    """A tqdm bar written as whole lines (stderr not a terminal), in ASCII."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.disable:
            self.fp = _Stream(self.fp)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        text = self.__str__() if msg is None else msg
        if text.strip():
            self.fp.write(text.strip() + "\n")
            self.fp.flush()
        return True


class _Stream:
    """A stream that drops what tqdm writes between its lines (the bare newline it closes with)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        if text.strip():
            self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def progress(
    iterable: Iterable[Any] | None = None, *, total: int | None = None, desc: str, unit: str = "img", enabled: bool = True
) -> tqdm:
    """A progress bar over ``iterable`` (or ``total`` steps, advanced with ``update``), named ``desc``, on stderr;
    ``enabled`` False: none. A terminal gets a live bar that clears at the end; a log or a pipe gets whole lines
    (:class:`_Lines`) that stay."""
    if sys.stderr.isatty():
        return tqdm(iterable, total=total, desc=desc, unit=unit, leave=False, disable=not enabled, dynamic_ncols=True, file=sys.stderr)
    lines = {"leave": True, "mininterval": LOG_INTERVAL, "ncols": 80, "ascii": True}
    return _Lines(iterable, total=total, desc=desc, unit=unit, disable=not enabled, file=sys.stderr, **lines)
