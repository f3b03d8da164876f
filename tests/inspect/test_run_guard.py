"""One writer per output, checked at start (``inspect/run_guard.py``): locks naming the other run's process id,
writability before the first frame, per-run temp names, and the leftovers of a killed run recovered, never
overwritten."""

from __future__ import annotations

import json
import os
from pathlib import Path

import cv2
import numpy as np
import pytest
from small_checkpoint import write_small_checkpoint

from defect_detector.cli.main import main
from defect_detector.inspect.inspector import Inspector
from defect_detector.inspect.run_guard import RUN_TOKEN, OutputBusyError, RunGuard, run_temp_name

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_checkpoint(tmp_path_factory.mktemp("ckpt") / "small.pt", 64)


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("video") / "cam.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 5.0, (64, 48))
    for i in range(4):
        writer.write(np.random.default_rng(i).integers(0, 255, (48, 64, 3), dtype=np.uint8))
    writer.release()
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("boards")
    for i in range(3):
        cv2.imwrite(str(path / f"b{i}.png"), np.random.default_rng(i).integers(0, 255, (48, 64), dtype=np.uint8))
    return path


def _predict(source: Path, checkpoint: Path, *extra: str) -> int:
    return main(["predict", str(source), "--weights", str(checkpoint), "--device", "cpu", "--threads", "1", "--no-monitor", *extra])


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("defect-detector predict: error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("flag", ["--save-json", "--save-dir"])
def test_a_second_run_on_the_same_output_refuses_naming_the_other_pid(
    flag: str, video: Path, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / ("det.json" if flag == "--save-json" else "annotated")
    kwargs = {"save_json": target} if flag == "--save-json" else {"save_dir": target}
    with RunGuard(**kwargs):  # the "other run" (this process: its pid)
        assert _predict(video, checkpoint, flag, str(target)) == 2
        line = _error_line(capsys)
        assert str(target) in line and f"pid {os.getpid()} on host" in line
        with pytest.raises(OutputBusyError):
            RunGuard(**kwargs)
    assert _predict(video, checkpoint, flag, str(target)) == 0  # released: the next run writes
    assert not (tmp_path / ".det.json.lock").exists() and not (target / ".defect-detector.lock").exists()


def test_an_unwritable_save_json_fails_before_the_first_frame(folder: Path, checkpoint: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the output folder should be")
    seen: list[int] = []
    with Inspector.load(checkpoint, device="cpu", threads=1, monitor=False) as inspector:
        with pytest.raises(ValueError, match=r"^--save-json: cannot write into .*not_a_folder"):
            inspector.run(str(folder), save_json=str(blocker / "det.json"), on_result=lambda r: seen.append(r.frame.index))
    assert seen == []  # not one frame inspected (it used to fail after the last frame)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_fails_at_start(folder: Path, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    read_only = tmp_path / "ro"
    read_only.mkdir()
    read_only.chmod(0o555)
    try:
        assert _predict(folder, checkpoint, "--save-json", str(read_only / "det.json")) == 2
        assert "--save-json: cannot write into" in _error_line(capsys)
    finally:
        read_only.chmod(0o755)


def test_temp_names_are_unique_per_run(tmp_path: Path) -> None:
    name = run_temp_name(tmp_path / "det.jsonl").name
    assert name.startswith(".det.") and name.endswith(".tmp.jsonl") and RUN_TOKEN in name and str(os.getpid()) in name


def test_a_killed_runs_jsonl_is_recovered_not_overwritten(
    video: Path, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "det.json"
    old_style = tmp_path / ".det.tmp.jsonl"  # what v0.8 left after kill -9
    old_style.write_text('{"frame": 0}\n{"frame": 1}\n{"frame": 2, "detec')  # the last line cut by the kill
    video_left = tmp_path / "annotated" / ".cam.999-abc.tmp.mp4"
    video_left.parent.mkdir()
    video_left.write_bytes(b"unfinished mp4")
    assert _predict(video, checkpoint, "--save-json", str(out), "--save-dir", str(tmp_path / "annotated")) == 0
    printed = capsys.readouterr().out
    recovered = sorted(tmp_path.glob("det.recovered-*.jsonl"))
    assert len(recovered) == 1 and f"recovered from a run that did not finish: {recovered[0]}" in printed
    assert [json.loads(line) for line in recovered[0].read_text().splitlines()] == [{"frame": 0}, {"frame": 1}]
    assert [p.read_bytes() for p in (tmp_path / "annotated").glob("cam.recovered-*.mp4")] == [b"unfinished mp4"]
    assert len(out.with_suffix(".jsonl").read_text().splitlines()) == 4  # this run's own frames
    assert not list(tmp_path.rglob(".*.tmp.*"))


def test_an_unwritable_db_fails_before_the_first_frame(
    video: Path, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the folder should be")
    assert _predict(video, checkpoint, "--db", str(blocker / "station.db")) == 2  # it used to run, every frame "unrecorded"
    line = _error_line(capsys)
    assert line.startswith("defect-detector predict: error: --db: cannot write into ") and "not_a_folder" in line


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("where", ["the source folder", "a folder inside it"])
def test_a_save_dir_equal_to_or_inside_the_source_folder_is_refused_before_any_frame(
    where: str, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 58 item 5: ``--save-dir`` pointing at the source folder overwrote the raw captures with their annotated
    copies (the next run inspected the copies), and one inside it was read back as extra boards. Both are refused at
    start in one line, exit 2, before any frame is read: the captures stay as they were, no folder is created."""
    from defect_detector.inspect import sources

    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(2):
        assert cv2.imwrite(str(frames / f"b{i}.png"), np.random.default_rng(i).integers(0, 255, (48, 64), dtype=np.uint8))
    before = _snapshot(frames)
    monkeypatch.setattr(sources, "read_pages", lambda path: pytest.fail(f"{path} was read"))
    save_dir = frames if where == "the source folder" else frames / "ann"
    assert _predict(frames, checkpoint, "--save-dir", str(save_dir), "--save-json", str(tmp_path / "det.json")) == 2
    line = _error_line(capsys)
    assert f"--save-dir {save_dir}" in line and str(frames) in line
    assert ("is the source folder" if where == "the source folder" else "is inside the source folder") in line
    assert _snapshot(frames) == before and not (frames / "ann").exists() and not (tmp_path / "det.json").exists()


def test_outputs_a_source_would_read_back_or_that_overwrite_it_are_refused(tmp_path: Path) -> None:
    """Any output path the source would read as a frame, or that is the source itself, is refused at start: a
    ``--save-dir`` that would overwrite a single image or a video with its annotated copy, annotated images a glob
    would list again, a ``--report`` named like a frame inside the source folder."""
    from defect_detector.inspect.sources import open_source

    frames = tmp_path / "frames"
    (frames / "line2").mkdir(parents=True)
    for name in ("a.png", "line2/b.png"):
        assert cv2.imwrite(str(frames / name), np.zeros((48, 64), np.uint8))
    video = tmp_path / "cam.avi"
    video.write_bytes(b"not read at start")
    cases = [
        (str(frames / "a.png"), {"save_dir": frames}, "--save-dir .* would overwrite the source"),
        (str(video), {"save_dir": tmp_path / "x"}, None),
        (str(tmp_path / "cam.mp4"), {"save_dir": tmp_path}, "--save-dir .* would overwrite the source"),
        (str(frames / "**" / "*.png"), {"save_dir": frames / "ann"}, "the source .* would read .* back as frames"),
        (str(frames / "*.png"), {"save_dir": frames / "ann"}, None),  # not recursive: ann/ is never listed
        (str(frames / "*" / "*.png"), {"save_dir": frames / "ann"}, None),  # ann/line2/b.png: one folder too deep for it
        (str(frames / "*.png"), {"save_dir": frames}, r"the source .* would read its annotated images \(a.png, ...\) back"),
        (str(frames), {"report": frames / "rows.png"}, "--report .* the source .* would read .* back as frames"),
        (str(frames), {"report": frames / "rows.csv", "save_json": frames / "det.json"}, None),  # never read as a frame
    ]
    (tmp_path / "cam.mp4").write_bytes(b"")
    for source, outputs, problem in cases:
        opened = open_source(source)
        if problem is None:
            RunGuard(**{k: str(v) for k, v in outputs.items()}, source=opened).release()
            continue
        with pytest.raises(ValueError, match=problem) as info:
            RunGuard(**{k: str(v) for k, v in outputs.items()}, source=opened)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("outputs", "problem"),
    [
        ({"save_json": "det.json", "report": "det.jsonl"}, "--save-json's frame-by-frame record det.jsonl and --report both write {d}/"),
        ({"save_json": "det.json", "report": "det.json"}, "--save-json and --report both write {d}/det.json"),
        ({"save_json": "det.jsonl"}, "--save-json {d}/det.jsonl: the JSON and its frame-by-frame record NAME.jsonl would be one file"),
        ({"save_json": "out/b0.png", "save_dir": "out"}, "--save-json and --save-dir's annotated b0.png both write {d}/out/b0.png"),
        ({"report": "out", "save_dir": "out"}, "--report {d}/out is the --save-dir folder"),
        ({"save_json": "det.json", "alerts": "det.jsonl"}, "--save-json's frame-by-frame record det.jsonl and --alerts both write"),
    ],
)
def test_two_outputs_on_one_file_are_refused_at_start_naming_both_flags_and_the_file(
    outputs: dict[str, str], problem: str, folder: Path, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 58 item 7: ``--save-json det.json --report det.jsonl`` wrote one temp file twice; at close every output was
    deleted, exit 2, and the error named no file. Two outputs on one path are refused at start, in one line naming both
    flags and the file, before the first frame: nothing is written."""
    flags = [f"--{k.replace('_', '-')}" for k in outputs]
    argv = [x for flag, value in zip(flags, outputs.values()) for x in (flag, str(tmp_path / value))]
    if "alerts" in outputs:  # --alerts needs monitoring: the checkpoint's own baseline is not there, so give one
        from defect_detector.inspect.runtime import Runtime

        layers = Runtime.load(checkpoint, device="cpu").layer_names
        from defect_detector.monitor.baseline import calibrate

        baseline = tmp_path / "baseline.json"
        calibrate(np.abs(np.random.default_rng(0).normal(1, 0.1, (32, len(layers), 2))), layers, 64).save(baseline)
        argv = [*argv, "--baseline", str(baseline)]
        code = main(["predict", str(folder), "--weights", str(checkpoint), "--device", "cpu", "--threads", "1", *argv])
    else:
        code = _predict(folder, checkpoint, *argv)
    assert code == 2
    line = _error_line(capsys)
    assert problem.format(d=tmp_path) in line, line
    left = {p.name for p in tmp_path.rglob("*") if p.is_file()} - {"baseline.json", "det.jsonl" if "alerts" in outputs else ""}
    assert left == set(), left  # nothing written, no temp file
