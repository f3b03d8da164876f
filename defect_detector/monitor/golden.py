"""A golden image as the drift monitor sees it, and the ``changeover`` its change logs.

With a golden-template model every frame is read relative to its own golden image (``monitor/drift.py``): the
inspection side runs the golden image through the same frame pipeline as its frame (paired with itself, letterboxed
or tiled alike), once per golden image, and hands the monitor a :class:`Golden` per frame. A frame whose golden image
differs from the previous frame's (another ``key``: a fingerprint of its pixels, never its file name) is a changeover:
a new board design on the line, logged as an event, never an alarm. Boards of one design, or two copies of one golden
image under two file names, share one key: no changeover between them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from defect_detector.monitor.design_drift import DesignDrift


@dataclass(frozen=True)
class Golden:
    """The golden image of a frame: ``key`` identifies it by its pixels (a fingerprint), ``stats`` float64 ``[L, 2]``
    are its layer statistics paired with itself, ``levels`` float64 ``[4]`` its gray levels (``screens/blank.py``), or
    None; ``name`` what a line engineer knows it by (its file name; "" means ``key``); ``own``: the design's own drift
    level, learnt from its good boards by ``teach --good`` (``monitor/design_drift.py``; None: the calibration's)."""

    key: str
    stats: np.ndarray
    levels: np.ndarray | None = None
    name: str = ""
    own: DesignDrift | None = None

    @property
    def label(self) -> str:
        """``name``, else ``key``."""
        return self.name or self.key


def changeover_reason(reference: str, previous: str) -> str:
    """The text of a ``changeover`` event: ``reference`` / ``previous`` name the new and the old golden image."""
    if reference == previous:
        return f"golden image {reference} now holds other pixels: a new board design; drift is read against the new golden image"
    return f"golden image changed to {reference} (was {previous}): a new board design; drift is read against the new golden image"
