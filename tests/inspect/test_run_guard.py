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
