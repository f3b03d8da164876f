"""A golden image as the drift monitor sees it, and the ``changeover`` its change logs.

With a golden-template model every frame is read relative to its own golden image (``monitor/drift.py``): the
inspection side runs the golden image through the same frame pipeline as its frame (paired with itself, letterboxed
or tiled alike), once per golden image, and hands the monitor a :class:`Golden` per frame. A frame whose golden image
differs from the previous frame's (another ``key``) is a changeover: a new board design on the line, logged as an
event, never an alarm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Golden:
    """The golden image of a frame: ``key`` names it (a file, or a fingerprint of its pixels), ``stats`` float64
    ``[L, 2]`` are its layer statistics paired with itself, ``levels`` float64 ``[4]`` its gray levels
    (``monitor/blank.py``), or None."""

    key: str
    stats: np.ndarray
    levels: np.ndarray | None = None


def changeover_reason(reference: str, previous: str) -> str:
    """The text of a ``changeover`` event."""
    return f"golden image changed to {reference} (was {previous}): a new board design; drift is read against the new golden image"
