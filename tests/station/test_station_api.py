"""The station's JSON API and pages over a recorded history (SQLite and PostgreSQL): shapes DESIGN.md fixes, keyset
pagination, the review flow, validation (ids, classes, boxes) with one-line 4xx answers, images, events, the report."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import StationDB
from sqlalchemy import func, select
from station_data import frames_with_drift, one_shift

from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.station import store as store_module
from defect_detector.station.app import create_app
from defect_detector.station.recorder import Recorder
from defect_detector.station.schema import calls
from defect_detector.station.store import Store

TestClient = pytest.importorskip("fastapi.testclient").TestClient
N = 8


@pytest.fixture
def shift() -> tuple[datetime, Callable[[], datetime]]:
    """Where the boards start, and the station's clock: one shift holds both (``station_data.one_shift``)."""
    return one_shift(N, N)


@pytest.fixture
def recorded(station_db: StationDB, shift: tuple[datetime, Callable[[], datetime]]) -> Iterator[tuple[Store, list]]:
    """``N`` boards recorded (drift raised on frames 4 and 5), opened as the station opens them."""
    frames = frames_with_drift(N, start=shift[0])
    with Recorder(station_db.url, conf=0.5, classes=DEEPPCB_CLASSES, images=station_db.images) as recorder:
        for record in frames:
            recorder.record(record)
    assert recorder.recorded == N
    with Store(station_db.url, station_db.images) as store:
        yield store, frames


@pytest.fixture
def client(recorded: tuple[Store, list], shift: tuple[datetime, Callable[[], datetime]]) -> Iterator[TestClient]:
    with TestClient(create_app(recorded[0], clock=shift[1]), base_url="http://localhost") as c:
        yield c


def _one_line_error(response, status: int) -> str:  # noqa: ANN001
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"detail"} and isinstance(body["detail"], str) and "\n" not in body["detail"] and body["detail"]
    assert "Traceback" not in response.text
    return body["detail"]


def test_inspections_newest_first_with_keyset_pagination(client: TestClient, recorded: tuple[Store, list]) -> None:
    frames = recorded[1]
    first = client.get("/api/inspections", params={"limit": 3}).json()["items"]
    assert [i["frame"] for i in first] == [7, 6, 5]
    item = first[0]
    for key in ("id", "source", "frame", "time", "model", "reference", "drift", "score", "calls"):
        assert key in item
    assert item["source"] == "line 1" and item["model"] == "small.pt" and item["reference"] == "golden.png"
    assert datetime.fromisoformat(item["time"]).tzinfo is not None
    want = sorted(((c.class_name, round(c.score, 4)) for c in frames[7].calls), key=lambda t: -t[1])
    assert [(c["class"], c["score"]) for c in item["calls"]] == want
    assert all(len(c["box"]) == 4 and set(c) >= {"id", "class", "score", "box"} for c in item["calls"])
    rest = client.get("/api/inspections", params={"limit": 50, "before": first[-1]["id"]}).json()["items"]
    assert [i["frame"] for i in rest] == [4, 3, 2, 1, 0]
    assert client.get("/api/inspections", params={"before": rest[-1]["id"]}).json()["items"] == []
    _one_line_error(client.get("/api/inspections", params={"limit": 0}), 422)
    _one_line_error(client.get("/api/inspections", params={"before": "1; DROP TABLE calls"}), 422)


def test_review_flow_verdicts_and_missed_boxes(client: TestClient, recorded: tuple[Store, list]) -> None:
    store = recorded[0]
    with store.engine.connect() as conn:
        pending = conn.execute(select(func.count()).select_from(calls).where(calls.c.pending.is_(True))).scalar()
    first = client.get("/api/review/next").json()
    assert set(first) >= {"call", "inspection"} and first["queue"] == pending
    assert first["inspection"]["frame"] == 0 and first["call"]["score"] == 0.9  # oldest first
    call_id, inspection_id = first["call"]["id"], first["inspection"]["id"]
    saved = client.post(f"/api/calls/{call_id}/verdict", json={"verdict": "defect", "class": "short", "reviewer": "ana"})
    assert saved.status_code == 200 and saved.json()["class"] == "short" and saved.json()["reviewer"] == "ana"
    second = client.get("/api/review/next").json()
    assert second["call"]["id"] != call_id and second["queue"] == pending - 1
    assert (
        client.post(f"/api/calls/{second['call']['id']}/verdict", json={"verdict": "false_call", "reviewer": "ana"}).json()["class"] is None
    )
    missed = client.post(f"/api/inspections/{inspection_id}/missed", json={"box": [10, 20, 40, 60], "class": "spur", "reviewer": "bo"})
    assert missed.status_code == 201 and missed.json()["box"] == [10.0, 20.0, 40.0, 60.0]
    detail = client.get(f"/api/inspections/{inspection_id}").json()
    assert [m["class"] for m in detail["missed"]] == ["spur"]
    assert {c["id"]: c["verdict_class"] for c in detail["calls"]}[call_id] == "short"
    while (nxt := client.get("/api/review/next")).status_code == 200:  # empty the queue
        client.post(f"/api/calls/{nxt.json()['call']['id']}/verdict", json={"verdict": "skip", "reviewer": "ana"})
    assert nxt.status_code == 204 and nxt.content == b""


