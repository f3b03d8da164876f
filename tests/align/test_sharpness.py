"""Sharpness against the golden image, and refusals that name the blur (issue 33, item 7)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from defect_detector.align.register import register
from defect_detector.align.sharpness import BLURRED, blur_words, sharpness, sharpness_ratio
from defect_detector.core.config_register import RegisterConfig
from defect_detector.monitor.faults import defocus

CALIB = Path(__file__).resolve().parents[2] / "data" / "samples" / "calib"


def _pair(board: str) -> tuple[np.ndarray, np.ndarray]:
    return cv2.imread(str(CALIB / f"{board}_temp.jpg"), cv2.IMREAD_GRAYSCALE), cv2.imread(str(CALIB / f"{board}_test.jpg"), 0)


def test_sharpness_falls_with_defocus_and_ignores_the_design() -> None:
    golden, frame = _pair("00041014")
    assert sharpness_ratio(frame, golden) == pytest.approx(1.0, abs=0.05)
    ratios = [sharpness_ratio(defocus(frame, s), golden) for s in (1.0, 2.0, 3.0)]
    assert ratios == sorted(ratios, reverse=True) and ratios[1] < BLURRED
    other, _ = _pair("13000044")  # another design, sharp: not blurred, whatever it shows
    assert sharpness_ratio(frame, other) > BLURRED and blur_words(frame, other) == ""
    assert sharpness(np.full((32, 32), 7, np.uint8)) == 0.0


def test_a_refusal_under_blur_names_the_blur_first() -> None:
    golden, frame = _pair("00041014")
    other, _ = _pair("13000044")
    _, sharp = register(other, frame)  # the wrong golden image, sharp frame: no word of blur
    assert not sharp.ok and sharp.reason.startswith("golden image does not match this board: registration score (ZNCC) ")
    assert "(needs 0.30; register.min_score)" in sharp.reason
    _, blurred = register(other, defocus(frame, 3.0))
    assert not blurred.ok and blurred.reason.startswith("frame is blurred: sharpness ")
    assert "% of the golden image's (check the focus and clean the lens); golden image does not match" in blurred.reason
    _, strict = register(golden, defocus(frame, 3.0), RegisterConfig(max_spread=0.0))  # the golden check refuses
    assert not strict.ok and strict.reason.startswith("frame is blurred: ") and "register.max_spread" in strict.reason
