"""Traceability: a frame's board serial, lot and work order, read from its file name by a pattern
(``predict --trace-pattern``) or given with it (``Inspector.inspect(..., serial=, lot=, order=)``).

The pattern is a Python regular expression with named groups among :data:`FIELDS`, searched in the frame's file name
(its path relative to SOURCE): ``(?P<serial>SN\\d+)_(?P<lot>L\\d+)`` reads ``SN0042`` and ``L7`` from
``SN0042_L7_top.png``. A name it does not match gives no trace (the frame is then a board of its own,
``core/board_yield.py``). Values are one printable line of at most :data:`MAX_CHARS` characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FIELDS = ("serial", "lot", "order")
"""What a trace holds: the board's serial (or barcode), its lot and its work order."""
MAX_CHARS = 128
"""Longest serial, lot or work order kept."""


def checked(name: str, value: object) -> str | None:
    """``value`` as a trace field ``name``: None, or a stripped printable string of 1 to :data:`MAX_CHARS` characters
    (an empty one is None); ``ValueError`` in one line for anything else."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")
    text = value.strip()
    if len(text) > MAX_CHARS or not text.isprintable():
        raise ValueError(f"{name} must be one printable line of at most {MAX_CHARS} characters, got {text[:40]!r}")
    return text or None


@dataclass(frozen=True)
class Trace:
    """A frame's ``serial``, ``lot`` and ``order`` (each None when unknown)."""

    serial: str | None = None
    lot: str | None = None
    order: str | None = None

    def __post_init__(self) -> None:
        for name in FIELDS:
            object.__setattr__(self, name, checked(name, getattr(self, name)))

    def as_dict(self) -> dict[str, str | None]:
        return {name: getattr(self, name) for name in FIELDS}


NO_TRACE = Trace()


class TracePattern:
    """A compiled ``--trace-pattern``: ``ValueError`` in one line for a pattern that does not compile, names no group
    of :data:`FIELDS`, or names another group (a misspelt ``(?P<seriel>...)`` would read nothing, silently)."""

    def __init__(self, pattern: str) -> None:
        try:
            self.regex = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"--trace-pattern '{pattern}': not a regular expression ({exc})") from None
        names = set(self.regex.groupindex)
        unknown = sorted(names - set(FIELDS))
        if unknown or not names:
            what = f"names group(s) {', '.join(unknown)}" if unknown else "names no group"
            raise ValueError(f"--trace-pattern '{pattern}' {what}: use named groups among {', '.join(FIELDS)}, e.g. (?P<serial>SN\\d+)")
        self.pattern = pattern

    def trace(self, file_name: str) -> Trace:
        """The trace read from ``file_name`` (:data:`NO_TRACE` when the pattern does not match it)."""
        match = self.regex.search(file_name)
        if match is None:
            return NO_TRACE
        found = match.groupdict()
        try:
            return Trace(**{name: found.get(name) for name in FIELDS})
        except ValueError:  # a group that matched an unprintable or overlong run of the name
            return NO_TRACE
