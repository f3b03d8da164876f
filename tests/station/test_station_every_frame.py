"""The station shows every frame (issue 33): not-inspected frames are counted (per reason), listed with their reason and
picture and returned by the API; changeovers fold into one line per design run and never bury a drift alert; a
reclassified call counts under the class the reviewer chose; a schema-1 database is migrated to these counts."""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone

import pytest
from conftest import StationDB
from sqlalchemy import text
from station_data import back_to_schema_5, board_record, drift_event, one_shift

from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.station.app import create_app
from defect_detector.station.queries import events_since
from defect_detector.station.recorder import Recorder
from defect_detector.station.schema import SCHEMA_VERSION
from defect_detector.station.store import Store

TestClient = pytest.importorskip("fastapi.testclient").TestClient
N, REFUSED = 40, (3, 7, 11, 25, 33)  # 40 frames, 5 of them not inspected


def _frames(start: datetime) -> list:
    """40 frames a second apart: golden_a.png for frames 0-19, golden_b.png for 20-39 (a changeover at 20); frames
    3, 7, 11, 25 and 33 not inspected (3 and 33 blank, the others unregistered); a drift alert at frame 30."""
    out = []
    for i in range(N):
        when = start + timedelta(seconds=i)
        design = "golden_a.png" if i < 20 else "golden_b.png"
        events: tuple = ()
        if i == 20:
            events = ({"event": "changeover", "frame": 20, "source": "line 1", "time": when.isoformat(), "reference": "/g/golden_b.png"},)
        if i == 30:
            events = (drift_event(30, severity="critical", time=when),)
        record = board_record(i, time=when, events=events, drift="critical" if i >= 30 else "normal")
        record = dataclasses.replace(record, reference=design)
        if i in REFUSED:
            kind = "blank frame" if i in (3, 33) else "reference does not match"
            reason = f"board_{i:04d}.png: {kind} ({'99th percentile 12 <= 40' if i in (3, 33) else 'score 0.1'})"
            refused = {"verdict": "not_inspected", "reason": reason, "reason_kind": kind, "calls": (), "reference": None}
            record = dataclasses.replace(record, **refused, reference_image=None)
        out.append(record)
    return out


@pytest.fixture
def shift() -> tuple[datetime, Callable[[], datetime]]:
    """Where the frames start (5 minutes ago), and the station's clock: one shift holds both (``station_data.one_shift``)."""
    return one_shift(N, 300)


@pytest.fixture
def recorded(station_db: StationDB, shift: tuple[datetime, Callable[[], datetime]]) -> Iterator[Store]:
    start = shift[0]
    with Recorder(station_db.url, conf=0.5, classes=DEEPPCB_CLASSES, images=station_db.images) as recorder:
        for record in _frames(start):
            assert recorder.record(record)
    assert (recorder.recorded, recorder.not_inspected, recorder.unrecorded) == (N, len(REFUSED), 0)
    with Store(station_db.url, station_db.images) as store:
        yield store


@pytest.fixture
def client(recorded: Store, shift: tuple[datetime, Callable[[], datetime]]) -> Iterator[TestClient]:
    with TestClient(create_app(recorded, clock=shift[1]), base_url="http://localhost") as c:
        yield c


def _csv_rows(client: TestClient, since: str) -> list[dict[str, str]]:
    answer = client.get("/report", params={"since": since, "format": "csv"})
    assert answer.status_code == 200
    return list(csv.DictReader(io.StringIO(answer.text)))


