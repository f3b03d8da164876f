"""The CLI's error boundary: every expected failure is one line ``defect-detector CMD: error: <file>: <problem>``
with exit status 2 (tests/README.md lists the cases); predict never replaces an earlier run's outputs when it
fails; a stream that gives up, a truncated video, a shrunk frame and colour input are reported."""

from __future__ import annotations

import errno
import json
import logging
import os
import zipfile
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
import yaml
from small_checkpoint import write_small_checkpoint

from defect_detector.cli import main as cli
from defect_detector.cli.errors import error_line, worker_message
from defect_detector.cli.main import main
from defect_detector.cli.parser import build_parser
from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.core.errors import DatasetError
from defect_detector.core.frame import Frame
from defect_detector.core.frame_record import Prepared
from defect_detector.core.types import Detections
from defect_detector.data.collate import build_loader
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.data.synth import generate_board, write_synthetic_dataset
from defect_detector.export import export_torchscript
from defect_detector.inspect import inspector as inspector_module
from defect_detector.inspect import outputs as outputs_module
from defect_detector.inspect.outputs import Outputs
from defect_detector.inspect.record import Inspection
from defect_detector.inspect.run_guard import RUN_TOKEN
from defect_detector.inspect.sources import open_source
from defect_detector.model.checkpoint import load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")

IMGSZ = 64


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_checkpoint(tmp_path_factory.mktemp("ckpt") / "small.pt", IMGSZ)


@pytest.fixture(scope="module")
def artifact(checkpoint: Path) -> Path:
    out = checkpoint.with_name("small.torchscript.pt")
    export_torchscript(load_checkpoint(checkpoint), out, optimize=False)
    return out


