"""A frame's verdict, and the one rule that gives it.

``pass``: no call at the operating point; ``pass_suspect``: none, but the camera may not have shown the board as the
weights were validated (a critical drift alert, or an untaught look); ``fail``: at least one call; ``not_inspected``:
the frame was refused (its :class:`~defect_detector.core.refusal.Refusal` says why), never to be counted as clean.
The JSON record, the CSV row, the station and the summary all read the verdict a frame record computed with
:func:`verdict_of`; none decides it again.
"""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    """A frame's outcome (its value is what every output writes)."""

    PASS = "pass"
    PASS_SUSPECT = "pass_suspect"
    FAIL = "fail"
    NOT_INSPECTED = "not_inspected"


VERDICTS: tuple[str, ...] = tuple(v.value for v in Verdict)
"""The verdicts in the order outputs list them."""


def verdict_of(inspected: bool, calls: int, suspect: bool) -> Verdict:
    """The verdict of a frame: ``inspected`` (the model saw it), ``calls`` it kept at the operating point, ``suspect``
    (a critical drift alert is raised, or its golden image draws the untaught-look warning)."""
    if not inspected:
        return Verdict.NOT_INSPECTED
    if calls:
        return Verdict.FAIL
    return Verdict.PASS_SUSPECT if suspect else Verdict.PASS
