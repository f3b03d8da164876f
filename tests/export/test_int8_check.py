"""The int8 export checks its own accuracy on held-back frames and refuses a model that disagrees with float32
(issue 33: a third of the single-image model's mAP was lost without a word on a CPU without VNNI)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from small_checkpoint import write_small_checkpoint

from defect_detector.data.letterbox import letterbox
from defect_detector.data.synth import generate_board, write_synthetic_dataset
from defect_detector.export import export_onnx
from defect_detector.export.calibration_data import calibration_inputs
from defect_detector.export.deploy_model import ExportError
from defect_detector.export.int8_check import MIN_CALLS, Agreement, call_agreement, refusal
from defect_detector.model.checkpoint import load_checkpoint

pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install '.[onnx]')")

IMGSZ = 128
LOOSE = {"conf": 0.01, "iou": 0.5}
"""A score threshold low enough that a random small model makes calls to compare."""


def test_held_back_frames_are_images_the_calibration_does_not_use(tmp_path: Path) -> None:
    calib = write_synthetic_dataset(tmp_path / "calib", n_images=10, height=96, width=128, seed=1)
    frames, check = calibration_inputs(calib, IMGSZ, 1, max_images=4, held_back=3)
    assert frames.shape == (4, 1, IMGSZ, IMGSZ) and check.shape == (3, 1, IMGSZ, IMGSZ)
    assert not any(np.array_equal(c, f) for c in check for f in frames)  # other boards (each synthetic board differs)
    again = calibration_inputs(calib, IMGSZ, 1, max_images=4, held_back=3)
    assert np.array_equal(again[0], frames) and np.array_equal(again[1], check)  # the same split every time
    all_frames, none = calibration_inputs(calib, IMGSZ, 1, max_images=10, held_back=3)
    assert len(all_frames) == 10 and none.shape[0] == 0  # nothing left to hold back: the calibration keeps every image
    assert np.array_equal(calibration_inputs(calib, IMGSZ, 1, max_images=4)[0], frames)  # holding back moves no calibration frame


def test_agreement_and_refusal() -> None:
    same = Agreement(frames=4, float_calls=20, int8_calls=20, matched=20)
    broken = Agreement(frames=4, float_calls=60, int8_calls=35, matched=35)
    assert same.f1 == 1.0 and refusal(same, Path("m.onnx")) is None
    line = refusal(broken, Path("m.onnx"))
    assert line is not None and "\n" not in line
    assert line.startswith("m.onnx: not written: the int8 model keeps 35 of the float32 model's 60 calls") and "F 0.74" in line
    weak = Agreement(frames=4, float_calls=MIN_CALLS - 1, int8_calls=0, matched=0)
    assert not weak.conclusive and refusal(weak, Path("m.onnx")) is None  # too few calls to judge: warned, not refused
    assert Agreement(frames=2, float_calls=0, int8_calls=0, matched=0).f1 == 1.0


def _frames(n: int) -> np.ndarray:
    boards = [generate_board(96, 128, np.random.default_rng(i))[0] for i in range(n)]
    return np.stack([letterbox(b, IMGSZ)[0][None] for b in boards])


def test_call_agreement_tells_a_model_from_another(tmp_path: Path) -> None:
    paths = []
    for seed in (2, 3):
        checkpoint = write_small_checkpoint(tmp_path / f"s{seed}.pt", IMGSZ, seed=seed)
        paths.append(tmp_path / f"s{seed}.onnx")
        export_onnx(load_checkpoint(checkpoint), paths[-1])
    frames = _frames(3)
    itself = call_agreement(paths[0], paths[0], frames, LOOSE)
    assert itself.conclusive and itself.matched == itself.float_calls == itself.int8_calls and itself.f1 == 1.0
    other = call_agreement(paths[0], paths[1], frames, LOOSE)
    assert other.conclusive and other.f1 < 0.9 and refusal(other, tmp_path / "x.onnx") is not None


def test_export_int8_refuses_a_broken_model_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from defect_detector.export import int8

    loaded = load_checkpoint(write_small_checkpoint(tmp_path / "small.pt", IMGSZ, seed=2))
    other = tmp_path / "other.onnx"
    export_onnx(load_checkpoint(write_small_checkpoint(tmp_path / "other.pt", IMGSZ, seed=3)), other)
    calib = write_synthetic_dataset(tmp_path / "calib", n_images=8, height=IMGSZ, width=IMGSZ, seed=1)
    monkeypatch.setattr(int8, "quantize_onnx", lambda float_path, out_path, frames, target: shutil.copy(other, out_path))
    monkeypatch.setattr(int8, "call_agreement", lambda a, b, frames, point: call_agreement(a, b, frames, LOOSE))
    out = tmp_path / "small.int8.onnx"
    with pytest.raises(ExportError, match=r"small.int8.onnx: not written: the int8 model keeps \d+ of"):
        int8.export_int8(loaded, out, calib, max_images=4)
    assert not out.exists() and not (tmp_path / "small.int8.meta.json").exists()


def test_onnx_runtimes_root_info_lines_are_kept_out_of_the_export_log(caplog: pytest.LogCaptureFixture) -> None:
    """ONNX Runtime's quantizer logs each bias it copies at INFO on the root logger: hundreds of lines for the
    golden-template model's export. They are dropped while it runs; the root logger's level comes back after."""
    import logging

    from defect_detector.export.int8 import _root_log_quiet

    root = logging.getLogger()
    before = root.level
    root.setLevel(logging.INFO)
    try:
        with caplog.at_level(logging.INFO):
            with _root_log_quiet():
                logging.info("Created a copy of bias input 'b' called 'b0'")
                logging.warning("a real warning")
            logging.info("after")
        assert [r.getMessage() for r in caplog.records] == ["a real warning", "after"]
        assert root.level == logging.INFO
    finally:
        root.setLevel(before)
