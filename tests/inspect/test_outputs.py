"""inspect/outputs.py: the --report CSV escaped, every output finished whatever happens to another (a full disk)."""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import cv2
import numpy as np
import pytest
from small_checkpoint import write_small_checkpoint

from defect_detector.cli.main import main
from defect_detector.inspect import outputs as outputs_module
from defect_detector.inspect.run_guard import RunGuard

# --- a full disk on one output, --report's lock and check, --db before the first frame (issue 36) -------------------

FRAMES = 4


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_checkpoint(tmp_path_factory.mktemp("ckpt") / "small.pt", 64)


@pytest.fixture(scope="module")
def boards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("boards")
    for i in range(FRAMES):
        assert cv2.imwrite(str(folder / f"b{i}.png"), np.random.default_rng(i).integers(0, 255, (48, 64), dtype=np.uint8))
    return folder


def _predict(boards: Path, checkpoint: Path, *extra: str) -> int:
    return main(["predict", str(boards), "--weights", str(checkpoint), "--threads", "1", "--no-monitor", *extra])


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("defect-detector predict: error: ")]
    assert len(err) == 1, err
    return err[0].removeprefix("defect-detector predict: error: ")


def test_a_full_disk_under_save_dir_stops_the_images_alone(
    boards: Path, checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, caplog: pytest.LogCaptureFixture
) -> None:
    written = []

    def disk_full_after_two(path: Path, data: bytes | Iterable[bytes]) -> None:  # the images' disk: full after two
        if Path(path).suffix == ".png" and len(written) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        if Path(path).suffix == ".png":
            written.append(path)
        Path(path).write_bytes(data if isinstance(data, bytes) else b"".join(data))

    monkeypatch.setattr(outputs_module, "atomic_write_bytes", disk_full_after_two)
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING, logger="defect_detector.inspect"):
        flags = ["--save-json", str(out / "det.json"), "--report", str(out / "r.csv"), "--save-dir", str(out / "img")]
        code = _predict(boards, checkpoint, *flags)
    assert code == 2
    line = _error(capsys)
    assert line.startswith(f"--save-dir {out / 'img' / 'b2.png'}: No space left on device: this output stopped after 2 frames")
    assert line.endswith("the other outputs are finished")
    assert len(json.loads((out / "det.json").read_text())) == FRAMES and len((out / "det.jsonl").read_text().splitlines()) == FRAMES
    assert len((out / "r.csv").read_text().splitlines()) == FRAMES + 1
    assert sorted(p.name for p in (out / "img").glob("*.png")) == ["b0.png", "b1.png"]
    assert sum("No space left on device" in r.getMessage() for r in caplog.records) == 1
    assert not list(out.rglob(".*.tmp.*"))


