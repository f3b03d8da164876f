"""``defect-detector predict``: JSON in original pixels, annotated outputs, video/JSONL, frame callbacks."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from small_checkpoint import write_small_checkpoint

from defect_detector.cli import build_parser, main
from defect_detector.config import DEEPPCB_CLASSES
from defect_detector.data.synth import generate_board
from defect_detector.deploy.predict import run_predict
from defect_detector.deploy.runtime import Detections, Runtime
from defect_detector.deploy.sources import Frame

pytestmark = pytest.mark.usefixtures("one_thread")

IMGSZ = 128
H, W = 1536, 2048


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_checkpoint(tmp_path_factory.mktemp("ckpt") / "small.pt", IMGSZ)


@pytest.fixture(scope="module")
def boards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("boards")
    for i in range(2):
        assert cv2.imwrite(str(folder / f"board_{i}.png"), generate_board(H, W, np.random.default_rng(i))[0])
    (folder / "broken.png").write_bytes(b"not an image")
    (folder / "notes.txt").write_text("ignored")
    return folder


def test_predict_folder_writes_original_pixel_json_and_annotations(
    checkpoint: Path, boards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json, out_dir = tmp_path / "pred.json", tmp_path / "annotated"
    argv = ["predict", str(boards), "--weights", str(checkpoint), "--save-json", str(out_json), "--save-dir", str(out_dir),
            "--threads", "1", "--batch", "2", "--device", "cpu"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "frames 3 (processed 2, skipped 1)" in printed
    assert "to score mAP (pycocotools) keep the whole ranking: --conf 0.001" in printed

    records = json.loads(out_json.read_text())
    assert records, "the test model should produce detections"
    assert {r["file_name"] for r in records} <= {"board_0.png", "board_1.png"}
    for r in records:
        x, y, w, h = r["bbox"]
        assert set(r) == {"file_name", "category_name", "bbox", "score"}
        assert r["category_name"] in DEEPPCB_CLASSES and r["score"] >= 0.25
        assert 0 <= x and 0 <= y and w >= 0 and h >= 0 and x + w <= W + 0.01 and y + h <= H + 0.01

    runtime = Runtime.load(checkpoint, device="cpu")
    for name in ("board_0.png", "board_1.png"):
        image = cv2.imread(str(boards / name), cv2.IMREAD_GRAYSCALE)
        expected = runtime.predict([image])[0]
        got = [r for r in records if r["file_name"] == name]
        assert len(got) == len(expected)
        boxes = np.array([r["bbox"] for r in got]).reshape(-1, 4)
        want = expected.boxes.numpy().copy()
        want[:, 2:] -= want[:, :2]
        np.testing.assert_allclose(boxes, want, atol=0.02)
        assert [r["category_name"] for r in got] == expected.names

        annotated = cv2.imread(str(out_dir / name), cv2.IMREAD_UNCHANGED)
        assert annotated.shape == (H, W, 3)
        assert (annotated[:, :, 2].astype(int) - annotated[:, :, 1]).max() > 100  # red boxes drawn on a gray board
    assert not (out_dir / "broken.png").exists()


def test_predict_video_writes_frames_jsonl_and_mp4(checkpoint: Path, tmp_path: Path) -> None:
    video = tmp_path / "line.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 5.0, (320, 240))
    for i in range(4):
        writer.write(cv2.cvtColor(generate_board(240, 320, np.random.default_rng(i))[0], cv2.COLOR_GRAY2BGR))
    writer.release()
    out_json, out_dir = tmp_path / "video.json", tmp_path / "out"
    argv = ["predict", str(video), "--weights", str(checkpoint), "--save-json", str(out_json), "--save-dir", str(out_dir), "--conf", "0.2"]
    assert main(argv) == 0
    records = json.loads(out_json.read_text())
    assert records and all(r["file_name"] == "line.avi" and 0 <= r["frame"] < 4 for r in records)
    lines = [json.loads(line) for line in (tmp_path / "video.jsonl").read_text().splitlines()]
    assert [line["frame"] for line in lines] == [0, 1, 2, 3]
    assert sum(len(line["detections"]) for line in lines) == len(records)
    capture = cv2.VideoCapture(str(out_dir / "line.mp4"))
    assert capture.isOpened() and int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == 4


def test_on_frame_callbacks_and_max_frames(checkpoint: Path, boards: Path) -> None:
    seen: list[tuple[int, str, tuple[int, ...] | None]] = []

    def record(frame: Frame, result: Detections | None) -> None:
        seen.append((frame.index, frame.file_name, None if result is None else tuple(result.stats.shape)))

    args = build_parser().parse_args(["predict", str(boards), "--weights", str(checkpoint), "--max-frames", "2"])
    runtime = Runtime.load(checkpoint, device="cpu")
    summary = run_predict(args, on_frame=[record], runtime=runtime)
    layers = len(runtime.layer_names)
    assert seen == [(0, "board_0.png", (layers, 2)), (1, "board_1.png", (layers, 2))]
    assert summary["frames"] == 2 and summary["processed"] == 2 and summary["skipped"] == 0
    assert set(summary["mean_ms"]) == {"decode", "preprocess", "model", "postprocess"}


def test_predict_errors(checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", str(tmp_path / "missing_dir"), "--weights", str(checkpoint)]) == 2
    assert "no such file" in capsys.readouterr().err
    assert cv2.imwrite(str(tmp_path / "a.png"), np.zeros((32, 32), np.uint8))
    assert main(["predict", str(tmp_path), "--weights", str(tmp_path / "missing.pt")]) == 2
    assert "weights file not found" in capsys.readouterr().err
    assert main(["predict", str(tmp_path), "--weights", str(checkpoint), "--tta", "d4"]) == 2
    assert "unknown TTA mode 'd4'" in capsys.readouterr().err
    keep_all = ["--conf", "0.001", "--save-json", str(tmp_path / "p.json")]
    assert main(["predict", str(tmp_path), "--weights", str(checkpoint), "--tta", "flip2", *keep_all]) == 0
    printed = capsys.readouterr().out
    assert "test-time augmentation: flip2" in printed and "to score mAP" not in printed
    with pytest.raises(ValueError, match="--batch"):
        run_predict(argparse.Namespace(**{**vars(build_parser().parse_args(["predict", "x"])), "batch": 0}))
