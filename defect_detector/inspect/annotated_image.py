"""The annotated image of a frame record (``predict --save-dir``: an image per frame, or a frame of the annotated video).

- An inspected frame: its calls drawn (each class its colour) and a verdict stamp at a corner no call lies in:
  ``PASS`` (green), ``FAIL`` (red) or ``PASS SUSPECT`` (orange), with the threshold that decided it ("2 calls at score
  >= 0.42"), why a pass is suspect, and a panel's boards ("boards: A pass, B fail (2)").
- A frame not inspected: ``NOT INSPECTED`` with its reason on a band across the frame and, where the refusal names a
  hidden area (glare, a shadow, a hand; ``Prepared.hidden``), that area outlined in magenta with its kind, the band
  moved to the edge away from it, so the stamp never covers the place it names. A frame that could not be read, or is
  too small for the stamp to be read (under ``MIN_SIDE`` px), is a stamped placeholder.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from defect_detector.core.verdict import Verdict
from defect_detector.data.draw import badge, draw_detections, outline, stamp
from defect_detector.inspect.record import Inspection
from defect_detector.screens.frame import MIN_SIDE

PLACEHOLDER = (240, 640)
"""Size of the stamped image that stands in for a frame unread, or too small to stamp legibly."""


def annotated_image(inspection: Inspection, class_names: Sequence[str]) -> np.ndarray:
    """BGR uint8 ``[H, W, 3]``: the frame of ``inspection`` annotated (module docstring); the frame itself is not changed."""
    frame, result = inspection.frame, inspection.detections
    if inspection.verdict != Verdict.NOT_INSPECTED and result is not None:
        canvas = draw_detections(frame.image, result.boxes, result.scores, result.labels, class_names)
        badge(canvas, inspection.verdict.value.replace("_", " ").upper(), _detail(inspection), result.boxes.tolist())
        return canvas
    legible = frame.image is not None and min(frame.image.shape) >= MIN_SIDE
    canvas = cv2.cvtColor(frame.image, cv2.COLOR_GRAY2BGR) if legible else np.full((*PLACEHOLDER, 3), 90, np.uint8)
    hidden = inspection.hidden if legible else None
    if hidden is not None and hidden.box is not None:
        outline(canvas, hidden.box, hidden.kind)
        return stamp(canvas, "NOT INSPECTED", inspection.reason or "", avoid=hidden.box)
    return stamp(canvas, "NOT INSPECTED", inspection.reason or "")


def _detail(inspection: Inspection) -> str:
    """The stamp's second line: the calls at the frame's threshold, why a pass is suspect, a panel's boards."""
    calls = len(inspection.detections) if inspection.detections is not None else 0
    at = f" at score >= {inspection.conf:.2f}" if inspection.conf is not None else ""
    parts = [f"{calls} call{'s' if calls != 1 else ''}{at}" if calls else f"no call{at}"]
    if inspection.suspect_kind is not None:
        parts.append(inspection.suspect_kind)
    boards = [f"{b.name} {b.verdict.replace('_', ' ')}" + (f" ({b.calls})" if b.calls else "") for b in inspection.boards]
    if boards:
        parts.append("boards: " + ", ".join(boards))
    return "; ".join(parts)
