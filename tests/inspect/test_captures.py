"""Issue 42: a board captured as a line delivers it (moved, turned, at another gain) against its golden image. The
seam where the moved board does not cover the golden image is no call, and the photometric registration takes the
gain out: a defect-free board makes no call and is not refused."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from defect_detector.data.images import load_image_gray
from defect_detector.inspect.inspector import Inspector
from defect_detector.looks.render import render_pair, sample_look
from defect_detector.model.checkpoint import PHOTO_REFERENCE_WEIGHTS

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


@pytest.mark.parametrize("index", [0, 2])
def test_a_defect_free_board_moved_and_at_another_gain_makes_no_call(index: int, tmp_path: Path) -> None:
    name = sorted((SAMPLES / "deeppcb").glob("*.jpg"))[index].name
    layout = load_image_gray(SAMPLES / "golden" / name)
    rng = np.random.default_rng(index)
    _, golden = render_pair(layout, layout, sample_look(rng, "train"), rng)
    h, w = golden.shape
    move = cv2.getRotationMatrix2D((w / 2, h / 2), 1.2, 1.0)
    move[:, 2] += (18, -14)
    board = np.clip(cv2.warpAffine(golden, move, (w, h), borderMode=cv2.BORDER_REFLECT_101) * 1.12 + 4, 0, 255).astype(np.uint8)
    assert cv2.imwrite(str(tmp_path / "golden.png"), golden)
    with Inspector.load(PHOTO_REFERENCE_WEIGHTS, reference=tmp_path / "golden.png", device="cpu", threads=1, monitor=False) as inspector:
        record = inspector.inspect(board, name="board.png")
    assert record.verdict == "pass" and len(record.detections) == 0
    assert record.registration.photometric.gain == pytest.approx(1.12, abs=0.04)
    assert abs(record.registration.shift_px - np.hypot(18, 14)) < 8
