"""A refusal names what was measured (issue 58, item 3): the light only where glare is the cause, another scale for a
golden image at another scale, darker for a single-image line whose light dropped (which also raises a drift alert)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from golden_pairs import CALIB, gray, textured

from defect_detector.core.refusal import RefusalKind
from defect_detector.inspect.inspector import Inspector
from defect_detector.screens.hidden import HiddenArea, HiddenKind, hidden_cause

pytestmark = pytest.mark.usefixtures("one_thread")

LIGHT = "shade the light"


@pytest.fixture(scope="module")
def golden_inspector() -> Inspector:
    """The bundled golden-template model, unmonitored."""
    with Inspector.load(reference=str(CALIB / "00041014_temp.jpg"), threads=1, monitor=False) as inspector:
        yield inspector


def test_glare_is_named_as_the_light(golden_inspector: Inspector) -> None:
    golden = textured((480, 640), 3)
    board = golden.copy()
    cv2.circle(board, (300, 240), 80, 255, -1)
    record = golden_inspector.inspect(board, "glare.png", reference=golden)
    assert record.refusal is not None and record.refusal.kind == RefusalKind.HIDDEN
    assert record.refusal.message.startswith("glare over") and LIGHT in record.refusal.message


@pytest.mark.parametrize("factor", [1.5, 0.7])
def test_a_golden_image_at_another_scale_says_so(golden_inspector: Inspector, factor: float) -> None:
    golden = cv2.resize(gray(CALIB / "00041014_temp.jpg"), None, fx=factor, fy=factor)
    record = golden_inspector.inspect(gray(CALIB / "00041014_test.jpg"), "scaled.png", reference=golden)
    assert record.refusal is not None and record.refusal.kind == RefusalKind.REFERENCE_MISMATCH
    assert f"{factor:.2f}x the frame's size: captured at another scale" in record.refusal.message
    assert LIGHT not in record.refusal.message


def test_a_golden_image_of_the_frames_size_names_no_scale(golden_inspector: Inspector) -> None:
    record = golden_inspector.inspect(gray(CALIB / "00041014_test.jpg"), "other.png", reference=gray(CALIB / "13000044_temp.jpg"))
    assert record.refusal is not None and record.refusal.kind == RefusalKind.REFERENCE_MISMATCH
    assert "another scale?" not in record.refusal.message and LIGHT not in record.refusal.message


@pytest.mark.parametrize(
    ("kind", "share", "words"),
    [
        (HiddenKind.GLARE, 0.03, LIGHT),
        (HiddenKind.DARK, 0.3, "clear the camera's view"),
        (HiddenKind.UNLIKE, 0.4, "another design"),
        (HiddenKind.UNLIKE, 0.05, "an object over the board"),
        ("unlike the calibration frames", 0.2, "clear the camera's view"),
    ],
)
def test_only_glare_asks_for_the_light(kind: str, share: float, words: str) -> None:
    cause = hidden_cause(HiddenArea(kind, share, 10, 10, 4))
    assert words in cause
    assert (LIGHT in cause) == (kind == HiddenKind.GLARE)


def test_a_darker_single_image_line_is_refused_as_darker_and_raises_a_drift_alert(tmp_path: Path) -> None:
    board = gray(CALIB / "00041014_test.jpg")
    alerts = tmp_path / "alerts.jsonl"
    with Inspector.load(threads=1, alerts=alerts) as inspector:
        clean = inspector.inspect(board, "clean.png")
        dark = inspector.inspect((board * 0.6).astype(np.uint8), "dark.png")
    assert clean.refusal is None
    assert dark.refusal is not None and dark.refusal.kind == RefusalKind.UNDEREXPOSED
    assert "40% darker than the calibration frames" in dark.refusal.message and LIGHT not in dark.refusal.message
    assert dark.drift == "critical"
    assert "40% darker" in alerts.read_text()
