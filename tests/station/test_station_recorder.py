"""The recorder: what it writes (rows, review queue, images, tallies), in SQLite and PostgreSQL; that it never blocks
or raises; that an unreachable database is counted and logged once a minute; that a SIGKILL loses at most the frame
in flight and leaves a consistent database the station opens."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest
from conftest import StationDB
from sqlalchemy import Row, Table, func, select, text
from sqlalchemy.exc import OperationalError
from station_data import board_record, frames_with_drift

from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.station.app import create_app
from defect_detector.station.recorder import Recorder, RecorderTiming
from defect_detector.station.records import CallRecord, FrameRecord, utc_now
from defect_detector.station.schema import calls, class_tallies, classes, drift_events, inspections, tallies
from defect_detector.station.store import Store

CONF = 0.5


def _rows(recorder: Recorder, table: Table) -> list[Row]:
    with recorder._engine.connect() as conn:
        return conn.execute(select(table).order_by(table.c[list(table.c.keys())[0]])).all()


def test_records_frames_calls_events_and_the_review_queue(station_db: StationDB) -> None:
    frames = frames_with_drift(8)  # frames 4, 5 drift (warning raised at 4), recovered at 6
    with Recorder(station_db.url, conf=CONF, classes=DEEPPCB_CLASSES, images=station_db.images) as recorder:
        for record in frames:
            assert recorder.record(record)
        assert recorder.flush(60)
    assert recorder.recorded == 8 and recorder.unrecorded == 0
    rows = _rows(recorder, inspections)
    assert [r.frame for r in rows] == list(range(8))
    assert [r.drift for r in rows] == ["normal"] * 4 + ["warning"] * 2 + ["normal"] * 2
    assert all(r.width == 320 and r.height == 240 and r.model == "small.pt" and r.reference == "golden.png" for r in rows)
    # every board has a call at >= CONF (0.9), so every frame is queued and keeps its frame and golden image
    assert all(r.queued for r in rows)
    for r in rows:
        assert (station_db.images / r.image).is_file() and (station_db.images / r.reference_image).is_file()
    stored = _rows(recorder, calls)
    expected = sum(len(f.calls) for f in frames)
    assert len(stored) == expected
    by_frame = {r.id: r.frame for r in rows}
    for call in stored:
        raised = by_frame[call.inspection_id] in (4, 5)
        assert call.review == call.pending == (call.score >= CONF or raised)  # while drift is raised, every call
    events = _rows(recorder, drift_events)
    assert [(e.event, e.frame, by_frame[e.inspection_id]) for e in events] == [("drift", 4, 4), ("recovered", 6, 6)]
    assert events[0].cause == "defocus" and events[0].severity == "warning"
    assert [c.name for c in _rows(recorder, classes)][:6] == list(DEEPPCB_CLASSES)  # the model's classes, in its order
    minute_rows = _rows(recorder, tallies)
    assert sum(t.boards for t in minute_rows) == 8 and sum(t.calls for t in minute_rows) == expected
    per_class = {}
    for row in _rows(recorder, class_tallies):
        per_class[row.class_name] = per_class.get(row.class_name, 0) + row.calls
    assert sum(per_class.values()) == expected


def test_frames_below_the_operating_point_are_not_queued_and_only_the_latest_picture_is_kept(tmp_path: Path) -> None:
    url = str(tmp_path / "line.db")
    clock = types.SimpleNamespace(now=0.0)
    with Recorder(url, conf=0.95, timing=RecorderTiming(live_every=0.5, clock=lambda: clock.now)) as recorder:
        for i in range(4):
            recorder.record(board_record(i))  # best call 0.9 < 0.95, drift normal: not queued
            recorder.flush(60)
            clock.now += 1.0
    rows = _rows(recorder, inspections)
    assert [r.queued for r in rows] == [False] * 4
    assert [r.image is not None for r in rows] == [False, False, False, True]  # the live page's picture, moved on
    images = Path(f"{url}.images")  # beside the SQLite file by default
    assert [p.name for p in (images / "live").iterdir()] == [Path(rows[-1].image).name]
    assert not any(r.reference_image for r in rows)
    assert not any(c.pending for c in _rows(recorder, calls))
    with Store(url) as store:  # the station finds the same folder
        assert store.images == images


def test_queued_rule() -> None:
    base = board_record(0, calls=1)  # calls 0.9 and 0.1
    assert base.queued(0.9) and not base.queued(0.91)
    drifting = FrameRecord("cam", 1, "f", utc_now(), "m.pt", "pass", drift="critical")
    assert drifting.queued(0.5) and not FrameRecord("cam", 1, "f", utc_now(), "m.pt", "pass", drift="normal").queued(0.5)
    with pytest.raises(ValueError, match="verdict"):
        FrameRecord("cam", 1, "f", utc_now(), "m.pt", "ok")
    with pytest.raises(ValueError, match="uint8"):
        FrameRecord("cam", 1, "f", utc_now(), "m.pt", "pass", image=np.zeros((4, 4), np.float32))


def test_record_never_blocks_a_full_queue_counts_the_frames_it_drops(tmp_path: Path) -> None:
    release = threading.Event()
    recorder = Recorder(str(tmp_path / "slow.db"), queue_size=4, batch_size=1)
    real_write = recorder._write
    recorder._write = lambda records: (release.wait(60), real_write(records))  # the database hangs

    def hammer() -> None:
        for i in range(50):
            recorder.record(board_record(i % 3))

    caller = threading.Thread(target=hammer)
    caller.start()
    caller.join(60)
    assert not caller.is_alive()  # every record() call returned while the writer was stuck
    release.set()
    recorder.close()
    # one frame in the writer's hands, four in the queue: the rest were dropped and counted
    assert recorder.recorded == 5 and recorder.unrecorded == 45


def test_unreachable_database_is_counted_and_logged_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    clock = types.SimpleNamespace(now=1000.0)
    url = "postgresql://station@127.0.0.1:1/nowhere"  # nothing listens on port 1: refused at once
    with caplog.at_level(logging.WARNING, logger="defect_detector.station"):
        recorder = Recorder(url, timing=RecorderTiming(clock=lambda: clock.now))
        for i in range(3):
            assert recorder.record(board_record(i)) is True  # handed over: never an exception
            recorder.flush(60)
        assert recorder.unrecorded == 3 and recorder.recorded == 0
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "unrecorded" in warnings[0].getMessage() and "127.0.0.1:1" in warnings[0].getMessage()
        clock.now += 61
        recorder.record(board_record(3))
        recorder.flush(60)
        assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2
        assert "4 frames unrecorded" in caplog.records[-1].getMessage()
        recorder.close()


def test_unusable_sqlite_path_is_counted_not_raised(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with Recorder(str(tmp_path / "file" / "station.db")) as recorder:
        recorder.record(board_record(0))
        recorder.flush(60)
    assert recorder.unrecorded == 1 and recorder.recorded == 0


def test_an_outage_loses_nothing_already_committed(station_db: StationDB, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(station_db.url, conf=CONF, images=station_db.images)
    for i in range(3):
        recorder.record(board_record(i))
    recorder.flush(60)

    def refuse(*args: object, **kwargs: object) -> None:
        raise OperationalError("INSERT", {}, ConnectionResetError("the database went away"))

    monkeypatch.setattr(recorder, "_insert", refuse)
    for i in range(3, 5):
        recorder.record(board_record(i))
    recorder.flush(60)
    assert recorder.unrecorded == 2
    monkeypatch.undo()
    for i in range(5, 7):
        recorder.record(board_record(i))
    recorder.close()
    assert recorder.recorded == 5
    with Store(station_db.url, station_db.images) as store, store.engine.connect() as conn:
        frames = conn.execute(select(inspections.c.frame).order_by(inspections.c.id)).scalars().all()
        orphans = conn.execute(select(func.count()).select_from(calls).where(~calls.c.inspection_id.in_(select(inspections.c.id)))).scalar()
    assert frames == [0, 1, 2, 5, 6] and orphans == 0


_CHILD = """
import sys
from station_data import board_record
from defect_detector.station.recorder import Recorder
recorder = Recorder(sys.argv[1], conf=0.5)
i = 0
while True:
    recorder.record(board_record(i % 5))
    recorder.flush(60)
    print(i, flush=True)
    i += 1