def test_a_full_disk_under_report_stops_the_csv_alone(
    boards: Path, checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    real_write = outputs_module._Stream.write

    def disk_full_for_csv(self, text: str) -> None:
        if self.path.suffix == ".csv" and not text.startswith("file_name"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(self, text)

    monkeypatch.setattr(outputs_module._Stream, "write", disk_full_for_csv)
    out = tmp_path / "out"
    assert _predict(boards, checkpoint, "--save-json", str(out / "det.json"), "--report", str(tmp_path / "other" / "r.csv")) == 2
    line = _error(capsys)
    assert line.startswith(f"--report {tmp_path / 'other' / 'r.csv'}: No space left on device: this output stopped after 0 frames")
    assert len(json.loads((out / "det.json").read_text())) == FRAMES and len((out / "det.jsonl").read_text().splitlines()) == FRAMES
    assert not (tmp_path / "other" / "r.csv").exists() and not list(tmp_path.rglob(".*.tmp.*"))


def test_report_is_locked_and_checked_before_the_first_frame(boards: Path, checkpoint: Path, tmp_path: Path, capsys) -> None:
    report = tmp_path / "r.csv"
    with RunGuard(report=report):  # another run writing the same --report
        assert _predict(boards, checkpoint, "--report", str(report), "--save-json", str(tmp_path / "det.json")) == 2
        assert _error(capsys).startswith(f"{report}: another predict run (pid {os.getpid()} on host ")
    assert not report.exists() and not (tmp_path / "det.json").exists()  # refused before the first frame
    (tmp_path / "file").write_text("not a folder")
    assert _predict(boards, checkpoint, "--report", str(tmp_path / "file" / "r.csv"), "--save-json", str(tmp_path / "det.json")) == 2
    assert _error(capsys).startswith(f"--report: cannot write into {tmp_path / 'file'}: ")
    assert not (tmp_path / "det.json").exists()


def test_a_db_that_is_not_a_database_fails_before_the_first_frame(boards: Path, checkpoint: Path, tmp_path: Path, capsys) -> None:
    junk = tmp_path / "station.db"
    junk.write_bytes(b"this is not a SQLite database, it is a text file of some length" * 20)
    assert _predict(boards, checkpoint, "--db", str(junk), "--save-json", str(tmp_path / "det.json")) == 2
    line = _error(capsys)
    assert line.startswith(f"--db sqlite:///{junk}: cannot use the station database: DatabaseError: file is not a database"), line
    assert not (tmp_path / "det.json").exists()


def test_an_unreachable_postgresql_fails_before_the_first_frame_its_password_masked(boards: Path, checkpoint: Path, tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://lineuser:S3cretPW@127.0.0.1:{port}/station?sslkey=KEYFILE"
    cmd = [sys.executable, "-m", "defect_detector.cli", "predict", str(boards), "--weights", str(checkpoint), "--threads", "1"]
    done = subprocess.run([*cmd, "--db", url, "--save-json", str(tmp_path / "det.json")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"defect-detector predict: error: --db postgresql+psycopg://***@127.0.0.1:{port}/station?sslkey=***: cannot use")
    assert "S3cretPW" not in done.stdout + done.stderr and "lineuser" not in done.stdout + done.stderr and "KEYFILE" not in done.stderr
    assert not (tmp_path / "det.json").exists()


def test_losing_the_database_mid_run_is_counted_and_exits_2(
    boards: Path, checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from defect_detector.station import recorder as recorder_module

    def lost_after_the_check(self, records: list) -> None:  # the database answered the check before the first frame
        raise ConnectionError("server closed the connection unexpectedly")

    monkeypatch.setattr(recorder_module.Recorder, "_write", lost_after_the_check)
    db = tmp_path / "station.db"
    assert _predict(boards, checkpoint, "--db", str(db), "--batch", "1", "--save-json", str(tmp_path / "det.json")) == 2
    captured = capsys.readouterr()
    lost = FRAMES
    assert f"station database: {lost} frames NOT RECORDED" in captured.out
    assert len(json.loads((tmp_path / "det.json").read_text())) == FRAMES
    line = captured.err.strip().splitlines()[-1]
    assert line == (
        f"defect-detector predict: error: --db {db}: {lost} of {FRAMES} frames were not recorded in the station database "
        "(lost or unreachable during the run: see the warnings above); the other outputs are finished"
    )


def test_every_record_carries_its_registration(tmp_path: Path) -> None:
    """A golden-template frame's JSON record says how its golden image was registered (issue 35: the Registration is
    recorded, not thrown away); a single-image model's records say null."""
    from defect_detector.inspect.inspector import Inspector
    from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS

    samples = Path(__file__).resolve().parents[2] / "data" / "samples"
    board = sorted((samples / "deeppcb").glob("*.jpg"))[0]
    for weights, reference in ((DEFAULT_REFERENCE_WEIGHTS, samples / "golden" / board.name), (None, None)):
        out = tmp_path / f"{'golden' if reference else 'single'}.json"
        with Inspector.load(weights, reference=reference, device="cpu", threads=1) as inspector:
            inspector.run(str(board), save_json=str(out))
        record = json.loads(out.read_text())[0]
        if reference is None:
            assert record["registration"] is None
            continue
        reg = record["registration"]
        geometry = {"model", "scale", "perspective", "lens", "grid", "local"}  # issue 55: the mapping a person reads
        assert set(reg) == {"shift", "angle", "score", "difference", "spread", "reused", "photometric"} | geometry  # DESIGN.md: and more
        assert reg["score"] > 0.5 and reg["shift"] < 20 and abs(reg["angle"]) < 1 and 0 <= reg["spread"] < 0.21
        assert reg["model"].split("+")[0] in {"rigid", "similarity", "affine", "homography"} and abs(reg["scale"] - 1) < 0.02
        assert set(reg["local"]) == {"largest", "median"} and reg["local"]["largest"] < 8
        assert set(reg["photometric"]) == {"gain", "offset", "gamma", "light_range", "blur"} and 0.7 < reg["photometric"]["gain"] < 1.3


def test_a_frame_record_is_serialised_once_the_json_holds_the_jsonl_lines(boards: Path, checkpoint: Path, tmp_path: Path) -> None:
    """Issue 57: each record went object -> dict -> JSONL -> parsed -> JSON. The JSON array's items are the JSONL's lines
    as written, and a folder's records carry no timestamp in either (docs/inspection.md: video and streams only)."""
    out = tmp_path / "out"
    assert _predict(boards, checkpoint, "--save-json", str(out / "det.json")) == 0
    lines = (out / "det.jsonl").read_text().splitlines()
    text = (out / "det.json").read_text()
    assert text == "[\n" + ",\n".join(f"  {line}" for line in lines) + "\n]\n"
    records = json.loads(text)
    assert [r["file_name"] for r in records] == [f"b{i}.png" for i in range(FRAMES)] and all("timestamp" not in r for r in records)
    assert _predict(boards, checkpoint, "--save-json", str(out / "calls.json"), "--json-layout", "detections", "--conf", "0") == 0
    calls = json.loads((out / "calls.json").read_text())
    assert calls and {c["file_name"] for c in calls} <= {r["file_name"] for r in records} and all("bbox" in c for c in calls)
