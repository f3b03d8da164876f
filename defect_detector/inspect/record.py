"""The frame record: :class:`Inspection`, finished once by the inspector and immutable after.

It owns the frame's verdict (``core/verdict.py``: one rule, computed when it is built), its typed refusal
(``core/refusal.py``), and its serialisations: the ``--save-json`` record (:meth:`Inspection.to_json`), the ``--report``
CSV row (:meth:`Inspection.csv_row`) and the station's row (:meth:`Inspection.to_station`). Outputs, the station
recorder and the run summary read these; none decides a verdict or parses a reason's text again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

import numpy as np
from torchvision.ops import box_convert

from defect_detector.align.register import Registration
from defect_detector.core.frame_record import Prepared
from defect_detector.core.types import Detections
from defect_detector.core.verdict import Verdict, verdict_of
from defect_detector.inspect.panel import BoardOutline, BoardVerdict, board_verdicts, boards_holding, to_outline_pixels
from defect_detector.inspect.tolerance import in_golden
from defect_detector.inspect.trace import NO_TRACE, Trace
from defect_detector.monitor.drift import DriftEvent
from defect_detector.station.records import REGISTRATION_KEYS, BoardRecord, CallRecord, FrameRecord


@dataclass(frozen=True)
class Inspection(Prepared):
    """The record of one frame: what the prepare stage made of it (:class:`~defect_detector.core.frame_record.Prepared`:
    its frame, design, registration, refusal ...), the model's ``detections`` (boxes in the frame's original pixels;
    None when not inspected), the drift ``events`` it raised, the monitor's ``drift`` flag after it
    (``DriftDetector.flag``; ``"off"`` without monitoring) and ``score`` (None without monitoring), and the file name of
    the ``weights`` that inspected it (with the bundled weights chosen per design, not always the same), ``conf``: the
    score threshold that decided it (its design's taught point, ``Pipeline.conf_for``, of the weights that inspected
    it; None when not known: a record built by hand), ``trace``: its board's serial, lot and work order
    (``inspect/trace.py``), ``outlines``: the board outlines of a panel design (``inspect/panel.py``; empty: one board).
    Build it with :meth:`finish`.

    ``verdict`` (set when built, :func:`~defect_detector.core.verdict.verdict_of`): ``fail`` (at least one call at the
    operating point), ``pass`` (none), ``pass_suspect`` (none, but a critical drift alert is raised, or its golden image
    draws the untaught-look warning; ``reason`` says which), or ``not_inspected`` (``refusal`` says why): never count
    such a board as clean.

    ``call_boards`` (set when built): the panel board each call lies on (None: on none), one per call of an inspected
    frame with outlines, else empty; ``boards``: each outline's verdict by the same rule on its own calls."""

    detections: Detections | None = None
    events: tuple[DriftEvent, ...] = ()
    drift: str = "off"
    score: float | None = None
    weights: str | None = None
    conf: float | None = None
    trace: Trace = NO_TRACE
    outlines: tuple[BoardOutline, ...] = ()
    verdict: Verdict = field(init=False)
    call_boards: tuple[str | None, ...] = field(init=False)
    boards: tuple[BoardVerdict, ...] = field(init=False)

    def __post_init__(self) -> None:
        inspected = self.detections is not None and not self.refused
        suspect = self.drift == "critical" or self.design_warning is not None
        object.__setattr__(self, "events", tuple(self.events))
        object.__setattr__(self, "verdict", verdict_of(inspected, len(self.detections) if inspected else 0, suspect))
        on: tuple[str | None, ...] = ()
        if inspected and self.outlines:
            boxes = self.detections.boxes.detach().cpu().double().reshape(-1, 4).numpy()
            on = tuple(boards_holding(to_outline_pixels(boxes, self.registration), self.outlines))
        object.__setattr__(self, "call_boards", on)
        object.__setattr__(self, "boards", board_verdicts(inspected, suspect, on, self.outlines))

    @classmethod
    def finish(cls, prepared: Prepared, detections: Detections | None = None, **outcome: Any) -> Inspection:
        """The record of ``prepared`` with its ``detections`` and the rest of its outcome (``events``, ``drift``,
        ``score``, ``weights``, ``conf``, ``trace``, ``outlines``)."""
        return cls(**{f.name: getattr(prepared, f.name) for f in fields(Prepared)}, detections=detections, **outcome)

    @property
    def reason(self) -> str | None:
        """Why the frame was not inspected, or why its pass is suspect (None otherwise)."""
        if self.verdict == Verdict.NOT_INSPECTED:
            return self.refusal.message if self.refusal is not None else None
        if self.verdict == Verdict.PASS_SUSPECT and self.drift == "critical":
            score = f"score {self.score:.1f}" if self.score is not None else "alert raised"
            return f"drift critical: {score}; no call, but the camera may not show the board as validated: check the camera and the light"
        if self.verdict == Verdict.PASS_SUSPECT:
            return f"{self.suspect_kind}: no call, but {self.design_warning}"
        return None

    @property
    def suspect_kind(self) -> str | None:
        """Why a ``pass_suspect`` is suspect, for counting (``drift critical``, ``untaught look`` or, when the design
        note is only that its features are finer than validated, ``finer than validated``); None otherwise."""
        if self.verdict != Verdict.PASS_SUSPECT:
            return None
        if self.drift == "critical":
            return "drift critical"
        return "finer than validated" if self.design_warning == self.scale_warning else "untaught look"

    def to_json(self) -> dict[str, Any]:
        """The ``--save-json`` record (``inspect/outputs.py`` module docstring): file name, frame, serial, lot, order,
        verdict, reason, the threshold that decided it, drift, design note, registration, working scale, calls
        (``bbox`` COCO xywh in the frame's original pixels; ``board`` with outlines), boards, dropped, merged, tolerated (calls
        its design's tolerance map dropped, ``inspect/tolerance.py``), off_area (calls off its design's inspection area,
        ``align/inspection_area.py``), weights."""
        result = self.detections
        calls = call_json(result)
        for call, board in zip(calls, self.call_boards):
            call["board"] = board
        return {
            "file_name": self.frame.file_name,
            "frame": self.frame.index,
            **self.trace.as_dict(),
            "verdict": self.verdict.value,
            "reason": self.reason,
            "conf": None if self.conf is None else round(float(self.conf), 5),
            "drift": self.drift,
            "design_warning": self.design_warning,
            "registration": registration_json(self.registration),
            "design_taught": bool(self.design_taught),
            "working_scale": round(float(self.working_scale), 4),
            "calls": calls,
            "boards": [b.as_dict() for b in self.boards],
            "dropped": result.dropped if result is not None else 0,
            "merged": result.merged if result is not None else 0,
            "tolerated": result.tolerated if result is not None else 0,
            "off_area": result.off_area if result is not None else 0,
            "weights": self.weights,
        }

    def csv_row(self, class_names: Sequence[str]) -> list[Any]:
        """The ``--report`` CSV row (:func:`csv_header`): file name, frame, verdict, reason, calls, calls per class,
        dropped, drift, the threshold that decided it, serial, lot, order, the boards of a panel
        (``A:pass B:fail(2)``: each board's verdict, with its calls when it has any), and the calls its design's
        tolerance dropped (``inspect/tolerance.py``)."""
        names = list(self.detections.names) if self.detections is not None else []
        dropped = self.detections.dropped if self.detections is not None else 0
        tolerated = self.detections.tolerated if self.detections is not None else 0
        per_class = [names.count(name) for name in class_names]
        conf = "" if self.conf is None else round(float(self.conf), 5)
        trace = [v or "" for v in self.trace.as_dict().values()]
        boards = " ".join(f"{b.name}:{b.verdict}" + (f"({b.calls})" if b.calls else "") for b in self.boards)
        row = [self.frame.file_name, self.frame.index, self.verdict.value, self.reason or "", len(names), *per_class, dropped, self.drift]
        return [*row, conf, *trace, boards, tolerated]

    def to_station(self, time: datetime) -> FrameRecord:
        """The station's record of this frame (``station/records.py``), inspected at ``time``: the golden image's name,
        key, pixels and registration for an inspected frame only."""
        frame, inspected = self.frame, self.verdict != Verdict.NOT_INSPECTED
        image = frame.image if isinstance(frame.image, np.ndarray) and frame.image.ndim == 2 and frame.image.dtype == np.uint8 else None
        golden = self.golden if inspected and image is not None and self.golden is not None and self.golden.shape == image.shape else None
        return FrameRecord(
            source=str(frame.source_name),
            frame=int(frame.index),
            name=str(frame.file_name),
            time=time,
            model=self.weights or "",
            verdict=self.verdict.value,
            reference=self.golden_name if inspected else None,
            reason=self.reason,
            reason_kind=self.refusal.kind.value if self.refusal is not None else None,
            drift=str(self.drift),
            score=None if self.score is None else float(self.score),
            events=tuple(e.to_dict() for e in self.events),
            calls=station_calls(self.detections, self.call_boards, self.registration),
            image=image,
            reference_image=golden,
            design_warning=self.design_warning,
            design_taught=self.design_taught,
            golden_key=self.golden_key if inspected else None,
            registration=registration_values(self.registration) if inspected else None,
            conf=self.conf,
            **self.trace.as_dict(),
            boards=tuple(BoardRecord(b.name, b.verdict) for b in self.boards),
        )


