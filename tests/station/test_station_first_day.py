"""What a newcomer saw on the station's first day (issue 43): how many calls the review queue holds, design runs on a
line whose boards change design often, and the frame a drift alert is raised at, the same on the live page and in
the report."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from station_data import drift_event

from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.station.app import create_app
from defect_detector.station.designs import fold, run_line
from defect_detector.station.recorder import Recorder
from defect_detector.station.records import CallRecord, FrameRecord
from defect_detector.station.store import Store

TestClient = pytest.importorskip("fastapi.testclient").TestClient
CONF = 0.5
SCORES = (0.9, 0.5, 0.49, 0.1)  # two calls at or above the operating point (0.5 is at it), two below
START = datetime.now(timezone.utc) - timedelta(minutes=5)


def _frame(i: int, n_calls: int, drift: str = "normal", events: tuple = ()) -> FrameRecord:
    """Frame ``i`` with the first ``n_calls`` of :data:`SCORES`, each on its own box."""
    calls = tuple(CallRecord(DEEPPCB_CLASSES[0], s, (10.0 + 30 * k, 10.0, 30.0 + 30 * k, 30.0)) for k, s in enumerate(SCORES[:n_calls]))
    verdict = "fail" if any(s >= CONF for s in SCORES[:n_calls]) else "pass"
    return FrameRecord("line 1", i, f"b{i:03d}.png", START + timedelta(seconds=i), "small.pt", verdict, "golden.png",
                       drift=drift, score=0.5, events=events, calls=calls)


def _client(db: Path, frames: list[FrameRecord]) -> Iterator[TestClient]:
    with Recorder(str(db), conf=CONF, classes=DEEPPCB_CLASSES, queue_size=100) as recorder:
        for record in frames:
            assert recorder.record(record)
    with Store(str(db)) as store, TestClient(create_app(store), base_url="http://localhost") as client:
        yield client


def _queued(client: TestClient) -> list[dict]:
    """Every call the review queue hands out, each given a verdict so the next comes."""
    out = []
    while (nxt := client.get("/api/review/next")).status_code == 200:
        call = nxt.json()["call"]
        out.append(call)
        assert client.post(f"/api/calls/{call['id']}/verdict", json={"verdict": "false_call", "reviewer": "ana"}).status_code == 200
    assert nxt.status_code == 204
    return out


def test_the_queue_holds_each_call_at_or_above_the_operating_point_once(tmp_path: Path) -> None:
    frames = [_frame(i, i % 5) for i in range(20)]  # 0-4 calls: 0, 1, 2, 2, 2 of them at or above 0.5
    expected = sum(sum(s >= CONF for s in SCORES[: i % 5]) for i in range(20))
    assert expected == 28
    for client in _client(tmp_path / "q.db", frames):
        live = client.get("/api/live").json()
        assert (live["queue"], live["queue_frames"]) == (28, 16)  # 16 frames have a call at the point
        queued = _queued(client)
    assert len(queued) == 28 and len({c["id"] for c in queued}) == 28 and min(c["score"] for c in queued) >= CONF


def _rows(runs: list[tuple[str, int]]) -> list[SimpleNamespace]:
    """``design_runs`` rows of one source for ``(design, frames)`` runs in a row."""
    out, first = [], 0
    for design, n in runs:
        out.append(SimpleNamespace(id=len(out) + 1, source="line 1", design=design, first_frame=first, last_frame=first + n - 1,
                                   frames=n, not_inspected=0, inspection_id=first + 1, started=START, ended=START,
                                   design_warning=None, design_taught=None))
        first += n
    return out


@pytest.mark.parametrize(
    ("runs", "lines"),
    [
        ([("a", 50), ("b", 1), ("a", 50)], ["design a: frames 0-100 (100 boards; 1 board of other designs among them)"]),
        ([("a", 20), ("b", 2), ("a", 1), ("c", 1), ("a", 30)], ["design a: frames 0-53 (51 boards; 3 boards of other designs among them)"]),
        (
            [("a", 50), ("b", 1), ("c", 50)],
            ["design a: frames 0-49 (50 boards)", "design b: frame 50 (1 board)", "design c: frames 51-100 (50 boards)"],
        ),
        ([("a", 1), ("b", 1)] * 20, ["2 designs, each on fewer than 3 frames in a row: frames 0-39 (40 boards)"]),
        (
            [("a", 5), ("b", 1), ("c", 1), ("d", 1), ("e", 5)],
            [
                "design a: frames 0-4 (5 boards)",
                "3 designs, each on fewer than 3 frames in a row: frames 5-7 (3 boards)",
                "design e: frames 8-12 (5 boards)",
            ],
        ),
    ],
)
def test_design_runs_are_not_buried_in_one_board_runs(runs: list[tuple[str, int]], lines: list[str]) -> None:
    assert [run_line(s) for s in fold(_rows(runs))] == lines


def test_a_drift_alert_is_at_the_frame_it_was_raised_on_live_and_in_the_report(tmp_path: Path) -> None:
    raised = {**drift_event(64, time=START + timedelta(seconds=64)), "since": 62}  # flagged from 62, raised on 64
    frames = [_frame(i, 1, drift="warning" if i >= 62 else "normal", events=(raised,) if i == 64 else ()) for i in range(70)]
    for client in _client(tmp_path / "a.db", frames):
        alerts = client.get("/api/live").json()["alerts"]
        html = client.get("/report", params={"since": (START - timedelta(minutes=1)).isoformat()}).text
    assert [(a["event"], a["frame"], a["since"]) for a in alerts] == [("drift", 64, 62)]
    row = html[html.index('id="report-alerts"') :]
    assert "raised at frame" in row and ">64 (line 1)</a>" in row and "62 (line 1)" not in row
