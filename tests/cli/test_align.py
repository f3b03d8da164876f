"""``defect-detector align`` (issue 58, deliver 2): the golden image registered into a board's pixels through predict's
prepare stage, written with its record for Triton, ONNX and C++ callers; a pair predict refuses gets only its record,
saying why, and a non-zero exit; bad input is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from golden_pairs import CALIB, gray

from benchmarks.hidden_roc import faulted
from defect_detector.cli.main import main
from defect_detector.core.refusal import RefusalKind
from defect_detector.data.images import load_image_gray

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
NAME = "50600000_test.jpg"


def _moved(image: np.ndarray, dx: float = 9.0, dy: float = -6.0, angle: float = 1.0) -> np.ndarray:
    """``image`` turned by ``angle`` degrees about its centre and shifted by ``(dx, dy)`` px (edges replicated)."""
    h, w = image.shape
    matrix = cv2.getRotationMatrix2D((w / 2, h / 2), angle, 1.0)
    matrix[:, 2] += (dx, dy)
    return cv2.warpAffine(image, matrix, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def _record(out: Path, stem: str) -> dict:
    return json.loads((out / f"{stem}.json").read_text())


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("defect-detector align: error: "), lines[0]
    return lines[0]


def test_a_moved_board_gets_its_golden_image_in_its_own_pixels(tmp_path: Path) -> None:
    """A DeepPCB board turned 1 degree and shifted 9, -6 px: the written golden image lies on the board's pixels (its mean
    difference from the board a fraction of the raw golden image's), the board's size, and the record says how."""
    board, golden = _moved(load_image_gray(SAMPLES / "deeppcb" / NAME)), load_image_gray(SAMPLES / "golden" / NAME)
    assert cv2.imwrite(str(tmp_path / "board.png"), board) and cv2.imwrite(str(tmp_path / "golden.png"), golden)
    out = tmp_path / "aligned"
    assert main(["align", str(tmp_path / "board.png"), "--reference", str(tmp_path / "golden.png"), "--out", str(out)]) == 0
    registered = cv2.imread(str(out / "board.png"), cv2.IMREAD_UNCHANGED)
    assert registered.dtype == np.uint8 and registered.shape == board.shape
    inner = (slice(40, -40), slice(40, -40))  # away from the edges the move brought in
    before = np.abs(golden.astype(np.int16) - board)[inner].mean()
    after = np.abs(registered.astype(np.int16) - board)[inner].mean()
    assert after < 0.25 * before, (before, after)
    record = _record(out, "board")
    assert record["board"] == "board.png" and record["golden"] == "golden.png" and record["image"] == "board.png"
    assert not record["refused"] and record["refusal"] is None and record["size"] == [board.shape[1], board.shape[0]]
    reg = record["registration"]
    assert abs(abs(reg["angle"]) - 1.0) < 0.2 and 8.0 < reg["shift"] < 14.0 and reg["score"] > 0.5
    assert abs(reg["scale"] - 1.0) < 0.01 and {"model", "perspective", "lens", "grid", "local"} <= set(reg)
    assert reg["photometric"] is not None and 0.9 < record["covered"] <= 1.0 and record["design_warning"] is None


def test_a_golden_image_of_another_board_and_a_hand_are_refused_with_their_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder of boards against a folder of golden images matched by name: the golden image of another design, and a
    board with a hand over it, get a record naming the refusal's kind and no image (an earlier one is removed), the
    good pair its image, and the run exits 3 after writing every record."""
    boards, goldens, out = tmp_path / "boards", tmp_path / "goldens", tmp_path / "aligned"
    boards.mkdir(), goldens.mkdir(), out.mkdir()
    board, golden = load_image_gray(SAMPLES / "deeppcb" / NAME), load_image_gray(SAMPLES / "golden" / NAME)
    hand = faulted(board, "hand", 0.03, (320.0, 320.0), np.random.default_rng(1))
    for name, image, reference in (
        ("good.png", board, golden),
        ("hand.png", hand, golden),
        ("other.png", gray(CALIB / "00041014_test.jpg"), gray(CALIB / "13000044_temp.jpg")),
    ):
        assert cv2.imwrite(str(boards / name), image) and cv2.imwrite(str(goldens / name), reference)
    (out / "other.png").write_bytes(b"a golden image written by an earlier run")
    assert main(["align", str(boards), "--reference", str(goldens), "--out", str(out)]) == 3
    assert "2 of 3 pairs refused" in capsys.readouterr().err
    assert (out / "good.png").is_file() and not (out / "hand.png").exists() and not (out / "other.png").exists()
    assert not _record(out, "good")["refused"]
    hidden, other = _record(out, "hand"), _record(out, "other")
    assert hidden["refused"] and hidden["image"] is None and hidden["refusal"]["kind"] == RefusalKind.HIDDEN.value
    assert "x 320, y 320" in hidden["refusal"]["message"] and hidden["refusal"]["values"]["share"] > 0.0  # where the hand is
    assert other["refused"] and other["refusal"]["kind"] == RefusalKind.REFERENCE_MISMATCH.value
    assert other["golden"] == "other.png" and "golden image" in other["refusal"]["message"]


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("no board", "no such file or folder"),
        ("no golden image", "reference image or folder not found"),
        ("out inside the boards", "inside the boards' folder"),
        ("a video", "not a video"),
        ("out is a file", "a file; align writes a folder"),
    ],
)
def test_bad_input_is_one_line_exit_2(case: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    boards = tmp_path / "boards"
    boards.mkdir()
    assert cv2.imwrite(str(boards / "board.png"), load_image_gray(SAMPLES / "deeppcb" / NAME))
    assert cv2.imwrite(str(tmp_path / "golden.png"), load_image_gray(SAMPLES / "golden" / NAME))
    (tmp_path / "clip.mp4").write_bytes(b"")
    (tmp_path / "taken").write_text("a file")
    board, golden, out = str(boards), str(tmp_path / "golden.png"), str(tmp_path / "aligned")
    board = {"no board": str(tmp_path / "missing"), "a video": str(tmp_path / "clip.mp4")}.get(case, board)
    golden = str(tmp_path / "missing.png") if case == "no golden image" else golden
    out = {"out inside the boards": str(boards / "aligned"), "out is a file": str(tmp_path / "taken")}.get(case, out)
    assert main(["align", board, "--reference", golden, "--out", out]) == 2
    assert words in _one_error_line(capsys)
    assert not (boards / "aligned").exists() and not (tmp_path / "aligned").exists()