def test_not_inspected_frames_are_counted_listed_and_served(client: TestClient) -> None:
    live = client.get("/api/live").json()
    for window in ("hour", "shift"):
        counts = live[window]
        assert (counts["frames"], counts["boards"], counts["not_inspected"]) == (N, N - len(REFUSED), len(REFUSED))
        assert counts["reasons"] == {"reference does not match": 3, "blank frame": 2}
    assert [f["frame"] for f in live["not_inspected"]] == sorted(REFUSED, reverse=True)
    assert all(f["image"] and f["reason"] for f in live["not_inspected"])
    items = client.get("/api/inspections", params={"verdict": "not_inspected"}).json()["items"]
    assert [i["frame"] for i in items] == sorted(REFUSED, reverse=True)
    for item in items:
        assert item["verdict"] == "not_inspected" and item["image"] is True and item["calls"] == []
        assert item["reason"].startswith(f"board_{item['frame']:04d}.png: ")
        assert item["reason_kind"] in ("blank frame", "reference does not match")
        picture = client.get(f"/api/inspections/{item['id']}/image")
        assert picture.status_code == 200 and picture.headers["content-type"] == "image/png"
    everything = client.get("/api/inspections", params={"limit": 100}).json()["items"]
    assert len(everything) == N and sum(i["verdict"] == "not_inspected" for i in everything) == len(REFUSED)
    assert client.get("/api/inspections", params={"verdict": "maybe"}).status_code == 422
    drawn = client.post(f"/api/inspections/{items[0]['id']}/missed", json={"box": [10, 10, 30, 30], "class": "open", "reviewer": "ana"})
    assert drawn.status_code == 409 and "was not inspected" in drawn.json()["detail"]  # never exported as a training frame


def test_the_report_counts_every_frame_per_reason(client: TestClient) -> None:
    since = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat()
    rows = _csv_rows(client, since)
    total = [r for r in rows if r["class"] == "all" and r["frames"] not in ("", "0")]
    assert len(total) == 1
    assert (total[0]["frames"], total[0]["boards"], total[0]["not_inspected"]) == (str(N), str(N - len(REFUSED)), str(len(REFUSED)))
    reasons = {r["reason"]: r["not_inspected"] for r in rows if r["class"] == "not_inspected"}
    assert reasons == {"reference does not match": "3", "blank frame": "2"}
    html = client.get("/report", params={"since": since}).text
    assert "not inspected: reference does not match" in html and "not inspected: blank frame" in html
    for frame in REFUSED:
        assert f"board_{frame:04d}.png" in html  # listed with its reason and a link to its picture
    assert html.count("/image\">image</a>") == len(REFUSED)