def csv_header(class_names: Sequence[str]) -> list[str]:
    """The ``--report`` CSV's header row."""
    return ["file_name", "frame", "verdict", "reason", "calls", *class_names, "dropped", "drift", *CSV_TRACE]


CSV_TRACE = ("conf", "serial", "lot", "order", "boards", "tolerated")
"""The ``--report`` CSV's last columns: the threshold that decided the frame, its trace, its panel's boards and the calls
its design's tolerance dropped."""


def call_json(result: Detections | None) -> list[dict[str, Any]]:
    """The calls of one frame: ``{"category_name", "bbox": [x, y, w, h], "score"}``, ``bbox`` in the frame's original
    pixels (COCO xywh, rounded to 0.01 px); none for a frame that was not inspected."""
    if result is None:
        return []
    xywh = box_convert(result.boxes, "xyxy", "xywh").tolist()
    return [
        {"category_name": name, "bbox": [round(v, 2) for v in box], "score": round(score, 5)}
        for box, name, score in zip(xywh, result.names, result.scores.tolist())
    ]


def station_calls(
    result: Detections | None, boards: Sequence[str | None] = (), registration: Registration | None = None
) -> tuple[CallRecord, ...]:
    """The calls of one frame as the station records them (boxes xyxy in the frame's pixels), each with the panel board
    ``boards`` names for it (none given: no board) and its box centre in golden-image pixels through ``registration``
    (None: no golden image, and no centre)."""
    if result is None:
        return ()
    boxes = result.boxes.double().reshape(-1, 4).tolist()
    on = list(boards) or [None] * len(boxes)
    golden: list[tuple[float, float] | None] = [None] * len(boxes)
    if registration is not None and boxes:
        golden = [(round(float(x), 2), round(float(y), 2)) for x, y in in_golden(result.boxes, registration.mapping)]
    scores = result.scores.double().tolist()
    return tuple(CallRecord(str(n), float(s), tuple(b), o, g) for n, s, b, o, g in zip(result.names, scores, boxes, on, golden))


def registration_values(reg: Registration | None) -> dict[str, float] | None:
    """``station/records.py`` :data:`REGISTRATION_KEYS` of a registration, rounded; None without one."""
    if reg is None:
        return None
    values = (reg.shift_px, reg.angle_deg, reg.score, reg.difference)
    return {k: round(float(v), 4) for k, v in zip(REGISTRATION_KEYS, values)}


def registration_json(reg: Registration | None) -> dict[str, Any] | None:
    """The JSON form of a frame's registration (None: no golden image): :func:`registration_values`, its golden check's
    ``spread``, whether the fixture's mapping was ``reused``, the mapping's ``model``, ``scale``, ``perspective`` (px),
    ``lens`` (k1) and ``local`` residual (``largest``, ``median`` px; ``Registration.geometry``), and its ``photometric``
    fit (gain, offset, gamma, light_range, blur; None before one)."""
    if reg is None:
        return None
    photometric = reg.photometric.as_dict() if reg.photometric is not None else None
    extra = {"spread": round(float(reg.spread), 4), "reused": bool(reg.reused)}
    return registration_values(reg) | extra | reg.geometry() | {"photometric": photometric}
