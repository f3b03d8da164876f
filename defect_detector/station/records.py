"""The record of one inspected frame that the inspector hands to the station :class:`~defect_detector.station.recorder.Recorder`.

Plain data only (numbers, strings, numpy arrays), so the recorder knows nothing of the inspection pipeline's types and a
line integrator can build records by hand. Coordinates: boxes are xyxy float in the frame's own pixels (x right, y down,
origin at the top-left corner of pixel (0, 0)), the same frame as ``Detections.boxes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from defect_detector.core.verdict import VERDICTS

RAISED = ("warning", "critical")
"""Drift states that queue a frame for review."""

KIND_CHARS = 80
"""Longest reason kind kept (the kind is a short label; the whole reason is kept beside it)."""

REGISTRATION_KEYS = ("shift", "angle", "score", "difference")
"""What a frame record keeps of its golden image's registration (``inspections.reg_*`` columns, schema 5)."""


TRACE_CHARS = 128
"""Longest serial, lot or work order kept."""


@dataclass(frozen=True)
class CallRecord:
    """One call of the model: its class name, score in [0, 1], box ``(x1, y1, x2, y2)`` in frame pixels, the
    ``board`` of a panel it lies on (None: the frame has no board outlines, or the call lies on none), and ``golden``:
    its box centre ``(x, y)`` in its golden image's pixels, through the frame's registration (None: no golden image);
    a rejected call is tolerated there by ``teach --station`` (``jobs/rejections.py``)."""

    class_name: str
    score: float
    box: tuple[float, float, float, float]
    board: str | None = None
    golden: tuple[float, float] | None = None


@dataclass(frozen=True)
class BoardRecord:
    """One board of a panel frame: its ``name`` and ``verdict`` (one of :data:`VERDICTS`); its calls are the frame's
    calls whose ``board`` is ``name``."""

    name: str
    verdict: str

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"board {self.name!r}: verdict must be one of {', '.join(VERDICTS)}, got {self.verdict!r}")


@dataclass(frozen=True)
class FrameRecord:
    """What the station records of one frame.

    ``source``: the SOURCE (camera, folder ...); ``frame``: 0-based index in it; ``name``: the frame's file name or
    label; ``time``: when it was inspected (timezone-aware, or naive meaning UTC); ``model``: the weights' file name;
    ``reference``: the golden image's name (None without one); ``verdict``: one of :data:`VERDICTS`; ``reason``: why it
    was not inspected (else None), ``reason_kind`` its short kind for counting (a ``RefusalKind`` value,
    ``core/refusal.py``; ``unknown`` when not given); ``drift``: the drift monitor's state after this frame (``off``,
    ``normal``, ``warning``, ``critical``), ``score`` its score (None without monitoring); ``events``: drift / changeover events this
    frame raised, as ``DriftEvent.to_dict()`` gives them; ``calls``: the model's calls; ``image``: the gray frame,
    uint8 ``[H, W]`` (None when it could not be read); ``reference_image``: its golden image registered into the
    frame's pixels, uint8 ``[H, W]`` (None without one); ``design_warning``: its golden image looks unlike the model's
    training images (``inspect/design_check.py``; the frame was inspected as usual), else None; ``design_taught``:
    whether the weights were taught its golden image (``teach``; None: not known, an older inspector); ``golden_key``: the
    fingerprint of its golden image's pixels; ``registration``: how that was registered into the frame
    (:data:`REGISTRATION_KEYS`: ``shift`` px, ``angle`` degrees, ZNCC ``score``, the golden check's ``difference``),
    None without a golden image. ``conf``: the score threshold that decided the frame (its design's taught point, or
    the operating point of the weights that inspected it; None: the recorder's ``conf``): its calls at or above it are
    queued for review. ``serial``, ``lot``, ``order``: the board's serial (its identity for first-pass yield,
    ``core/board_yield.py``), lot and work order, None when unknown (at most :data:`TRACE_CHARS` characters each).
    ``boards``: the verdict of each board of a panel frame (``inspect/panel.py``), empty for a frame of one board.
    The recorder keeps references to the arrays until they are written: do not modify them afterwards.
    """

    source: str
    frame: int
    name: str
    time: datetime
    model: str
    verdict: str
    reference: str | None = None
    reason: str | None = None
    reason_kind: str | None = None
    drift: str = "off"
    score: float | None = None
    events: tuple[dict[str, Any], ...] = ()
    calls: tuple[CallRecord, ...] = ()
    image: np.ndarray | None = field(default=None, repr=False, compare=False)
    reference_image: np.ndarray | None = field(default=None, repr=False, compare=False)
    design_warning: str | None = None
    design_taught: bool | None = None
    golden_key: str | None = None
    registration: dict[str, float] | None = None
    conf: float | None = None
    serial: str | None = None
    lot: str | None = None
    order: str | None = None
    boards: tuple[BoardRecord, ...] = ()

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}, got {self.verdict!r}")
        for name in ("serial", "lot", "order"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or len(value) > TRACE_CHARS):
                raise ValueError(f"{name} must be a string of at most {TRACE_CHARS} characters, got {str(value)[:40]!r}")
        if self.conf is not None and not 0.0 <= self.conf <= 1.0:
            raise ValueError(f"conf must lie in [0, 1], got {self.conf}")
        for name in ("image", "reference_image"):
            array = getattr(self, name)
            if array is not None and (not isinstance(array, np.ndarray) or array.ndim != 2 or array.dtype != np.uint8):
                raise ValueError(
                    f"{name} must be a uint8 [H, W] array, got {getattr(array, 'dtype', type(array))} {getattr(array, 'shape', '')}"
                )

    @property
    def kind(self) -> str | None:
        """The reason kind a not-inspected frame is counted under (None for an inspected one)."""
        if self.verdict != "not_inspected":
            return None
        return (self.reason_kind or "").strip()[:KIND_CHARS] or "unknown"

    def threshold(self, default: float) -> float:
        """The score threshold that decided this frame: its own :attr:`conf`, else ``default`` (the recorder's)."""
        return self.conf if self.conf is not None else default

    def queued(self, conf: float) -> bool:
        """Whether this frame goes to the review queue: a call scoring at least its threshold (:meth:`threshold` of
        ``conf``), or drift raised."""
        return self.drift in RAISED or any(c.score >= self.threshold(conf) for c in self.calls)


def utc_now() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)