"""


def test_sigkill_loses_at_most_the_frame_in_flight(tmp_path: Path) -> None:
    url = str(tmp_path / "killed.db")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, url], stdout=subprocess.PIPE, text=True, env=env)
    try:
        committed = -1
        for line in child.stdout:  # each line: a frame the child saw committed
            committed = int(line)
            if committed >= 12:
                break
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    assert committed >= 12
    store = Store(url)  # opens (and checks) the schema of the killed process's database
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA integrity_check")).scalar() == "ok"
        assert conn.execute(text("PRAGMA foreign_key_check")).all() == []
        count = conn.execute(select(func.count()).select_from(inspections)).scalar()
        images = conn.execute(select(inspections.c.image).where(inspections.c.image.is_not(None))).scalars().all()
    assert committed + 1 <= count <= committed + 2  # every reported frame is there; at most the one in flight more
    assert images and all((store.images / p).is_file() for p in images)
    from fastapi.testclient import TestClient

    with TestClient(create_app(store), base_url="http://localhost") as client:  # the station starts on it
        assert client.get("/healthz").status_code == 200
        assert len(client.get("/api/inspections", params={"limit": 500}).json()["items"]) == count
    store.close()


def test_long_names_are_recorded(station_db: StationDB) -> None:
    """No name is too long for the database (a stream URL with a long query, a deep file path, a long class name)."""
    long = "rtsp://camera/stream?" + "x" * 3000
    record = FrameRecord(
        long, 0, "a/" * 800 + "b.png", utc_now(), "m" * 600 + ".pt", "fail", calls=(CallRecord("c" * 300, 0.9, (1, 2, 3, 4)),)
    )
    with Recorder(station_db.url, conf=0.5, images=station_db.images) as recorder:
        recorder.record(record)
    assert recorder.recorded == 1 and recorder.unrecorded == 0
    assert _rows(recorder, inspections)[0].source == long and _rows(recorder, calls)[0].class_name == "c" * 300


def test_a_suspect_pass_is_stored_with_its_reason(tmp_path: Path) -> None:
    """Issue 36: a frame without calls under a critical drift alert is stored as ``pass_suspect``, never as a plain pass."""
    record = FrameRecord("cam", 3, "b.png", utc_now(), "m.pt", "pass_suspect", reason="drift critical: score 9.1", drift="critical")
    with Recorder(str(tmp_path / "line.db"), conf=CONF) as recorder:
        assert recorder.record(record) and recorder.flush(60)
    (row,) = _rows(recorder, inspections)
    assert row.verdict == "pass_suspect" and row.reason == "drift critical: score 9.1" and row.drift == "critical"


def test_a_name_with_a_right_to_left_override_is_recorded_as_it_reads(tmp_path: Path) -> None:
    """Issue 44: the station's pages show names from the database; a bidirectional control is stored visibly."""
    record = dataclasses.replace(board_record(0), name="board_\u202egpj.exe", reason=None)
    with Recorder(str(tmp_path / "bidi.db"), conf=0.5) as recorder:
        assert recorder.record(record) and recorder.flush(60)
        assert [r.name for r in _rows(recorder, inspections)] == ["board_<U+202E>gpj.exe"]


def test_a_database_file_deleted_mid_run_counts_every_frame_it_held_as_unrecorded(tmp_path: Path) -> None:
    """Issue 44: the SQLite file deleted mid-run gave exit 0 with 0 unrecorded, and the 30 records were gone; now the
    frames it held and every later one are unrecorded, and no new empty file takes its place."""
    path = tmp_path / "line.db"
    with Recorder(str(path), conf=0.5) as recorder:
        for i in range(5):
            recorder.record(board_record(i))
        assert recorder.flush(60) and recorder.recorded == 5
        path.unlink()
        for i in range(5, 8):
            recorder.record(board_record(i))
        assert recorder.flush(60)
        assert (recorder.recorded, recorder.unrecorded) == (0, 8)
    assert not path.exists()