def test_changeovers_fold_into_design_runs_and_never_bury_a_drift_alert(client: TestClient, recorded: Store) -> None:
    live = client.get("/api/live").json()
    lines = [d["line"] for d in live["designs"]]
    assert lines == [
        "design golden_b.png: frames 20-39 (20 boards, 2 not inspected)",
        "design golden_a.png: frames 0-19 (20 boards, 3 not inspected)",
    ]
    assert [a["event"] for a in live["alerts"]] == ["drift"] and live["alerts"][0]["severity"] == "critical"
    html = client.get("/report", params={"since": (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat()}).text
    assert "design golden_a.png: frames 0-19 (20 boards, 3 not inspected)" in html and "critical" in html
    events = client.get("/api/events", params={"since": "2000-01-01"}).json()["items"]
    assert [e["event"] for e in events] == ["changeover", "drift"]


def test_a_flood_of_changeovers_keeps_the_drift_alert(tmp_path) -> None:  # noqa: ANN001
    db = str(tmp_path / "flood.db")
    start = datetime.now(timezone.utc) - timedelta(minutes=10)
    with Recorder(db, conf=0.5, classes=DEEPPCB_CLASSES, queue_size=200) as recorder:
        for i in range(120):  # every board its own golden image: 119 changeovers, one drift alert among them
            when = start + timedelta(seconds=i)
            events: tuple = ({"event": "changeover", "frame": i, "source": "line 1", "time": when.isoformat(), "reference": f"g{i}.png"},)
            if i == 60:
                events += (drift_event(60, time=when),)
            assert recorder.record(dataclasses.replace(board_record(i, time=when, events=events), reference=f"g{i}.png"))
    with Store(db) as store, store.engine.connect() as conn:
        found = events_since(conn, datetime(2000, 1, 1), limit=10)
        assert [e["event"] for e in found].count("drift") == 1 and len(found) == 11
        with TestClient(create_app(store), base_url="http://localhost") as client:
            live = client.get("/api/live").json()
    assert [a["event"] for a in live["alerts"]] == ["drift"]  # every board its own design: one line, not 120 one-board runs
    assert [d["line"] for d in live["designs"]] == ["120 designs, each on fewer than 3 frames in a row: frames 0-119 (120 boards)"]


def test_a_reclassified_call_counts_under_the_reviewers_class(client: TestClient) -> None:
    first = client.get("/api/review/next").json()
    model_class = first["call"]["class"]
    chosen = next(c for c in DEEPPCB_CLASSES if c != model_class)
    saved = client.post(f"/api/calls/{first['call']['id']}/verdict", json={"verdict": "defect", "class": chosen, "reviewer": "ana"})
    assert saved.status_code == 200
    rows = _csv_rows(client, (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat())
    shift = next(r["shift_start"] for r in rows if r["class"] == "all" and r["frames"] not in ("", "0"))
    per_class = {r["class"]: r for r in rows if r["shift_start"] == shift}
    assert per_class[chosen]["confirmed"] == "1" and per_class[chosen]["reclassified"] == "0"
    assert per_class[model_class]["confirmed"] == "0" and per_class[model_class]["reclassified"] == "1"
    assert per_class[model_class]["false_call_rate"] == "0.0" and per_class["all"]["confirmed"] == "1"


def test_a_schema_1_database_is_migrated(station_db: StationDB) -> None:
    start, clock = one_shift(N, 300)
    with Recorder(station_db.url, conf=0.5, classes=DEEPPCB_CLASSES, images=station_db.images) as recorder:
        for record in _frames(start):
            recorder.record(record)
    with Store(station_db.url, station_db.images) as store, store.engine.begin() as conn:  # back to what schema 1 had
        reviewed = conn.execute(text("SELECT min(id) FROM calls")).scalar()
        conn.execute(text(f"UPDATE calls SET verdict = 'defect', pending = false WHERE id = {int(reviewed)}"))
        back_to_schema_5(conn)
        for column in ("version", "lease_reviewer", "lease_until"):
            conn.execute(text(f"ALTER TABLE calls DROP COLUMN {column}"))
        conn.execute(text("DROP INDEX ix_inspections_verdict"))
        conn.execute(text("ALTER TABLE inspections DROP COLUMN reason_kind"))
        conn.execute(text("ALTER TABLE tallies DROP COLUMN not_inspected"))
        conn.execute(text("DROP TABLE refusal_tallies"))
        conn.execute(text("DROP TABLE design_runs"))
        conn.execute(text("UPDATE station_meta SET value = '1' WHERE key = 'schema_version'"))
    with Store(station_db.url, station_db.images) as store:
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT value FROM station_meta WHERE key = 'schema_version'")).scalar() == str(SCHEMA_VERSION)
            versions = dict(conn.execute(text("SELECT id, version FROM calls")).all())
        assert versions[reviewed] == 1 and set(versions.values()) == {0, 1}  # a call with a verdict starts at version 1
        with TestClient(create_app(store, clock=clock), base_url="http://localhost") as client:
            live = client.get("/api/live").json()
    assert (live["shift"]["frames"], live["shift"]["not_inspected"]) == (N, len(REFUSED))
    assert live["shift"]["reasons"] == {"reference does not match": 3, "blank frame": 2}
    inspected = N - len(REFUSED)  # schema 6's yield filled in: no serials before, so each inspected frame is a board
    assert (live["shift"]["failed"], live["shift"]["first_inspected"], live["shift"]["first_pass_yield"]) == (inspected, inspected, 0.0)
    assert [d["line"] for d in live["designs"]][-1] == "design golden_a.png: frames 0-19 (20 boards, 3 not inspected)"
