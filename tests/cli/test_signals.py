"""Stopping is finishing (``inspect/stop_signals.py``): SIGTERM, SIGHUP and SIGINT sent to a real ``predict``
process write the outputs of every frame inspected before the signal and exit 128 + signal; a kill -9 leaves
whole JSONL lines that the next run recovers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest
from small_checkpoint import write_small_checkpoint

from defect_detector.cli.main import main

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")

REPO = Path(__file__).resolve().parents[2]
FRAMES = 400  # far more than are inspected before the signal: the run is really cut short
WAIT_S = 120.0  # bounds every wait (a loaded machine is slow); never a timing assertion


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_checkpoint(tmp_path_factory.mktemp("ckpt") / "small.pt", 64)


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("video") / "line.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10.0, (64, 48))
    rng = np.random.default_rng(0)
    for _ in range(FRAMES):
        writer.write(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8))
    writer.release()
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    board = tmp_path_factory.mktemp("board") / "board.png"
    cv2.imwrite(str(board), np.random.default_rng(0).integers(0, 255, (48, 64), dtype=np.uint8))
    path = tmp_path_factory.mktemp("boards")
    for i in range(FRAMES):
        (path / f"b{i:04d}.png").symlink_to(board)
    return path


def _start(source: Path, checkpoint: Path, out: Path, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "defect_detector.cli", "predict", str(source), "--weights", str(checkpoint), "--device", "cpu", *extra]
    argv += ["--threads", "1", "--no-monitor", "--save-json", str(out / "det.json"), "--save-dir", str(out / "annotated")]
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_ALBUMENTATIONS_UPDATE": "1"}
    return subprocess.Popen(argv, cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(ready: Callable[[], bool], process: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "predict did not start inspecting"
        time.sleep(0.05)


def _jsonl_lines(out: Path) -> int:
    """Whole lines (newline-ended) of the run's JSON lines so far: a line being written is not one yet."""
    return sum(p.read_bytes().count(b"\n") for p in out.glob(".det.*.tmp.jsonl"))


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signal_writes_every_output_of_a_video_run_and_exits_128_plus_it(
    signum: int, status: int, video: Path, checkpoint: Path, tmp_path: Path
) -> None:
    process = _start(video, checkpoint, tmp_path)
    _wait_for(lambda: _jsonl_lines(tmp_path) >= 3, process)
    process.send_signal(signum)
    out, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == status, err
    assert f"defect-detector predict: stopped by {signal.Signals(signum).name}" in err and "Traceback" not in err
    lines = [json.loads(line) for line in (tmp_path / "det.jsonl").read_text().splitlines()]
    assert 3 <= len(lines) < FRAMES and [line["frame"] for line in lines] == list(range(len(lines)))
    assert json.loads((tmp_path / "det.json").read_text()) == lines  # one record per frame, as the JSONL holds
    assert any(line["calls"] for line in lines)
    capture = cv2.VideoCapture(str(tmp_path / "annotated" / "line.mp4"))  # finalised: it plays, every frame in it
    assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == len(lines)
    capture.release()
    assert f"frames {len(lines)}: pass " in out
    assert not list(tmp_path.rglob(".*.tmp.*")) and not list(tmp_path.rglob(".*lock"))


def test_sighup_writes_every_output_of_a_folder_run(folder: Path, checkpoint: Path, tmp_path: Path) -> None:
    process = _start(folder, checkpoint, tmp_path)
    annotated = tmp_path / "annotated"
    _wait_for(lambda: len(list(annotated.glob("b*.png"))) >= 3, process)
    process.send_signal(signal.SIGHUP)
    _, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == 129, err
    written = {p.name for p in annotated.glob("*.png")}
    assert 3 <= len(written) < FRAMES
    assert {r["file_name"] for r in json.loads((tmp_path / "det.json").read_text())} == written  # every inspected frame