BAD_REQUESTS = [
    ("/api/calls/{call}/verdict", {"verdict": "maybe", "reviewer": "ana"}, 422, "verdict"),
    ("/api/calls/{call}/verdict", {"verdict": "defect", "class": "scratch", "reviewer": "ana"}, 422, "unknown class"),
    ("/api/calls/{call}/verdict", {"verdict": "defect", "class": "open'; DROP TABLE calls; --", "reviewer": "a"}, 422, "unknown"),
    ("/api/calls/{call}/verdict", {"verdict": "false_call", "class": "open", "reviewer": "ana"}, 422, "only a defect"),
    ("/api/calls/{call}/verdict", {"verdict": "defect", "reviewer": ""}, 422, "reviewer"),
    ("/api/calls/{call}/verdict", {"verdict": "defect", "reviewer": "a\nb"}, 422, "reviewer"),
    ("/api/calls/{call}/verdict", {"verdict": "defect", "reviewer": "ana", "extra": 1}, 422, "extra"),
    ("/api/calls/999999/verdict", {"verdict": "defect", "reviewer": "ana"}, 404, "no call 999999"),
    ("/api/calls/0/verdict", {"verdict": "defect", "reviewer": "ana"}, 422, "call_id"),
    ("/api/calls/abc/verdict", {"verdict": "defect", "reviewer": "ana"}, 422, "call_id"),
    ("/api/calls/99999999999999999999999/verdict", {"verdict": "defect", "reviewer": "ana"}, 422, "call_id"),
    ("/api/inspections/{insp}/missed", {"box": [0, 0, 400, 100], "class": "open", "reviewer": "ana"}, 422, "not inside the 320x240"),
    ("/api/inspections/{insp}/missed", {"box": [-5, 0, 10, 10], "class": "open", "reviewer": "ana"}, 422, "not inside"),
    ("/api/inspections/{insp}/missed", {"box": [30, 30, 10, 40], "class": "open", "reviewer": "ana"}, 422, "x2 >= x1"),
    ("/api/inspections/{insp}/missed", {"box": [1, 2, 3], "class": "open", "reviewer": "ana"}, 422, "box"),
    ("/api/inspections/{insp}/missed", {"box": [1, 2, 30, "x"], "class": "open", "reviewer": "ana"}, 422, "box"),
    ("/api/inspections/{insp}/missed", {"box": [1, 2, 30, 40], "class": "dent", "reviewer": "ana"}, 422, "unknown class"),
    ("/api/inspections/424242/missed", {"box": [1, 2, 30, 40], "class": "open", "reviewer": "ana"}, 404, "no inspection"),
]


def test_bad_requests_get_one_line_4xx(client: TestClient) -> None:
    first = client.get("/api/review/next").json()
    for path, body, status, match in BAD_REQUESTS:
        url = path.format(call=first["call"]["id"], insp=first["inspection"]["id"])
        detail = _one_line_error(client.post(url, json=body), status)
        assert match in detail, (url, body, detail)
    after = client.get("/api/review/next").json()
    assert after["call"]["id"] == first["call"]["id"] and after["queue"] == first["queue"]  # nothing was stored
    assert client.get(f"/api/inspections/{first['inspection']['id']}").json()["missed"] == []


def test_malformed_bodies_and_unknown_routes(client: TestClient) -> None:
    call = client.get("/api/review/next").json()["call"]["id"]
    _one_line_error(client.post(f"/api/calls/{call}/verdict", content=b"{not json", headers={"Content-Type": "application/json"}), 422)
    _one_line_error(client.post(f"/api/calls/{call}/verdict"), 422)
    _one_line_error(client.get("/api/nothing-here"), 404)
    _one_line_error(client.delete(f"/api/calls/{call}/verdict"), 405)
    _one_line_error(client.get("/api/events", params={"since": "yesterday"}), 400)
    _one_line_error(client.get("/report", params={"since": "2020-13-45"}), 400)
    _one_line_error(client.get("/api/inspections/..%2F..%2Fetc%2Fpasswd/image"), 404)


