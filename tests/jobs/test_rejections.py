"""False calls learnt from the operators (jobs/rejections.py): calls rejected at the station quieten their places of
their design, within the cap, and never a whole region; listed by ``info`` and undone by ``--forget-rejections``."""

import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("sqlalchemy", reason="station extra not installed (sqlalchemy)")

from defect_detector.cli.main import main  # noqa: E402
from defect_detector.inspect.tolerance import REJECTED_RADIUS, TOLERANCE_MARGIN, Tolerance, tolerated  # noqa: E402
from defect_detector.jobs.rejections import apply_rejections, forget_rejections  # noqa: E402
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, load_checkpoint  # noqa: E402
from defect_detector.station.recorder import Recorder  # noqa: E402
from defect_detector.station.records import CallRecord, FrameRecord  # noqa: E402
from defect_detector.station.review import record_verdict  # noqa: E402
from defect_detector.station.schema import calls  # noqa: E402
from defect_detector.station.store import Store  # noqa: E402

KEY, OTHER, UNTAUGHT = "image:design_a", "image:design_b", "image:design_c"
SPOTS = np.array([[60.0 + 90.0 * (i % 5), 50.0 + 100.0 * (i // 5)] for i in range(20)])  # 20 places, 90-100 px apart
SCORES = np.linspace(0.3, 0.6, 20)


def _frame(index: int, key: str, spots: np.ndarray, scores: np.ndarray) -> FrameRecord:
    """A failed frame of design ``key`` whose calls lie at golden-image ``spots`` (their boxes 7 px off in the frame)."""
    found = tuple(
        CallRecord("short", float(s), (x - 3.0, y - 3.0, x + 17.0, y + 17.0), golden=(float(x), float(y)))
        for (x, y), s in zip(spots, scores)
    )
    when = datetime.now(timezone.utc)
    frame = ("line 1", index, f"b{index}.png", when, "taught.pt", "fail")
    return FrameRecord(*frame, reference="g.png", calls=found, golden_key=key, conf=0.2)


def _station(path: Path) -> str:
    """A station database where reviewers rejected the 20 calls of design A and one call of an untaught design, and
    confirmed one call of design A as a defect (not a rejection)."""
    url = str(path)
    with Recorder(url, conf=0.2, images=path.with_suffix(".images")) as recorder:
        recorder.record(_frame(0, KEY, SPOTS, SCORES))
        recorder.record(_frame(1, UNTAUGHT, SPOTS[:1], SCORES[:1]))
        recorder.record(_frame(2, KEY, np.array([[400.0, 400.0]]), np.array([0.5])))
    with Store(url) as store, store.engine.begin() as conn:
        ids = conn.execute(calls.select().order_by(calls.c.id)).all()
        now = datetime.now(timezone.utc).replace(tzinfo=None)
        for row in ids[:21]:
            record_verdict(conn, row.id, "false_call", None, "ann", now)
        record_verdict(conn, ids[21].id, "defect", None, "ann", now)
    return url


def _weights(path: Path) -> Path:
    start = torch.load(DEFAULT_REFERENCE_WEIGHTS, map_location="cpu", weights_only=True)
    other = {"name": "b.png", "key": OTHER, "conf": 0.4, "tolerance": [[10.0, 20.0, 0.3]]}
    other |= {"tolerance_radius": 60.0, "tolerance_margin": 0.03}
    torch.save(start | {"taught": [{"name": "a.png", "key": KEY, "conf": 0.3}, other]}, path)
    return path


def test_rejected_calls_quieten_their_places_only_and_a_stronger_call_there_is_still_called(tmp_path: Path) -> None:
    url = _station(tmp_path / "station.db")
    out = tmp_path / "quiet.pt"
    report = apply_rejections(_weights(tmp_path / "taught.pt"), url, out)
    (design,) = report.designs
    assert (design.name, design.calls, design.places, design.capped) == ("a.png", 20, 20, 0)
    assert report.untaught == {UNTAUGHT: 1}
    entries = load_checkpoint(out).taught
    tolerance = Tolerance.from_entry(entries[0])
    assert tolerance is not None and len(tolerance.rejected) == 20 and len(tolerance.places) == 0
    assert entries[1]["tolerance"] == [[10.0, 20.0, 0.3]] and "rejected" not in entries[1]  # another design: untouched
    # the 20 places are quiet: the same false calls again, a few px off, are dropped
    assert tolerated(SPOTS + 4.0, SCORES, tolerance).all()
    # a real defect there scoring above the rejected score + margin is still called, and so is one at the cap
    assert not tolerated(SPOTS, SCORES + TOLERANCE_MARGIN + 0.01, tolerance).any()
    assert not tolerated(SPOTS[:1], np.array([0.95]), Tolerance(np.zeros((0, 3)), rejected=[[*SPOTS[0], 0.95]])).any()
    # never a whole region: a weak call just beyond a rejected spot's radius, between the places, is still called
    between = SPOTS + np.array([REJECTED_RADIUS + 5.0, 0.0])
    assert not tolerated(between, np.full(20, 0.1), tolerance).any()
    # applying the same verdicts again changes nothing; forgetting them leaves design A as it was taught
    again = apply_rejections(out, url, tmp_path / "again.pt")
    assert load_checkpoint(tmp_path / "again.pt").taught == entries and again.designs[0].places == 20
    assert forget_rejections(out, tmp_path / "undone.pt") == [("a.png", 20)]
    assert load_checkpoint(tmp_path / "undone.pt").taught == load_checkpoint(tmp_path / "taught.pt").taught


def test_teach_station_and_info_list_the_rejections_and_bad_uses_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = _station(tmp_path / "station.db")
    weights, out = _weights(tmp_path / "taught.pt"), tmp_path / "quiet.pt"
    assert main(["teach", "--station", url, "--weights", str(weights), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "a.png: 20 rejected call(s) read, 20 rejected place(s) tolerated within 20 px" in printed
    assert f"not applied: 1 rejected call(s) of design {UNTAUGHT}, which these weights were not taught" in printed
    assert main(["info", "--weights", str(out)]) == 0
    designs = json.loads(capsys.readouterr().out)["designs"]
    assert [(d["name"], d["tolerance_places"], d["rejected_places"]) for d in designs] == [("a.png", 0, 20), ("b.png", 1, 0)]
    assert main(["teach", "--forget-rejections", "--weights", str(out), "--out", str(tmp_path / "undone.pt")]) == 0
    assert "a.png: 20 rejected place(s) forgotten" in capsys.readouterr().out
    cases = [
        (["--station", url, "--out", str(out)], "need --weights"),
        (["--station", url, "--golden", "g.png", "--weights", str(weights), "--out", str(out)], "leave --golden and --good out"),
        (["--station", url, "--forget-rejections", "--weights", str(weights), "--out", str(out)], "give one"),
        (["--forget-rejections", "--weights", str(weights), "--out", str(tmp_path / "x.pt")], "nothing to forget"),
        (["--station", str(tmp_path / "missing.db"), "--weights", str(weights), "--out", str(tmp_path / "x.pt")], "no station database"),
    ]
    for args, words in cases:
        assert main(["teach", *args]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x.pt").exists() and not (tmp_path / "missing.db").exists()  # a mistyped path creates nothing
    with Store(str(tmp_path / "empty.db")):  # a station that recorded no rejected call
        pass
    assert main(["teach", "--station", str(tmp_path / "empty.db"), "--weights", str(weights), "--out", str(tmp_path / "x.pt")]) == 2
    assert "no call rejected" in capsys.readouterr().err and not (tmp_path / "x.pt").exists()


def test_the_station_lists_each_designs_rejections(tmp_path: Path) -> None:
    """Issue 56 item 3: the station lists, per design, the rejected calls ``teach --station`` applies."""
    from fastapi.testclient import TestClient

    from defect_detector.station.app import create_app

    url = _station(tmp_path / "station.db")
    with Store(url) as store, TestClient(create_app(store), base_url="http://localhost") as client:
        listed = client.get("/api/rejections").json()
    assert listed["designs"] == [{"design": "g.png", "key": KEY, "rejected": 20}, {"design": "g.png", "key": UNTAUGHT, "rejected": 1}]
    assert listed["apply"].startswith("defect-detector teach --station DB")