def test_kill_9_leaves_whole_lines_that_the_next_run_recovers(
    video: Path, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    process = _start(video, checkpoint, tmp_path)
    _wait_for(lambda: _jsonl_lines(tmp_path) >= 3, process)
    seen = _jsonl_lines(tmp_path)
    process.kill()
    process.communicate(timeout=WAIT_S)
    assert main(["predict", str(video), "--weights", str(checkpoint), "--device", "cpu", "--threads", "1", "--no-monitor",
                 "--max-frames", "2", "--save-json", str(tmp_path / "det.json")]) == 0  # fmt: skip
    (recovered,) = tmp_path.glob("det.recovered-*.jsonl")
    lines = [json.loads(line) for line in recovered.read_text().splitlines()]  # every line whole: no corrupt file
    assert len(lines) >= seen and [line["frame"] for line in lines] == list(range(len(lines)))
    assert f"recovered from a run that did not finish: {recovered}" in capsys.readouterr().out


def test_kill_9_of_a_folder_run_leaves_its_jsonl_and_csv_that_the_next_run_recovers(
    folder: Path, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 36: kill -9 during a folder run left 37 annotated images and 37 database rows, but no JSON and no CSV."""
    process = _start(folder, checkpoint, tmp_path, "--report", str(tmp_path / "report.csv"))
    _wait_for(lambda: _jsonl_lines(tmp_path) >= 3, process)
    seen = _jsonl_lines(tmp_path)
    process.kill()
    process.communicate(timeout=WAIT_S)
    assert process.returncode == -signal.SIGKILL
    assert list(tmp_path.glob(".report.*.tmp.csv")) and not (tmp_path / "det.json").exists()
    argv = ["predict", str(folder / "b0000.png"), "--weights", str(checkpoint), "--device", "cpu", "--threads", "1", "--no-monitor"]
    assert main([*argv, "--save-json", str(tmp_path / "det.json"), "--report", str(tmp_path / "report.csv")]) == 0
    (jsonl,) = tmp_path.glob("det.recovered-*.jsonl")
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]  # every line whole
    assert len(records) >= seen and [r["file_name"] for r in records] == [f"b{i:04d}.png" for i in range(len(records))]
    (csv_file,) = tmp_path.glob("report.recovered-*.csv")
    rows = csv_file.read_text().splitlines()
    assert rows[0].startswith("file_name,frame,verdict") and len(rows) - 1 >= seen
    assert [row.split(",")[0] for row in rows[1:]] == [f"b{i:04d}.png" for i in range(len(rows) - 1)]
    printed = capsys.readouterr().out
    assert all(f"recovered from a run that did not finish: {path}" in printed for path in (jsonl, csv_file))
    assert len((tmp_path / "report.csv").read_text().splitlines()) == 2 and (tmp_path / "det.jsonl").is_file()  # this run's own


def test_after_kill_9_the_outputs_say_at_once_that_the_run_did_not_finish(
    folder: Path, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 58 item 8: after kill -9, ``det.json`` and ``rep.csv`` still held the previous run and looked current until
    the next run recovered the killed one's, and ``annotated/`` mixed both runs. Now, at once: no ``det.json`` nor
    ``rep.csv`` (the last finished run's are ``det.previous.json``, ``rep.previous.csv``), and ``annotated/`` holds only
    the killed run's images, listed in ``annotated.unfinished.txt``. The next run recovers them, and when it finishes
    its outputs replace the previous ones."""
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    for i in range(3):
        assert cv2.imwrite(str(earlier / f"e{i}.png"), np.random.default_rng(i).integers(0, 255, (48, 64), dtype=np.uint8))
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--weights", str(checkpoint), "--device", "cpu", "--threads", "1", "--no-monitor", "--report", str(out / "rep.csv")]
    argv += ["--save-json", str(out / "det.json"), "--save-dir", str(out / "annotated")]
    assert main(["predict", str(earlier), *argv]) == 0
    previous = {name: (out / name).read_bytes() for name in ("det.json", "rep.csv")}
    assert sorted(p.name for p in (out / "annotated").glob("*.png")) == ["e0.png", "e1.png", "e2.png"]

    process = _start(folder, checkpoint, out, "--report", str(out / "rep.csv"))
    _wait_for(lambda: _jsonl_lines(out) >= 3, process)  # frames written: killed mid-run, not after a sleep
    process.kill()
    process.communicate(timeout=WAIT_S)
    assert not (out / "det.json").exists() and not (out / "det.jsonl").exists() and not (out / "rep.csv").exists()
    assert (out / "det.previous.json").read_bytes() == previous["det.json"]
    assert (out / "rep.previous.csv").read_bytes() == previous["rep.csv"]
    images = sorted(p.name for p in (out / "annotated").glob("*.png"))
    assert images and all(name.startswith("b") for name in images)  # the killed run's only: none of the earlier run's
    listed = (out / "annotated" / "annotated.unfinished.txt").read_text().split()
    assert set(images) <= set(listed) and not (out / "annotated" / "annotated.txt").exists()

    assert main(["predict", str(earlier), *argv]) == 0  # the next run: recovers the killed one's, then replaces the previous
    (recovered,) = out.glob("annotated.recovered-*")
    assert sorted(p.name for p in recovered.glob("*.png")) == images
    assert f"recovered from a run that did not finish: {recovered}" in capsys.readouterr().out
    assert sorted(p.name for p in (out / "annotated").iterdir()) == ["annotated.txt", "e0.png", "e1.png", "e2.png"]
    assert json.loads((out / "det.json").read_bytes()) == json.loads(previous["det.json"])
    assert not list(out.glob("*.previous.*"))