@pytest.fixture(scope="module")
def frames(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("frames")
    assert cv2.imwrite(str(folder / "board.png"), generate_board(96, 128, np.random.default_rng(0))[0])
    return folder


def _one_error_line(capsys: pytest.CaptureFixture[str], command: str) -> str:
    """The single stderr line of a failed command, without its ``defect-detector CMD: error: `` prefix."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("defect-detector")]
    assert len(lines) == 1 and "Traceback" not in err, err  # (a progress bar may share stderr)
    prefix = f"defect-detector {command}: error: "
    assert lines[0].startswith(prefix), lines[0]
    return lines[0][len(prefix) :]


def _write_video(path: Path, n: int, colour: bool = False) -> Path:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 5.0, (96, 64))
    for i in range(n):
        board = generate_board(64, 96, np.random.default_rng(i))[0]
        frame = cv2.cvtColor(board, cv2.COLOR_GRAY2BGR)
        if colour:
            frame[..., 2] = 255 - frame[..., 2]
        writer.write(frame)
    writer.release()
    return path


def test_every_subcommand_has_a_handler() -> None:
    sub = next(a for a in build_parser(cli.COMMANDS)._actions if a.dest == "command")
    assert set(sub.choices) == set(cli.COMMANDS)


def test_write_failure_names_the_file_and_keeps_the_earlier_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    images, labels = tmp_path / "images", tmp_path / "labels"
    images.mkdir(), labels.mkdir()
    assert cv2.imwrite(str(images / "a.png"), np.zeros((32, 32), np.uint8))
    (labels / "a.txt").write_text("0 0.5 0.5 0.25 0.25\n")
    out = tmp_path / "out" / "coco.json"
    argv = ["convert", "yolo", str(labels), "--images", str(images), "--classes", "open", "--out", str(out)]
    assert main(argv) == 0
    before = out.read_bytes()

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", disk_full)
    assert main(argv) == 2
    assert _one_error_line(capsys, "convert") == f"{out}: {os.strerror(errno.ENOSPC)}"
    assert out.read_bytes() == before and sorted(p.name for p in out.parent.iterdir()) == ["coco.json"]  # no temp file left


def test_val_imgsz_must_be_a_multiple_of_32(checkpoint: Path, synth_coco: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["val", "--weights", str(checkpoint), "--data", str(synth_coco), "--imgsz", "100"]) == 2
    assert _one_error_line(capsys, "val") == "--imgsz must be a multiple of 32 and >= 64, got 100"


def _forge(artifact: Path, out: Path, meta_text: str | None = None, **changes: object) -> Path:
    """A copy of the TorchScript ``artifact`` whose meta.json is ``meta_text``, or the original with ``changes``."""
    with zipfile.ZipFile(artifact) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename.endswith("/extra/meta.json"):
                data = (meta_text if meta_text is not None else json.dumps({**json.loads(data), **changes})).encode()
            dst.writestr(item, data)
    return out


FORGED = [
    ({"layers": "stem"}, "meta.json layers must be a list of layer names, got 'stem'"),
    ({"class_names": ["open"]}, "meta.json class_names lists 1 classes, the model predicts 6"),
    ({"strides": [8, 16]}, "meta.json strides [8, 16] at imgsz 64 give 80 anchors, the model 84"),
    ({"imgsz": 100}, "meta.json imgsz must be a positive multiple of the largest stride (32), got 100"),
    ({"layers": ["stem"]}, "meta.json layers lists 1 layers, the model reports statistics of 4"),
    ({"channels": 2}, "the model does not run on the input meta.json describes ([1, 2, 64, 64]: keys channels, imgsz)"),
    ({"baseline": {"layers": []}}, "meta.json baseline: missing keys"),
    ({"format_version": 0}, "artifact format_version 0, this runtime reads"),
    ({"half": "yes"}, "meta.json half must be true or false, got 'yes'"),
    ({"pixel_scale": -1}, "meta.json pixel_scale must be null or a positive number, got -1"),
    ({"strides": [8, 0]}, "meta.json strides must be a non-empty list of positive integers, got [8, 0]"),
    ({"calibrated_by": "me"}, "meta.json calibrated_by: unknown key (known: aoti_device, baseline, channels, "),
    (
        {"operating_point": {"conf": 0.4, "iou": 0.6, "cross_class_iou": 2}},
        "meta.json operating_point must be cross_class_iou, cross_class_factor, merge_ios and hidden_max_area null or in [0, 1]",
    ),
    # forgeries every key check passes: the digest of graph, weights and meta refuses them (they used to run)
    ({"class_names": list(reversed(DEEPPCB_CLASSES))}, "meta.json does not match the model it is packed with (digest "),
    ({"pixel_scale": 4.0}, "meta.json does not match the model it is packed with (digest "),
    ({"digest": None}, "meta.json carries no digest of the graph and weights"),
]


@pytest.mark.parametrize(("changes", "problem"), FORGED, ids=[next(iter(c)) + str(i) for i, (c, _) in enumerate(FORGED)])
def test_forged_meta_json_is_one_line_naming_the_file_and_key(
    artifact: Path, frames: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict, problem: str
) -> None:
    forged = _forge(artifact, tmp_path / "forged.pt", **changes)
    assert main(["predict", str(frames), "--weights", str(forged), "--threads", "1"]) == 2
    line = _one_error_line(capsys, "predict")
    assert line.startswith(f"{forged}: ") and problem in line, line


def test_a_meta_json_copied_onto_a_foreign_model_is_refused(
    artifact: Path, frames: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = write_small_checkpoint(tmp_path / "other.pt", IMGSZ, seed=1)  # same shapes, other weights
    foreign = tmp_path / "foreign.torchscript.pt"
    export_torchscript(load_checkpoint(other), foreign, optimize=False)
    with zipfile.ZipFile(artifact) as src:
        meta_text = next(src.read(n) for n in src.namelist() if n.endswith("/extra/meta.json")).decode()
    forged = _forge(foreign, tmp_path / "forged.torchscript.pt", meta_text=meta_text)
    assert main(["predict", str(frames), "--weights", str(forged), "--threads", "1"]) == 2
    assert "meta.json does not match the model it is packed with" in _one_error_line(capsys, "predict")
    assert main(["predict", str(frames), "--weights", str(foreign), "--threads", "1"]) == 0  # the genuine one loads


@pytest.mark.parametrize(("text", "problem"), [("[1, 2]", "must be a JSON object, got list"), ("{oops", "is not valid JSON")])
def test_meta_json_that_is_no_object(artifact: Path, frames: Path, tmp_path: Path, capsys, text: str, problem: str) -> None:
    forged = _forge(artifact, tmp_path / "forged.pt", meta_text=text)
    assert main(["predict", str(frames), "--weights", str(forged)]) == 2
    assert problem in _one_error_line(capsys, "predict")


def test_interrupt_exits_130_and_a_bug_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.COMMANDS["info"], "run", interrupted)
    assert main(["info"]) == 130
    assert capsys.readouterr().err.strip() == "defect-detector info: interrupted"

    def bug(args: object) -> None:
        raise KeyError("not an input problem")

    monkeypatch.setattr(cli.COMMANDS["info"], "run", bug)
    with pytest.raises(KeyError):
        main(["info"])


def test_worker_exception_is_unwrapped_to_its_message(tmp_path: Path) -> None:
    ann = write_synthetic_dataset(tmp_path / "boards", n_images=4, height=64, width=64, seed=0)
    broken = ann.parent / "images" / "synth_00002.png"
    broken.write_bytes(b"\x89PNG broken")
    dataset = CocoDetectionDataset(ann, None, ("open", "short", "mousebite", "spur", "copper", "pin-hole"), 64, on_bad="error")
    loader = build_loader(dataset, 1, train=False, workers=2, seed=0)
    with pytest.raises(DatasetError) as info:
        list(loader)
    assert "DataLoader worker process" in str(info.value) and "Traceback" in str(info.value)  # what torch hands back
    assert error_line(info.value) == f"{broken}: corrupt or unsupported image (decode failed)"
    assert worker_message("plain message\nsecond line") == "plain message\nsecond line"


def test_train_with_on_bad_sample_error_and_two_workers_is_one_line(
    tmp_path: Path, tiny_config, capsys: pytest.CaptureFixture[str]
) -> None:
    ann = write_synthetic_dataset(tmp_path / "boards", n_images=4, height=64, width=64, seed=0)
    broken = ann.parent / "images" / "synth_00001.png"
    broken.write_bytes(b"\x89PNG broken")
    cfg = tiny_config(ann, tmp_path / "runs", imgsz=64, epochs=1).to_dict()
    cfg["data"].update(workers=2, on_bad_sample="error")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["train", "--config", str(tmp_path / "cfg.yaml"), "--threads", "1"]) == 2
    assert _one_error_line(capsys, "train") == f"{broken}: corrupt or unsupported image (decode failed)"


def test_non_finite_loss_is_one_line(tmp_path: Path, synth_coco: Path, tiny_config, monkeypatch, capsys) -> None:
    from defect_detector.model.loss import DetectionLoss

    monkeypatch.setattr(DetectionLoss, "__call__", lambda self, raw, *a: (raw.sum() * float("nan"), {}))
    cfg = tiny_config(synth_coco, tmp_path / "runs", imgsz=64, epochs=1, max_bad_steps=0).to_dict()
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["train", "--config", str(tmp_path / "cfg.yaml"), "--threads", "1"]) == 2
    assert "non-finite loss" in _one_error_line(capsys, "train")


def test_failed_predict_keeps_the_earlier_outputs(checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    video = _write_video(tmp_path / "line.avi", 3)
    out = tmp_path / "out"
    argv = ["--weights", str(checkpoint), "--save-json", str(out / "det.json"), "--save-dir", str(out / "annotated"), "--conf", "0.2"]
    assert main(["predict", str(video), *argv]) == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert {str(p) for p in before} == {"det.json", "det.jsonl", "annotated/line.mp4"} and json.loads(before[Path("det.json")])

    broken = tmp_path / "line.mp4"
    broken.write_bytes(b"\x00\x00\x00\x18ftypmp42 truncated")
    assert main(["predict", str(broken), *argv]) == 2
    assert _one_error_line(capsys, "predict").startswith(f"{broken}: cannot open video file")
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before  # the same files, byte for byte: no temp file left, nothing emptied


def test_stream_that_gives_up_exits_2_after_writing_its_frames(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Dropping:
        """A camera that gives two frames, then fails and never opens again."""

        def __init__(self, frames: int) -> None:
            self.frames = frames

        def isOpened(self) -> bool:  # noqa: N802 - OpenCV's name
            return self.frames > 0

        def read(self) -> tuple[bool, np.ndarray | None]:
            self.frames -= 1
            board = np.random.default_rng(self.frames).integers(0, 256, (48, 64, 3), dtype=np.uint8)  # not blank
            return (True, board) if self.frames >= 0 else (False, None)

        def get(self, prop: int) -> float:
            return 0.0

        def release(self) -> None:
            pass

    cameras = iter([Dropping(2)])

    def fake_open(source: str, latest_only: bool = False):
        factory = lambda target: next(cameras, Dropping(0))  # noqa: E731
        return open_source(source, latest_only, capture_factory=factory, reconnect_attempts=2, reconnect_delay=0.001)

    monkeypatch.setattr(inspector_module, "open_source", fake_open)
    out = tmp_path / "cam.json"
    assert main(["predict", "0", "--weights", str(checkpoint), "--save-json", str(out)]) == 2
    captured = capsys.readouterr()
    assert "frames 2: pass" in captured.out and f"wrote json: {out}" in captured.out
    line = captured.err.strip().splitlines()[-1]
    assert line.startswith("defect-detector predict: error: 0: the stream failed and could not be reopened") and "after 2 frames" in line
    assert len(out.with_suffix(".jsonl").read_text().splitlines()) == 2


def test_frame_shrunk_over_8x_warns_once_without_tiling(checkpoint: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for i in range(2):
        board = np.random.default_rng(i).integers(0, 256, (600, 560), dtype=np.uint8)  # not blank: it is inspected
        assert cv2.imwrite(str(tmp_path / f"big{i}.png"), board)
    with caplog.at_level(logging.WARNING, logger="defect_detector.inspect"):
        assert main(["predict", str(tmp_path), "--weights", str(checkpoint), "--no-tile"]) == 0
    warnings = [r.getMessage() for r in caplog.records if "letterboxed whole" in r.getMessage()]
    assert warnings == ["560x600 frame letterboxed whole to 64: shrunk 9x, and its defects with it; --tile keeps their scale"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="defect_detector.inspect"):
        assert main(["predict", str(tmp_path), "--weights", str(checkpoint), "--tile"]) == 0
    assert not any("letterboxed whole" in r.getMessage() for r in caplog.records)


def test_colour_video_warns_once_and_a_gray_one_not(checkpoint: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    gray, colour = _write_video(tmp_path / "gray.avi", 3), _write_video(tmp_path / "colour.avi", 3, colour=True)
    with caplog.at_level(logging.WARNING):
        assert main(["predict", str(gray), "--weights", str(checkpoint)]) == 0
        assert not any("converting" in r.getMessage() for r in caplog.records)  # a decoder's BGR of a gray board
        assert main(["predict", str(colour), "--weights", str(checkpoint)]) == 0
    notes = [r for r in caplog.records if "converting colour input" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.WARNING and str(colour) in notes[0].getMessage()


def test_truncated_video_says_it_ended_early(checkpoint: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys) -> None:
    video = _write_video(tmp_path / "long.avi", 30)
    data = video.read_bytes()
    video.write_bytes(data[: len(data) * 6 // 10])
    out = tmp_path / "det.json"
    with caplog.at_level(logging.WARNING, logger="defect_detector.inspect"):  # exit 2 like a truncated mp4 (it was 0)
        assert main(["predict", str(video), "--weights", str(checkpoint), "--save-json", str(out)]) == 2
    ended = [r.getMessage() for r in caplog.records if "video ended after" in r.getMessage()]
    assert len(ended) == 1 and ended[0].startswith(f"{video}: video ended after ") and " of 30 frames" in ended[0]
    read = int(ended[0].split("after ")[1].split(" of")[0])
    assert 0 < read < 30
    line = _one_error_line(capsys, "predict")
    assert line == (
        f"{video}: the video ended after {read} of the 30 frames its header lists (truncated or corrupt file); "
        "the outputs above hold those frames"
    )
    assert len(out.with_suffix(".jsonl").read_text().splitlines()) == read  # the frames it had are written


def _video_outputs(tmp_path: Path) -> tuple[Outputs, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    source = open_source(str(_write_video(tmp_path / "cam.avi", 1)))
    out = tmp_path / "out" / "det.json"
    out.parent.mkdir()
    out.write_text("[1]")
    out.with_suffix(".jsonl").write_text("earlier\n")
    outputs = Outputs(source, ["open"], str(out), str(tmp_path / "out"))
    frame = Frame(0, np.zeros((8, 8), np.uint8), "cam.avi", "cam.avi", 0.0)
    empty = torch.zeros(0)
    outputs.add(Inspection.finish(Prepared(frame), Detections(empty.reshape(0, 4), empty, empty.long(), [], torch.zeros(4, 2), {}, None)))
    return outputs, out


def test_outputs_discard_keeps_earlier_files(tmp_path: Path) -> None:
    outputs, out = _video_outputs(tmp_path)
    run = RUN_TOKEN  # temp names are unique per run (inspect/run_guard.py)
    running = [f".cam.{run}.tmp.mp4", f".det.{run}.tmp.jsonl", "det.previous.json", "det.previous.jsonl"]  # the earlier run's aside
    assert sorted(p.name for p in out.parent.iterdir()) == running
    outputs.discard()
    assert outputs.close() == {}
    assert sorted(p.name for p in out.parent.iterdir()) == ["det.json", "det.jsonl"]
    assert out.read_text() == "[1]" and out.with_suffix(".jsonl").read_text() == "earlier\n"


def test_an_output_that_fails_to_finish_leaves_no_half_result_the_others_finish(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outputs, out = _video_outputs(tmp_path)

    def disk_full(path: Path, data: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(outputs_module, "atomic_write_bytes", disk_full)  # the JSON's only writer here
    assert set(outputs.close()) == {"jsonl", "video"}  # the JSON's disk is full: it alone is lost (issue 36)
    assert outputs.failed == {"json": f"--save-json {out}: No space left on device: not written; the other outputs go on"}
    assert sorted(p.name for p in out.parent.iterdir()) == ["cam.mp4", "det.json", "det.jsonl"]
    assert out.read_text() == "[1]" and json.loads(out.with_suffix(".jsonl").read_text())["frame"] == 0  # the earlier JSON kept
    monkeypatch.undo()
    outputs, out = _video_outputs(tmp_path / "again")
    assert set(outputs.close()) == {"json", "jsonl", "video"}
    frames = json.loads(out.read_text())
    assert [(f["frame"], f["verdict"], f["calls"]) for f in frames] == [(0, "pass", [])]
    assert json.loads(out.with_suffix(".jsonl").read_text()) == frames[0]


@pytest.mark.parametrize("conf", ["1.0", "1.5", "-0.1", "nan"])
def test_predict_refuses_a_threshold_that_passes_every_board(conf: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Issue 58: ``--conf 1.0`` passed every board; it is refused at start, before any weights load, as is NaN."""
    assert main(["predict", str(tmp_path), "--conf", conf, "--save-json", str(tmp_path / "d.json")]) == 2
    expected = f"--conf: must be in [0, 1) (a score threshold of 1 or more passes every board), got {float(conf)}"
    assert _one_error_line(capsys, "predict") == expected
    assert not (tmp_path / "d.json").exists()
    with pytest.raises(ValueError, match=r"^conf: must be in \[0, 1\)"):
        inspector_module.Inspector.load(None, conf=float(conf))


@pytest.mark.parametrize("minutes", ["nan", "inf", "0", "-1", "1e308"])
def test_teach_refuses_non_finite_minutes(minutes: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Issue 58: ``--minutes 1e308`` ended in an OverflowError traceback."""
    golden = Path(__file__).resolve().parents[2] / "data" / "samples" / "golden"
    assert main(["teach", "--golden", str(golden), "--minutes", minutes, "--out", str(tmp_path / "t.pt")]) == 2
    expected = f"--minutes must be a finite number from 1.5 (sets, scoring, calibration) to 10080 (a week), got {float(minutes)}"
    assert capsys.readouterr().err.strip() == f"defect-detector teach: error: {expected}"
    assert not (tmp_path / "t.pt").exists()
