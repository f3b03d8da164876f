"""The station under two reviewers (issue 36), on SQLite and PostgreSQL: ``/api/review/next`` leases a call to one
reviewer, a verdict on a call that has one needs its current version (else 409), and two reviewers racing through one
queue over real HTTP lose no verdict and never get the same call."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

import pytest
from conftest import StationDB
from sqlalchemy import func, select
from station_data import frames_with_drift

from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.station.app import create_app
from defect_detector.station.recorder import Recorder
from defect_detector.station.schema import calls, verdicts
from defect_detector.station.server import running
from defect_detector.station.store import Store

TestClient = pytest.importorskip("fastapi.testclient").TestClient
N = 8


class Clock:
    """A settable aware-UTC clock for the app (leases expire on it)."""

    def __init__(self) -> None:
        self.now = datetime.now(timezone.utc)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def store(station_db: StationDB) -> Iterator[Store]:
    with Recorder(station_db.url, conf=0.5, classes=DEEPPCB_CLASSES, images=station_db.images) as recorder:
        for record in frames_with_drift(N):
            recorder.record(record)
    with Store(station_db.url, station_db.images) as s:
        yield s


def _one_line(response, status: int) -> str:  # noqa: ANN001
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and "Traceback" not in response.text
    return detail


def test_next_leases_a_call_to_one_reviewer(store: Store) -> None:
    clock = Clock()
    client = TestClient(create_app(store, clock=clock), base_url="http://localhost")
    ana = client.get("/api/review/next", params={"reviewer": "ana"})
    ben = client.get("/api/review/next", params={"reviewer": "ben"}).json()
    assert ana.json()["lease"]["reviewer"] == "ana" and ben["lease"]["reviewer"] == "ben"
    assert ana.json()["call"]["id"] < ben["call"]["id"]  # the second reviewer gets the next call
    assert ana.headers["etag"] == '"0"' and ana.json()["call"]["version"] == 0
    assert client.get("/api/review/next", params={"reviewer": "ana"}).json()["call"]["id"] == ana.json()["call"]["id"]  # still hers
    peek = client.get("/api/review/next").json()  # no reviewer: looks at the oldest call nobody holds, leases nothing
    assert peek["lease"] is None and peek["call"]["id"] not in (ana.json()["call"]["id"], ben["call"]["id"])
    clock.now += timedelta(seconds=121)  # ana's lease ran out: the call goes to whoever asks
    assert client.get("/api/review/next", params={"reviewer": "cat"}).json()["call"]["id"] == ana.json()["call"]["id"]
    _one_line(client.get("/api/review/next", params={"reviewer": "a\nb"}), 422)


def test_a_second_verdict_needs_the_current_version(store: Store) -> None:
    client = TestClient(create_app(store), base_url="http://localhost")
    call = client.get("/api/review/next", params={"reviewer": "ana"}).json()["call"]["id"]
    url = f"/api/calls/{call}/verdict"
    first = client.post(url, json={"verdict": "defect", "reviewer": "ana"})  # a first verdict needs no version
    assert first.status_code == 200 and first.json()["version"] == 1
    detail = _one_line(client.post(url, json={"verdict": "false_call", "reviewer": "ben"}), 409)
    assert "already has a verdict (defect by ana, version 1)" in detail and '"version": 1' in detail
    assert "not 0" in _one_line(client.post(url, json={"verdict": "false_call", "reviewer": "ben", "version": 0}), 409)
    changed = client.post(url, json={"verdict": "false_call", "reviewer": "ben", "version": 1})
    assert changed.status_code == 200 and changed.json()["version"] == 2
    assert client.post(url, json={"verdict": "skip", "reviewer": "cat"}, headers={"If-Match": '"2"'}).json()["version"] == 3
    _one_line(client.post(url, json={"verdict": "skip", "reviewer": "cat"}, headers={"If-Match": '"2"'}), 409)
    _one_line(client.post(url, json={"verdict": "skip", "reviewer": "cat"}, headers={"If-Match": "x"}), 400)
    item = client.get(f"/api/inspections/{first.json()['inspection']}").json()
    assert next(c for c in item["calls"] if c["id"] == call)["version"] == 3
    with store.engine.connect() as conn:
        history = conn.execute(select(verdicts.c.reviewer).where(verdicts.c.call_id == call).order_by(verdicts.c.id)).scalars().all()
    assert history == ["ana", "ben", "cat"]  # the refused ones wrote nothing


def _post(base: str, path: str, body: dict) -> tuple[int, dict]:
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def _get(base: str, path: str) -> tuple[int, dict]:
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else {}
    finally:
        conn.close()


def test_two_reviewers_racing_on_one_call_one_wins(store: Store) -> None:
    with running(create_app(store)) as base:
        for _ in range(4):
            _, item = _get(base, "/api/review/next")
            call = item["call"]["id"]
            start = threading.Barrier(2)
            answers: dict[str, int] = {}

            def post(name: str, verdict: str, call: int = call, start: threading.Barrier = start, answers: dict = answers) -> None:
                start.wait()
                answers[name] = _post(base, f"/api/calls/{call}/verdict", {"verdict": verdict, "reviewer": name})[0]

            threads = [threading.Thread(target=post, args=("ana", "defect")), threading.Thread(target=post, args=("ben", "false_call"))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert sorted(answers.values()) == [200, 409], answers  # never two 200s: the last write does not win silently
            with store.engine.connect() as conn:
                assert conn.execute(select(func.count()).select_from(verdicts).where(verdicts.c.call_id == call)).scalar() == 1


def test_two_reviewers_work_through_the_queue_without_sharing_a_call(store: Store) -> None:
    with store.engine.connect() as conn:
        waiting = conn.execute(select(func.count()).select_from(calls).where(calls.c.pending.is_(True))).scalar()
    seen: dict[str, list[int]] = {"ana": [], "ben": []}
    failures: list[str] = []
    with running(create_app(store)) as base:

        def review(name: str) -> None:
            while True:
                status, item = _get(base, f"/api/review/next?reviewer={name}")
                if status == 204:
                    return
                call = item["call"]
                seen[name].append(call["id"])
                body = {"verdict": "defect", "reviewer": name, "version": call["version"]}
                status, body = _post(base, f"/api/calls/{call['id']}/verdict", body)
                if status != 200:
                    failures.append(f"{name} {call['id']}: {status} {body}")
                    return

        threads = [threading.Thread(target=review, args=(n,)) for n in seen]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert not failures and not set(seen["ana"]) & set(seen["ben"])
    assert len(seen["ana"]) + len(seen["ben"]) == waiting > 0
    with store.engine.connect() as conn:
        stmt = select(verdicts.c.call_id, func.count()).where(verdicts.c.call_id.is_not(None)).group_by(verdicts.c.call_id)
        per_call = conn.execute(stmt).all()
    assert len(per_call) == waiting and all(n == 1 for _, n in per_call)


def test_a_leased_call_takes_a_verdict_only_from_its_reviewer_until_the_lease_runs_out(store: Store) -> None:
    """Issue 44: the lease was advisory; another reviewer could post the first verdict on a call leased to someone."""
    clock = Clock()
    client = TestClient(create_app(store, clock=clock), base_url="http://localhost")
    call = client.get("/api/review/next", params={"reviewer": "ana"}).json()["call"]["id"]
    url = f"/api/calls/{call}/verdict"
    assert "is leased to ana until" in _one_line(client.post(url, json={"verdict": "false_call", "reviewer": "ben"}), 409)
    clock.now += timedelta(seconds=121)  # ana's lease ran out
    assert client.post(url, json={"verdict": "false_call", "reviewer": "ben"}).status_code == 200
    other = client.get("/api/review/next", params={"reviewer": "ana"}).json()["call"]["id"]
    answer = client.post(f"/api/calls/{other}/verdict", json={"verdict": "defect", "reviewer": "ana"})
    assert answer.status_code == 200 and answer.json()["version"] == 1  # the lease holder's verdict is taken at once
    with store.engine.connect() as conn:
        history = conn.execute(select(verdicts.c.reviewer).where(verdicts.c.call_id == call)).scalars().all()
    assert history == ["ben"]  # the refused verdict wrote nothing
