"""The station shows a design unlike the model's training images (issue 34 item 4), and a design the weights were
taught (item 3): the frame's record and its design run carry the warning and the taught mark (schema 4), and a
schema-3 database is migrated to hold them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from conftest import StationDB
from sqlalchemy import text
from station_data import back_to_schema_5, board_record

from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.core.frame import Frame
from defect_detector.core.frame_record import Prepared
from defect_detector.inspect.record import Inspection
from defect_detector.station.app import create_app
from defect_detector.station.recorder import Recorder
from defect_detector.station.records import utc_now
from defect_detector.station.schema import SCHEMA_VERSION
from defect_detector.station.store import Store

TestClient = pytest.importorskip("fastapi.testclient").TestClient
WARNING = (
    "photo.png: this design looks unlike the model's training images (contrast 109 grey levels, training at least 255); "
    "teach it: defect-detector teach --golden /g/photo.png --weights w.pt --out photo_taught.pt"
)


def _record(station_db: StationDB) -> None:
    """Frames 0-3 against golden.png (like the training images), 4-7 against photo.png (unlike: warned), 8-11 against
    taught.png (taught: never warned)."""
    start = datetime.now(timezone.utc) - timedelta(minutes=5)
    with Recorder(station_db.url, conf=0.5, classes=DEEPPCB_CLASSES, images=station_db.images) as recorder:
        for i in range(12):
            record = dataclasses.replace(board_record(i, time=start + timedelta(seconds=i)), design_taught=False)
            if 4 <= i < 8:
                record = dataclasses.replace(record, reference="photo.png", design_warning=WARNING)
            if i >= 8:
                record = dataclasses.replace(record, reference="taught.png", design_taught=True)
            assert recorder.record(record)


@pytest.fixture
def client(station_db: StationDB) -> Iterator[TestClient]:
    _record(station_db)
    with Store(station_db.url, station_db.images) as store, TestClient(create_app(store), base_url="http://localhost") as c:
        yield c


def test_frames_and_design_runs_carry_the_warning_and_the_taught_mark(client: TestClient) -> None:
    items = client.get("/api/inspections", params={"limit": 100}).json()["items"]
    assert {i["frame"]: i["design_warning"] for i in items} == {i: WARNING if 4 <= i < 8 else None for i in range(12)}
    assert {i["frame"]: i["design_taught"] for i in items} == {i: i >= 8 for i in range(12)}
    designs = client.get("/api/live").json()["designs"]
    assert [d["line"] for d in designs] == [
        "taught design taught.png: frames 8-11 (4 boards)",
        "design photo.png: frames 4-7 (4 boards); warning: " + WARNING.split(": ", 1)[1],
        "design golden.png: frames 0-3 (4 boards)",
    ]
    assert [d["design_taught"] for d in designs] == [True, False, False]
    html = client.get("/report", params={"since": (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat()}).text
    assert "this design looks unlike the model&#39;s training images" in html and "--out photo_taught.pt" in html
    assert "taught design taught.png: frames 8-11 (4 boards)" in html


def test_an_inspection_hands_its_warning_and_taught_mark_to_the_record() -> None:
    frame = Frame(0, np.zeros((20, 30), np.uint8), "cam0", "b.png", 0.0)
    record = Inspection.finish(Prepared(frame, design_warning=WARNING, design_taught=True)).to_station(utc_now())
    assert record.design_warning == WARNING and record.design_taught is True


def test_a_schema_3_database_is_migrated(station_db: StationDB) -> None:
    _record(station_db)
    with Store(station_db.url, station_db.images) as store, store.engine.begin() as conn:  # back to what schema 3 had
        conn.execute(text("ALTER TABLE inspections DROP COLUMN design_warning"))
        conn.execute(text("ALTER TABLE design_runs DROP COLUMN design_warning"))
        conn.execute(text("ALTER TABLE inspections DROP COLUMN design_taught"))
        conn.execute(text("ALTER TABLE design_runs DROP COLUMN design_taught"))
        back_to_schema_5(conn)
        for column in ("golden_key", "reg_shift", "reg_angle", "reg_score", "reg_difference"):  # schema 5's
            conn.execute(text(f"ALTER TABLE inspections DROP COLUMN {column}"))
        conn.execute(text("UPDATE station_meta SET value = '3' WHERE key = 'schema_version'"))
    with Store(station_db.url, station_db.images) as store:
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT value FROM station_meta WHERE key = 'schema_version'")).scalar() == str(SCHEMA_VERSION) == "7"
        with TestClient(create_app(store), base_url="http://localhost") as client:
            items = client.get("/api/inspections", params={"limit": 100}).json()["items"]
            designs = client.get("/api/live").json()["designs"]
    assert len(items) == 12 and all(i["design_warning"] is None and i["design_taught"] is None for i in items)  # not checked
    assert all(i["registration"] is None and i["golden_key"] is None for i in items)  # recorded before schema 5
    assert [d["line"] for d in designs] == [
        "design taught.png: frames 8-11 (4 boards)",
        "design photo.png: frames 4-7 (4 boards)",
        "design golden.png: frames 0-3 (4 boards)",
    ]
    assert all(d["design_taught"] is None for d in designs)
