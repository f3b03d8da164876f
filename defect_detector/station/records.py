"""The record of one inspected frame that the inspector hands to the station :class:`~defect_detector.station.recorder.Recorder`.

Plain data only (numbers, strings, numpy arrays), so the recorder knows nothing of the inspection pipeline's types and a
line integrator can build records by hand. Coordinates: boxes are xyxy float in the frame's own pixels (x right, y down,
origin at the top-left corner of pixel (0, 0)), the same frame as ``Detections.boxes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

VERDICTS = ("pass", "pass_suspect", "fail", "not_inspected")
"""An inspection's outcome: no call at the operating point, none but under a critical drift alert (``reason`` says so),
at least one call, or not inspected (``reason`` says why)."""

RAISED = ("warning", "critical")
"""Drift states that queue a frame for review."""

KIND_CHARS = 80
"""Longest reason kind kept (the kind is a short label; the whole reason is kept beside it)."""


def reason_kind(reason: str | None) -> str:
    """The kind of a not-inspected reason, for counting: the text after the frame's name and before any detail in
    parentheses (``"b.png: no golden image (a golden-template model)"`` -> ``"no golden image"``); ``unknown`` for none."""
    if not reason or not reason.strip():
        return "unknown"
    text = " ".join(reason.split()).split(": ", 1)[-1]
    return text.split(" (", 1)[0][:KIND_CHARS] or "unknown"


REGISTRATION_KEYS = ("shift", "angle", "score", "difference")
"""What a frame record keeps of its golden image's registration (``inspections.reg_*`` columns, schema 5)."""


@dataclass(frozen=True)
class CallRecord:
    """One call of the model: its class name, score in [0, 1] and box ``(x1, y1, x2, y2)`` in frame pixels."""

    class_name: str
    score: float
    box: tuple[float, float, float, float]


@dataclass(frozen=True)
class FrameRecord:
    """What the station records of one frame.

    ``source``: the SOURCE (camera, folder ...); ``frame``: 0-based index in it; ``name``: the frame's file name or
    label; ``time``: when it was inspected (timezone-aware, or naive meaning UTC); ``model``: the weights' file name;
    ``reference``: the golden image's name (None without one); ``verdict``: one of :data:`VERDICTS`; ``reason``: why it
    was not inspected (else None), ``reason_kind`` its short kind for counting (default: :func:`reason_kind` of it);
    ``drift``: the drift monitor's state after this frame (``off``, ``normal``,
    ``warning``, ``critical``), ``score`` its score (None without monitoring); ``events``: drift / changeover events this
    frame raised, as ``DriftEvent.to_dict()`` gives them; ``calls``: the model's calls; ``image``: the gray frame,
    uint8 ``[H, W]`` (None when it could not be read); ``reference_image``: its golden image registered into the
    frame's pixels, uint8 ``[H, W]`` (None without one); ``design_warning``: its golden image looks unlike the model's
    training images (``inspect/design_check.py``; the frame was inspected as usual), else None; ``design_taught``:
    whether the weights were taught its golden image (``teach``; None: not known, an older inspector); ``golden_key``: the
    fingerprint of its golden image's pixels; ``registration``: how that was registered into the frame
    (:data:`REGISTRATION_KEYS`: ``shift`` px, ``angle`` degrees, ZNCC ``score``, the golden check's ``difference``),
    None without a golden image. The recorder keeps
    references to the arrays until they are written: do not modify them afterwards.
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

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}, got {self.verdict!r}")
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
        return (self.reason_kind or "").strip()[:KIND_CHARS] or reason_kind(self.reason)

    def queued(self, conf: float) -> bool:
        """Whether this frame goes to the review queue: a call scoring at least ``conf``, or drift raised."""
        return self.drift in RAISED or any(c.score >= conf for c in self.calls)


def utc_now() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)


def _event_dict(event: Any) -> dict[str, Any]:
    """A drift / changeover event as a plain dict (a ``DriftEvent`` or anything with ``to_dict``, or a mapping)."""
    return dict(event.to_dict()) if hasattr(event, "to_dict") else dict(event)


def calls_from_detections(detections: Any) -> tuple[CallRecord, ...]:
    """The calls of a ``Detections`` (``boxes`` ``[K, 4]`` xyxy frame pixels, ``scores`` ``[K]``, ``names`` ``K`` class names)."""
    if detections is None:
        return ()
    boxes = np.asarray(detections.boxes, dtype=np.float64).reshape(-1, 4).tolist()
    scores = np.asarray(detections.scores, dtype=np.float64).reshape(-1).tolist()
    return tuple(CallRecord(str(n), float(s), tuple(b)) for n, s, b in zip(detections.names, scores, boxes))


def registration_values(reg: Any) -> dict[str, float] | None:
    """:data:`REGISTRATION_KEYS` of a ``Registration`` (``align/register.py``; read by attribute), rounded; None for None."""
    if reg is None:
        return None
    values = (reg.shift_px, reg.angle_deg, reg.score, reg.difference)
    return {k: round(float(v), 4) for k, v in zip(REGISTRATION_KEYS, values)}


def record_from_inspection(inspection: Any, model: str, conf: float, events: Sequence[Any] | None = None) -> FrameRecord:
    """The :class:`FrameRecord` of an inspector's ``Inspection`` (read by attribute: ``frame`` with ``index``,
    ``source_name``, ``file_name``, ``image``, ``error``, ``error_kind``; ``detections``; ``drift``; ``score``; ``events``; and, where it
    has them, ``verdict`` / ``reason`` / ``design_warning`` / ``design_taught`` / ``golden_name`` / ``golden_key`` /
    ``golden`` (its registered golden image) / ``registration``). Without a ``verdict`` attribute: ``not_inspected``
    when there are no detections, ``fail`` when a call scores at least ``conf``, else ``pass``. The golden image's name,
    key, pixels and registration are recorded for an inspected frame only."""
    frame, detections = inspection.frame, inspection.detections
    inspected = detections is not None
    reference_image = getattr(inspection, "golden", None) if inspected else None
    calls = calls_from_detections(detections)
    verdict = getattr(inspection, "verdict", None)
    if verdict is None:
        verdict = "not_inspected" if detections is None else "fail" if any(c.score >= conf for c in calls) else "pass"
    reason = getattr(inspection, "reason", None)
    if reason is None and verdict == "not_inspected":
        reason = getattr(frame, "error", None)
    kind = getattr(frame, "error_kind", None) if verdict == "not_inspected" else None
    image = frame.image if isinstance(frame.image, np.ndarray) and frame.image.ndim == 2 and frame.image.dtype == np.uint8 else None
    return FrameRecord(
        source=str(frame.source_name),
        frame=int(frame.index),
        name=str(frame.file_name),
        time=utc_now(),
        model=model,
        verdict=verdict,
        reference=getattr(inspection, "golden_name", None) if inspected else None,
        reason=reason,
        reason_kind=kind if isinstance(kind, str) else None,
        drift=str(inspection.drift),
        score=None if inspection.score is None else float(inspection.score),
        events=tuple(_event_dict(e) for e in (inspection.events if events is None else events)),
        calls=calls,
        image=image,
        reference_image=reference_image if reference_image is not None and reference_image.shape == getattr(image, "shape", None) else None,
        design_warning=getattr(inspection, "design_warning", None),
        design_taught=getattr(inspection, "design_taught", None),
        golden_key=getattr(inspection, "golden_key", None) if inspected else None,
        registration=registration_values(getattr(inspection, "registration", None)) if inspected else None,
    )
