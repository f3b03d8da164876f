"""inspect/annotated_image.py: ``--save-dir`` images and video frames carry a verdict stamp that never hides a call, and
a frame not inspected for a hidden area shows that area outlined, uncovered by its NOT INSPECTED band (issue 58)."""

from __future__ import annotations

import numpy as np
import torch

from defect_detector.core.frame import Frame
from defect_detector.core.frame_record import Prepared
from defect_detector.core.refusal import Refusal, RefusalKind
from defect_detector.core.types import Detections, LetterboxMeta
from defect_detector.data.draw import HIDDEN_COLOR_BGR, STAMP_COLOR_BGR, VERDICT_COLORS_BGR
from defect_detector.inspect.annotated_image import annotated_image
from defect_detector.inspect.record import Inspection
from defect_detector.screens.hidden import HiddenArea

CLASSES = ["open", "short"]
SIDE = 640


def _board() -> np.ndarray:
    rng = np.random.default_rng(0)
    return (rng.integers(60, 190, (SIDE, SIDE))).astype(np.uint8)  # gray: anything coloured was drawn


def _calls(*boxes: tuple[float, float, float, float]) -> Detections:
    meta = LetterboxMeta(1.0, 0, 0, SIDE, SIDE)
    n = len(boxes)
    labels = torch.ones(n, dtype=torch.long)  # short: drawn blue, unlike any stamp
    return Detections(torch.tensor(boxes).reshape(-1, 4), torch.full((n,), 0.8), labels, ["short"] * n, torch.zeros(4, 2), {}, meta)


def _share_of(image: np.ndarray, color: tuple[int, int, int], region: tuple[slice, slice]) -> float:
    """The share of ``region``'s pixels within 40 of BGR ``color``."""
    patch = image[region].astype(int)
    return float((np.abs(patch - np.array(color)).max(axis=2) < 40).mean())


def test_an_inspected_frame_is_stamped_with_its_verdict_at_a_corner_clear_of_its_calls() -> None:
    frame = Frame(0, _board(), "cam0", "b.png", 0.0)
    failed = Inspection.finish(Prepared(frame, levels=np.zeros(4)), _calls((10.0, 10.0, 200.0, 60.0)), conf=0.42)
    image = annotated_image(failed, CLASSES)
    corner = (slice(2, 30), slice(SIDE - 60, SIDE - 4))  # the top-left corner holds a call: the stamp moves right
    assert _share_of(image, VERDICT_COLORS_BGR["FAIL"], corner) > 0.5
    assert _share_of(image, VERDICT_COLORS_BGR["FAIL"], (slice(15, 55), slice(20, 190))) < 0.05  # the call stays visible
    passed = annotated_image(Inspection.finish(Prepared(frame, levels=np.zeros(4)), _calls(), conf=0.42), CLASSES)
    assert _share_of(passed, VERDICT_COLORS_BGR["PASS"], (slice(2, 30), slice(4, 60))) > 0.5
    suspect = Inspection.finish(Prepared(frame, levels=np.zeros(4)), _calls(), drift="critical", score=9.0)
    assert _share_of(annotated_image(suspect, CLASSES), VERDICT_COLORS_BGR["PASS SUSPECT"], (slice(2, 30), slice(4, 60))) > 0.5
    assert np.array_equal(frame.image, _board())  # the frame itself is not drawn on


def test_a_hidden_area_is_outlined_and_not_covered_by_the_not_inspected_band() -> None:
    """The NOT INSPECTED band lay across the middle of the frame, over the very place its reason named."""
    board = _board()
    box = (260, 250, 420, 380)  # in the middle, where the band used to go
    hidden = HiddenArea("glare", 0.05, 340, 315, 20, box)
    refusal = Refusal(RefusalKind.HIDDEN, "glare over 5.0% of the board at x 340, y 315: a defect there cannot be seen")
    record = Inspection.finish(Prepared(Frame(0, board, "cam0", "g.png", 0.0), levels=np.zeros(4), refusal=refusal, hidden=hidden))
    image = annotated_image(record, CLASSES)
    inside = (slice(box[1] + 12, box[3] - 12), slice(box[0] + 12, box[2] - 12))
    assert np.array_equal(image[inside], np.repeat(board[inside][:, :, None], 3, axis=2))  # the place it names, as the camera saw it
    edge = (slice(box[1] + 30, box[3] - 30), slice(box[0] - 1, box[0] + 2))
    assert _share_of(image, HIDDEN_COLOR_BGR, edge) > 0.8  # outlined in magenta
    assert _share_of(image, STAMP_COLOR_BGR, (slice(0, SIDE), slice(0, SIDE))) > 0.15  # and stamped NOT INSPECTED all the same

