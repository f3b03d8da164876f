"""screens/exposure.py: a frame's tones, and the reason a frame is outside the exposure range a model was validated at."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from defect_detector.core.limits import ExposureLimits, Limits
from defect_detector.data.images import load_image_gray
from defect_detector.screens.exposure import exposure_reason, histogram, tones

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
VALIDATED = ExposureLimits(max_highlights=0.9995, max_midtones=0.2)  # what the bundled golden-template model records


@pytest.fixture(scope="module")
def pair() -> tuple[np.ndarray, np.ndarray]:
    """A DeepPCB board of the held-out groups and its golden image (bundled samples)."""
    return load_image_gray(SAMPLES / "deeppcb" / "50600000_test.jpg"), load_image_gray(SAMPLES / "golden" / "50600000_test.jpg")


def _light(image: np.ndarray, k: float) -> np.ndarray:
    return np.clip(image.astype(np.float32) * k, 0, 255).round().astype(np.uint8)


def _reason(frame: np.ndarray, golden: np.ndarray | None, limits: ExposureLimits = VALIDATED) -> str | None:
    reference = tones(histogram(golden)) if golden is not None else {"dark": 0.0, "bright": 255.0}
    what = "the golden image" if golden is not None else "the calibration frames"
    refusal = exposure_reason(tones(histogram(frame)), reference, limits, what)
    if refusal is not None:  # the message starts with its kind, and the values hold the measure and its limit
        assert refusal.message.startswith(refusal.kind.value + ": ") and len(refusal.values) == 2
    return None if refusal is None else refusal.message


def test_tones_of_a_binarized_board() -> None:
    board = np.zeros((100, 100), np.uint8)
    board[:, 60:] = 255
    board[0, :10] = 240  # a few unsaturated whites
    t = tones(histogram(board))
    assert t["dark"] == 0 and t["bright"] == 255 and t["midtones"] == 0
    assert t["saturated"] == pytest.approx(0.4) and t["crushed"] == pytest.approx(0.599)
    assert t["highlights"] == pytest.approx(4000 / 4010)
    masked = tones(histogram(board, np.pad(np.ones((100, 40), bool), ((0, 0), (60, 0)))))  # the white half only
    assert masked["dark"] == 255 and masked["saturated"] == 1.0
    with pytest.raises(ValueError, match="no pixels"):
        tones(np.zeros(256))


def test_a_board_at_normal_light_passes_against_its_golden_image_and_the_calibration_levels(pair) -> None:
    board, golden = pair
    assert _reason(board, golden) is None and _reason(board, None) is None


def test_an_underexposed_board_is_refused_with_its_measured_level(pair) -> None:
    board, golden = pair
    reason = _reason(_light(board, 0.25), golden)
    assert reason is not None and reason.startswith("underexposed: 25% of the golden image's level (least 60%)")
    assert _reason(_light(board, 0.25), None).startswith("underexposed: 25% of the calibration frames' level")
    assert _reason(_light(board, 0.7), golden) is None  # inside the validated range


def test_an_overexposed_board_is_refused_by_its_saturated_highlights(pair) -> None:
    board, golden = pair
    reason = _reason(_light(board, 1.7), golden)
    assert reason is not None and reason.startswith("overexposed: 100.00% of the bright pixels saturated (most 99.95%)")
    assert _reason(_light(board, 1.7), golden, ExposureLimits()) is None  # weights that record no highlights limit


def test_a_lossless_binarized_board_and_its_own_golden_image_are_not_overexposed(pair) -> None:
    """Issue 44: the highlight rule was absolute, so a lossless binarized frame (whites exactly 255) and a board
    identical to its DeepPCB golden image were refused as overexposed; read against the golden image's own
    highlights they pass, and 170% light on a golden image that keeps whites below 250 is still refused."""
    board, golden = pair
    binarized = np.where(board > 127, 255, 0).astype(np.uint8)
    binarized_golden = np.where(golden > 127, 255, 0).astype(np.uint8)
    assert tones(histogram(binarized))["highlights"] == 1.0
    assert _reason(binarized, binarized_golden) is None and _reason(golden, golden) is None
    assert _reason(_light(golden, 1.7), golden).startswith("overexposed")


def test_a_frame_a_binarized_line_thresholded_is_never_read_as_overexposed(pair) -> None:
    """Issue 56: a binarized line's lossless frames (exactly 0 and 255) against its JPEG golden image (DeepPCB's
    templates keep some whites under 250) were refused as overexposed, and so was every capture ``teach`` made of a
    binarized design: a thresholded frame's whites are 255 whatever the light was. A frame with a few levels between
    is read as before."""
    board, golden = pair
    binarized = np.where(board > 127, 255, 0).astype(np.uint8)
    assert tones(histogram(binarized))["two_level"] == 1.0 and tones(histogram(golden))["two_level"] < 0.99
    assert _reason(binarized, golden) is None and _reason(binarized, None) is None
    nearly = binarized.copy()
    nearly[:, :200] = np.clip(_light(board[:, :200], 1.7), 0, 255)  # a third of it read at 170% light, not thresholded
    assert tones(histogram(nearly))["two_level"] < 0.99 and _reason(nearly, golden).startswith("overexposed")


def test_low_contrast_is_refused(pair) -> None:
    board, golden = pair
    low = np.clip(128 + (board.astype(np.float32) - 128) * 0.4, 0, 255).astype(np.uint8)
    assert _reason(low, golden).startswith("low contrast: 40% of the golden image's")


def test_an_occluder_and_noise_are_not_a_board(pair) -> None:
    board, golden = pair
    occluded = board.copy()
    occluded[100:505, 100:505] = 160  # a flat hand over 40% of the board
    reason = _reason(occluded, golden)
    assert reason is not None and reason.startswith("occluded or not a board: 40% of the frame in mid-tones unlike the golden image")
    noise = np.random.default_rng(0).integers(0, 256, board.shape, dtype=np.uint8)
    assert _reason(noise, None).startswith("occluded or not a board:")
    assert _reason(noise, None, ExposureLimits()) is None  # not checked without a validated limit


def test_clipped_area_beyond_the_golden_image_is_refused() -> None:
    golden = np.tile(np.linspace(20, 230, 200).astype(np.uint8), (50, 1))  # a photograph: nothing clipped
    reason = _reason(_light(golden, 2.5), golden, ExposureLimits())
    assert reason is not None and reason.startswith("overexposed or underexposed: ") and "more of the frame clipped" in reason


def test_a_range_reads_old_operating_points_and_the_limits_of_new_weights() -> None:
    """Weights before v0.19 kept the range in their operating point's ``exposure`` (absent before v0.14: the
    defaults); newer ones keep it with every other limit, ``limits.exposure`` (``core/limits.py``)."""
    assert Limits.of_meta({}).exposure == ExposureLimits()
    old = Limits.of_meta({"operating_point": {"conf": 0.3, "iou": 0.5, "exposure": {"min_light": 0.5, "max_highlights": 0.999}}})
    assert old.exposure.min_light == 0.5 and old.exposure.max_highlights == 0.999
    assert old.exposure.min_contrast == ExposureLimits().min_contrast
    new = Limits.of_meta({"limits": {"exposure": {"min_light": 0.4}}, "operating_point": {"exposure": {"min_light": 0.5}}})
    assert new.exposure.min_light == 0.4  # the limits, not an older key beside them
    with pytest.raises(ValueError, match=r"limits\.exposure\.min_light: must be in \[0, 1\], got 1\.5"):
        Limits.of_meta({"limits": {"exposure": {"min_light": 1.5}}})
