"""Yield: boards by verdict, and first-pass yield, the one definition every count (run summary, Prometheus, station)
follows.

A board is identified by its serial when one is known (``--trace-pattern``, or ``serial=`` given to
``Inspector.inspect`` / a station record); without one each frame is a board of its own. A frame that was not
inspected (``not_inspected``) is no inspection of its board: the camera did not see it. It is counted apart, never
as a pass, and a board's first inspection is the first of its frames that *was* inspected (``pass``,
``pass_suspect`` or ``fail``)::

    first-pass yield = boards whose first inspection is a pass / boards inspected

where "boards inspected" counts each board once, at its first inspection, and "a pass" is the verdict ``pass``:
``pass_suspect`` (no call, but a critical drift alert or an untaught look) asks a person to look, so it is no first
pass. A panel frame (several boards of one design, ``inspect/panel.py``) counts as one board here; its boards'
verdicts are in its record.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass

from defect_detector.core.verdict import Verdict

REMEMBERED = 100_000
"""Serials a process remembers to tell a board's first inspection from a later one (the oldest forgotten first; the
station's database remembers every one)."""


def is_first_inspection(verdict: str, inspected_before: bool) -> bool:
    """Whether a frame of ``verdict`` is its board's first inspection: it was inspected, and no earlier frame of the
    same board was (``inspected_before``; always False for a frame without a serial)."""
    return verdict != Verdict.NOT_INSPECTED and not inspected_before


@dataclass
class BoardCounts:
    """Frames by verdict (``passed``, ``suspect``: ``pass_suspect``, ``failed``, ``not_inspected``), ``boards``: boards
    inspected (first inspections), ``first_passed``: of those, the ones that passed."""

    passed: int = 0
    suspect: int = 0
    failed: int = 0
    not_inspected: int = 0
    boards: int = 0
    first_passed: int = 0

    def add(self, verdict: str, first: bool) -> None:
        """Count one frame of ``verdict``; ``first``: it is its board's first inspection (:func:`is_first_inspection`)."""
        column = {Verdict.PASS: "passed", Verdict.PASS_SUSPECT: "suspect", Verdict.FAIL: "failed"}.get(verdict, "not_inspected")
        setattr(self, column, getattr(self, column) + 1)
        self.boards += first
        self.first_passed += first and verdict == Verdict.PASS

    @property
    def first_pass_yield(self) -> float | None:
        """``first_passed / boards`` (None before any board was inspected)."""
        return self.first_passed / self.boards if self.boards else None

    def as_dict(self) -> dict[str, float | int | None]:
        """The counts and ``first_pass_yield`` (rounded to 4 places; None before any board was inspected)."""
        rate = self.first_pass_yield
        return asdict(self) | {"first_pass_yield": None if rate is None else round(rate, 4)}


class BoardYield:
    """The yield of one run or process: :class:`BoardCounts`, and which serials were inspected before (the newest
    :data:`REMEMBERED`)."""

    def __init__(self, remembered: int = REMEMBERED) -> None:
        self.counts = BoardCounts()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._remembered = max(1, remembered)

    def add(self, verdict: str, serial: str | None = None) -> bool:
        """Count one frame of ``verdict`` of board ``serial`` (None: the frame is its own board); returns whether it was
        its board's first inspection."""
        before = serial is not None and serial in self._seen
        first = is_first_inspection(verdict, before)
        if serial is not None and verdict != Verdict.NOT_INSPECTED:
            self._seen[serial] = None
            self._seen.move_to_end(serial)
            if len(self._seen) > self._remembered:
                self._seen.popitem(last=False)
        self.counts.add(verdict, first)
        return first