def test_images_and_golden_images_are_served_from_stored_paths(client: TestClient, recorded: tuple[Store, list]) -> None:
    frames = recorded[1]
    item = client.get("/api/inspections", params={"limit": 1}).json()["items"][0]
    for which, expected in (("image", frames[-1].image), ("reference", frames[-1].reference_image)):
        response = client.get(f"/api/inspections/{item['id']}/{which}")
        assert response.status_code == 200 and response.headers["content-type"] == "image/png"
        decoded = cv2.imdecode(np.frombuffer(response.content, np.uint8), cv2.IMREAD_UNCHANGED)
        assert np.array_equal(decoded, expected)  # the frame exactly as inspected (PNG is lossless)
    _one_line_error(client.get("/api/inspections/77777/image"), 404)


def test_events_live_summary_and_healthz(client: TestClient) -> None:
    events = client.get("/api/events", params={"since": "2000-01-01T00:00:00Z"}).json()["items"]
    assert [(e["event"], e["frame"]) for e in events] == [("drift", 4), ("recovered", 6)]
    assert events[0]["cause"] == "defocus" and events[0]["layers"] == ["backbone.stem"] and events[0]["inspection"]
    future = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    assert client.get("/api/events", params={"since": future}).json()["items"] == []
    live = client.get("/api/live").json()
    assert live["latest"]["frame"] == N - 1 and live["latest"]["image"] and live["latest"]["calls"]
    assert live["hour"]["boards"] == N and live["shift"]["boards"] == N
    assert sum(live["hour"]["per_class"].values()) == live["hour"]["calls"] > 0
    assert [p["frame"] for p in live["drift"]] == list(range(N)) and [a["event"] for a in live["alerts"]] == ["recovered", "drift"]
    assert client.get("/healthz").json()["status"] == "ok"


def test_report_html_and_csv(client: TestClient) -> None:
    first = client.get("/api/review/next").json()
    client.post(f"/api/calls/{first['call']['id']}/verdict", json={"verdict": "false_call", "reviewer": "ana"})
    second = client.get("/api/review/next").json()
    client.post(f"/api/calls/{second['call']['id']}/verdict", json={"verdict": "defect", "reviewer": "ana"})
    since = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat()
    html = client.get("/report", params={"since": since})
    assert html.status_code == 200 and html.headers["content-type"].startswith("text/html") and "Shift report" in html.text
    csv_text = client.get("/report", params={"since": since}, headers={"Accept": "text/csv"})
    assert csv_text.headers["content-type"].startswith("text/csv")
    lines = csv_text.text.strip().splitlines()
    header = "shift_start,shift_end,class,reason,frames,boards,not_inspected,calls,confirmed,reclassified,false_calls,false_call_rate"
    assert lines[0] == header + ",missed,drift_alerts,passed,pass_suspect,failed,first_inspected,first_passed,first_pass_yield"
    rows = [dict(zip(lines[0].split(","), line.split(","))) for line in lines[1:]]
    total = [r for r in rows if r["class"] == "all" and r["boards"] != "0"]
    assert len(total) == 1 and total[0]["boards"] == total[0]["frames"] == str(N) and total[0]["drift_alerts"] == "1"
    assert total[0]["not_inspected"] == "0"
    assert total[0]["confirmed"] == "1" and total[0]["false_calls"] == "1"
    first_class = [r for r in rows if r["class"] == first["call"]["class"] and r["shift_start"] == total[0]["shift_start"]][0]
    assert float(first_class["false_call_rate"]) > 0


def test_pages_render_and_load_only_local_assets(client: TestClient) -> None:
    for path in ("/", "/review", "/report"):
        page = client.get(path)
        assert page.status_code == 200 and "<html" in page.text
        assert "http://" not in page.text and "https://" not in page.text  # nothing from a CDN
        assert "default-src 'self'" in page.headers["content-security-policy"]
    assert client.get("/static/live.js").status_code == 200 and client.get("/static/station.css").status_code == 200


def test_a_database_file_deleted_under_the_station_or_a_full_disk_is_unhealthy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 44: with its file deleted the station answered 201 to verdicts that vanished and /healthz said ok; with a
    full disk writes got 503 but /healthz said ok. Both now answer 503, in one line, until it is restarted."""
    path = tmp_path / "line.db"
    with Recorder(str(path), conf=0.5, classes=DEEPPCB_CLASSES) as recorder:
        for record in frames_with_drift(2):
            recorder.record(record)
    with Store(str(path)) as store, TestClient(create_app(store), base_url="http://localhost") as client:
        assert client.get("/healthz").status_code == 200
        monkeypatch.setattr(store_module.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10**9, 10**9, 0))
        assert "the disk under the station database is full" in _one_line_error(client.get("/healthz"), 503)
        monkeypatch.undo()
        call = client.get("/api/review/next").json()["call"]["id"]
        path.unlink()
        assert "deleted or replaced" in _one_line_error(client.get("/healthz"), 503)
        answer = client.post(f"/api/calls/{call}/verdict", json={"verdict": "defect", "reviewer": "ana"})
        assert "deleted or replaced" in _one_line_error(answer, 503)
