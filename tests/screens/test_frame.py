"""screens/frame.py through the Inspector: no pass for a board the camera did not really see (issue 36).

Underexposed, overexposed, occluded and noise frames are not inspected with the measured reason; a frame without
calls under a critical drift alert is ``pass_suspect`` (counted, exit 3); no call where the registered golden image
has no data, and a refusal when it covers too little of the frame. The bundled models and sample boards: the
validated range is the one the bundled weights record.
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from defect_detector.cli.main import main
from defect_detector.core.frame import Frame
from defect_detector.core.limits import ExposureLimits
from defect_detector.core.refusal import RefusalKind
from defect_detector.core.types import Detections, LetterboxMeta
from defect_detector.data.images import load_image_gray
from defect_detector.inspect.inspector import Inspector
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, DEFAULT_WEIGHTS
from defect_detector.screens.frame import MIN_COVERED, calibration_levels, mask_uncovered, screen_reason

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
NAME = "50600000_test.jpg"


def _light(image: np.ndarray, k: float) -> np.ndarray:
    return np.clip(image.astype(np.float32) * k, 0, 255).round().astype(np.uint8)


def _moved(image: np.ndarray, dx: float, dy: float = 0.0) -> np.ndarray:
    return cv2.warpAffine(image, np.float32([[1, 0, dx], [0, 1, dy]]), image.shape[::-1], borderMode=cv2.BORDER_REPLICATE)


@pytest.fixture(scope="module")
def board() -> np.ndarray:
    return load_image_gray(SAMPLES / "deeppcb" / NAME)


@pytest.fixture(scope="module")
def golden() -> np.ndarray:
    return load_image_gray(SAMPLES / "golden" / NAME)


@pytest.fixture(scope="module")
def golden_model():
    with Inspector.load(DEFAULT_REFERENCE_WEIGHTS, reference=SAMPLES / "golden", device="cpu", threads=1, monitor=False) as inspector:
        yield inspector


@pytest.fixture(scope="module")
def single_model():
    with Inspector.load(DEFAULT_WEIGHTS, device="cpu", threads=1, monitor=False) as inspector:
        yield inspector


def test_the_bundled_weights_record_their_validated_range(golden_model: Inspector, single_model: Inspector) -> None:
    assert golden_model.pipeline.limits.exposure == ExposureLimits(max_highlights=0.9995, max_midtones=0.2)
    assert single_model.pipeline.limits.exposure == ExposureLimits(max_midtones=0.2)


def test_an_underexposed_board_is_not_inspected_on_both_models(golden_model: Inspector, single_model: Inspector, board) -> None:
    dim = _light(board, 0.25)  # the case: brightest pixels at 64, above the blank check's 40
    result = golden_model.inspect(dim, NAME)
    assert result.verdict == "not_inspected" and result.reason.startswith("underexposed: 25% of the golden image's level (least 60%)")
    result = single_model.inspect(dim, NAME)
    assert result.verdict == "not_inspected" and result.reason.startswith("underexposed: 25% of the calibration frames' level")
    assert golden_model.inspect(board, NAME).verdict == "fail"  # the same board at normal light is inspected


def test_an_overexposed_board_is_not_inspected(golden_model: Inspector, board) -> None:
    result = golden_model.inspect(_light(board, 1.7), NAME)
    assert result.verdict == "not_inspected"
    assert result.reason.startswith("overexposed: 100.00% of the bright pixels saturated (most 99.95%)")


def test_an_occluder_is_named_on_both_models(golden_model: Inspector, single_model: Inspector, board) -> None:
    hand = board.copy()
    hand[100:505, 100:505] = 160  # a flat hand over 40% of the board
    result = golden_model.inspect(hand, NAME)
    assert result.verdict == "not_inspected" and "occluded or not this board: " in result.reason
    assert "of the frame unlike the golden image in one region" in result.reason and "another design" not in result.reason
    result = single_model.inspect(hand, NAME)
    assert result.verdict == "not_inspected"
    assert result.reason.startswith("occluded or not a board: 40% of the frame in mid-tones unlike the calibration frames")


def test_a_frame_of_noise_is_not_a_board_for_the_single_image_model(single_model: Inspector, board) -> None:
    noise = np.random.default_rng(0).integers(0, 256, board.shape, dtype=np.uint8)
    result = single_model.inspect(noise, "noise.png")
    assert result.verdict == "not_inspected" and result.reason.startswith("occluded or not a board: ")


def test_no_call_where_the_golden_image_has_no_data(golden_model: Inspector, board, golden) -> None:
    """A golden image moved by 40 px leaves a strip of the frame without data: the model calls there, the inspector
    keeps no such call."""
    moved = _moved(golden, 40.0)
    warped = golden_model.prepare(Frame(0, board, "test", NAME, 0.0), moved).golden
    (raw,) = golden_model.pipeline.detect([board], [warped])
    centres = ((raw.boxes[:, 0] + raw.boxes[:, 2]) / 2).numpy()
    assert (centres > board.shape[1] - 40).any()  # a false call on the uncovered strip
    result = golden_model.inspect(board, NAME, reference=moved)
    kept = ((result.detections.boxes[:, 0] + result.detections.boxes[:, 2]) / 2).numpy()
    assert result.verdict == "fail" and len(kept) == int((centres <= board.shape[1] - 43).sum()) > 0
    assert (kept <= board.shape[1] - 40).all()


def test_a_frame_the_golden_image_covers_too_little_of_is_not_inspected(golden_model: Inspector, board, golden) -> None:
    crop, gold = board[:320, :320], golden[:320, :320]  # max_shift 64 px is a fifth of this frame
    result = golden_model.inspect(crop, "crop.png", reference=_moved(gold, 30.0, 10.0))  # (290 x 310) / 320^2: 88%
    assert result.verdict == "not_inspected" and result.reason.startswith("golden image covers 87% of the frame (least 90%)")
    assert golden_model.inspect(crop, "crop.png", reference=_moved(gold, 8.0, 4.0)).verdict != "not_inspected"


def test_screen_and_mask_on_their_own() -> None:
    frame = np.tile(np.array([0, 255], np.uint8).repeat(8), (64, 4))  # stripes
    covered = np.ones(frame.shape, bool)
    assert screen_reason(frame, frame, covered, ExposureLimits(), None) is None
    covered[:, : int(frame.shape[1] * (1 - MIN_COVERED)) + 1] = False
    assert screen_reason(frame, frame, covered, ExposureLimits(), None).kind == RefusalKind.COVERS_LITTLE
    boxes = torch.tensor([[0.0, 0.0, 4.0, 4.0], [40.0, 10.0, 50.0, 20.0]])
    det = Detections(boxes, torch.tensor([0.9, 0.8]), torch.tensor([0, 1]), ["open", "short"], torch.zeros(1, 2), {},
                     LetterboxMeta(1.0, 0, 0, 64, 64))  # fmt: skip
    masked = mask_uncovered(det, covered)
    assert masked.names == ["short"] and masked.boxes.tolist() == [[40.0, 10.0, 50.0, 20.0]]
    assert mask_uncovered(det, None) is det
    baseline = type("Baseline", (), {"image_levels": np.array([2.0, 255.0, 250.0, 0.2])})()
    assert calibration_levels(None, baseline, {"image_levels": [0, 0, 9, 0]}) == {"dark": 2.0, "bright": 250.0, "pixel_levels": None}
    assert calibration_levels({"image_levels": None}) is None


def test_a_pass_under_a_critical_drift_alert_is_suspect_counted_and_exits_3(
    tmp_path: Path, golden: np.ndarray, capsys: pytest.CaptureFixture[str]
) -> None:
    """A black frame raises a critical drift alert at once; a clean board after it has no call but is not a plain pass."""
    frames = tmp_path / "frames"
    frames.mkdir()
    assert cv2.imwrite(str(frames / "0_black.png"), np.zeros_like(golden))
    assert cv2.imwrite(str(frames / "1_clean.png"), golden)  # a defect-free board: no call
    with Inspector.load(DEFAULT_WEIGHTS, device="cpu", threads=1) as inspector:
        black, clean = (inspector.inspect(load_image_gray(p), p.name) for p in sorted(frames.iterdir()))
    assert black.verdict == "not_inspected" and clean.drift == "critical" and len(clean.detections) == 0
    assert clean.verdict == "pass_suspect" and clean.reason.startswith("drift critical: ")
    out = tmp_path / "pred.json"
    assert main(["predict", str(frames), "--device", "cpu", "--threads", "1", "--save-json", str(out)]) == 3
    printed = capsys.readouterr()
    assert "PASS SUSPECT 1 (drift critical x1)" in printed.out and "1 passed as suspect (pass_suspect: drift critical)" in printed.err
    assert [r["verdict"] for r in json.loads(out.read_text())] == ["not_inspected", "pass_suspect"]
    assert main(["predict", str(frames), "--device", "cpu", "--threads", "1", "--allow-skips"]) == 0


def test_an_underexposed_frame_raises_a_critical_drift_alert_at_once(board: np.ndarray, golden: np.ndarray) -> None:
    """Like a blank frame: the light changed, so the line is told now, and a clean board after it is a suspect pass."""
    with Inspector.load(DEFAULT_WEIGHTS, device="cpu", threads=1) as inspector:
        dim = inspector.inspect(_light(board, 0.3), "dim.png")
        clean = inspector.inspect(golden, "clean.png")
    assert dim.verdict == "not_inspected" and [(e.event, e.severity) for e in dim.events] == [("drift", "critical")]
    assert dim.events[0].reason.startswith("underexposed: 30% of the calibration frames' level")
    assert clean.verdict == "pass_suspect"
