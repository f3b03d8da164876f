"""inspect/record.py: the frame record owns its verdict, its typed refusal and its serialisations (issue 43)."""

from __future__ import annotations

import csv
import dataclasses
import json
import tracemalloc
from datetime import datetime, timezone
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from defect_detector.align.mapping import Mapping
from defect_detector.align.register import Registration
from defect_detector.core.frame import Frame
from defect_detector.core.frame_record import Prepared
from defect_detector.core.refusal import Refusal, RefusalKind
from defect_detector.core.types import Detections, LetterboxMeta
from defect_detector.core.verdict import VERDICTS, verdict_of
from defect_detector.inspect.outputs import Outputs
from defect_detector.inspect.panel import BoardOutline
from defect_detector.inspect.record import Inspection
from defect_detector.inspect.sources import open_source
from defect_detector.inspect.trace import Trace
from defect_detector.monitor.drift import DriftEvent

NOW = datetime(2026, 12, 5, tzinfo=timezone.utc)
CLASSES = ["open", "short"]


def _detections(*scores: float) -> Detections:
    boxes = torch.tensor([[1.0, 2.0, 5.0, 6.0], [3.0, 3.0, 9.0, 9.0]][: len(scores)]).reshape(-1, 4)
    names = ["open", "short"][: len(scores)]
    meta = LetterboxMeta(1.0, 0, 0, 20, 30)
    return Detections(boxes, torch.tensor(scores), torch.arange(len(scores)), names, torch.zeros(4, 2), {}, meta)


def _prepared(name: str = "b.png", **changes: object) -> Prepared:
    return Prepared(Frame(7, np.zeros((20, 30), np.uint8), "cam0", name, 0.0), levels=np.zeros(4), **changes)


def _records() -> dict[str, Inspection]:
    """One record of every verdict, two kinds of pass_suspect among them."""
    refused = _prepared(refusal=Refusal(RefusalKind.UNDEREXPOSED, "underexposed: 25% of the golden image's level", {"light": 0.25}))
    return {
        "pass": Inspection.finish(_prepared(), _detections()),
        "fail": Inspection.finish(_prepared(), _detections(0.8, 0.3)),
        "drift": Inspection.finish(_prepared(), _detections(), drift="critical", score=9.1),
        "untaught": Inspection.finish(_prepared(design_warning="this design looks unlike the model's training images"), _detections()),
        "refused": Inspection.finish(refused, None, drift="critical"),
    }


def test_one_rule_gives_every_verdict() -> None:
    assert VERDICTS == ("pass", "pass_suspect", "fail", "not_inspected")
    assert [verdict_of(False, 3, True), verdict_of(True, 2, True), verdict_of(True, 0, True), verdict_of(True, 0, False)] == [
        "not_inspected",
        "fail",
        "pass_suspect",
        "pass",
    ]
    records = _records()
    assert {k: r.verdict.value for k, r in records.items()} == {
        "pass": "pass",
        "fail": "fail",
        "drift": "pass_suspect",
        "untaught": "pass_suspect",
        "refused": "not_inspected",
    }
    assert records["drift"].suspect_kind == "drift critical" and records["untaught"].suspect_kind == "untaught look"
    assert records["drift"].reason.startswith("drift critical: score 9.1") and records["untaught"].reason.startswith("untaught look")


def test_the_json_the_csv_row_and_the_station_agree_on_every_verdict_and_reason() -> None:
    """Each serialisation written out and read against what the frame is (not against the record's own attribute, which
    all three read: issue 57 found that comparison could not fail)."""
    expected = {
        "pass": ("pass", None, 0),
        "fail": ("fail", None, 2),
        "drift": ("pass_suspect", "drift critical", 0),
        "untaught": ("pass_suspect", "untaught look", 0),
        "refused": ("not_inspected", "underexposed: 25% of the golden image's level", 0),
    }
    for key, record in _records().items():
        verdict, reason, calls = expected[key]
        station, row, data = record.to_station(NOW), record.csv_row(CLASSES), record.to_json()
        parsed = json.loads(json.dumps(data))
        assert parsed["verdict"] == station.verdict == row[2] == verdict, key
        for written in (parsed["reason"], station.reason, row[3] or None):
            assert (written is None) if reason is None else written.startswith(reason), (key, written)
        assert len(parsed["calls"]) == len(station.calls) == int(row[4]) == calls, key


def test_a_refusal_is_typed_and_counted_by_its_kind_never_by_its_text() -> None:
    record = _records()["refused"]
    assert record.refusal.kind == RefusalKind.UNDEREXPOSED and record.refusal.kind.camera and record.refusal.values["light"] == 0.25
    assert record.to_station(NOW).reason_kind == "underexposed" == record.to_station(NOW).kind
    reworded = dataclasses.replace(record, refusal=Refusal(RefusalKind.UNDEREXPOSED, "b.png: too dark (see the light)"))
    assert Inspection.finish(reworded).to_station(NOW).kind == "underexposed"  # the message's wording does not matter
    with pytest.raises(ValueError):
        Refusal("too dark", "b.png: too dark")
    assert not RefusalKind.HIDDEN.camera and not RefusalKind.COVERS_LITTLE.camera and RefusalKind.BLANK.camera


def test_a_record_cannot_be_changed_after_it_is_finished() -> None:
    record = _records()["fail"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.drift = "normal"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.golden = None  # type: ignore[misc]


def test_the_station_row_of_an_inspected_frame_with_its_golden_image() -> None:
    reg = Registration(Mapping(np.eye(2, 3), (20, 30)), 0.97, True, 2.345678, -0.1, 1.0, difference=0.012)
    golden = np.ones((20, 30), np.uint8)
    event = DriftEvent("drift", 7, "cam0", "warning", 6.5, ["backbone.stem"], "blur")
    prepared = _prepared(registration=reg, golden=golden, golden_name="golden.png")
    record = Inspection.finish(prepared, _detections(0.8, 0.2), events=[event], drift="warning", score=6.5, weights="m.pt")
    station = record.to_station(NOW)
    assert (station.verdict, station.frame, station.source, station.name, station.model) == ("fail", 7, "cam0", "b.png", "m.pt")
    assert station.reference == "golden.png" and station.reference_image is golden
    assert station.registration == {"shift": 2.3457, "angle": -0.1, "score": 0.97, "difference": 0.012}
    centres = [((c.box[0] + c.box[2]) / 2, (c.box[1] + c.box[3]) / 2) for c in station.calls]
    assert np.allclose([c.golden for c in station.calls], centres)  # golden px: the registration moves nothing
    assert [c.class_name for c in station.calls] == ["open", "short"] and station.calls[0].box == (1.0, 2.0, 5.0, 6.0)
    assert station.events[0]["event"] == "drift" and station.events[0]["frame"] == 7
    frame = Frame(3, None, "cam0", "x.png", 0.0, "x.png: corrupt")
    unread = Inspection.finish(Prepared(frame, refusal=Refusal(RefusalKind.UNREADABLE, "x.png: corrupt")))
    station = unread.to_station(NOW)
    assert station.verdict == "not_inspected" and station.reason == "x.png: corrupt" and station.kind == "unreadable"
    assert station.image is None and station.reference is None and station.registration is None


def test_report_csv_escapes_file_names_a_spreadsheet_would_run(tmp_path: Path) -> None:
    folder = tmp_path / "frames"
    folder.mkdir()
    (folder / "a.png").write_bytes(b"")
    records = [
        Inspection.finish(_prepared("=1+2+cmd|calc!A0.jpg"), _detections(), drift="normal"),
        Inspection.finish(_prepared("@x.png", refusal=Refusal(RefusalKind.UNREADABLE, "-bad: unreadable")), drift="-"),
        Inspection.finish(_prepared("board.png"), _detections(0.9), drift="normal"),
    ]
    outputs = Outputs(open_source(str(folder)), CLASSES, None, None, str(tmp_path / "r.csv"))
    for record in records:
        outputs.add(record)
    outputs.close()
    rows = list(csv.reader((tmp_path / "r.csv").open()))
    header = ["file_name", "frame", "verdict", "reason", "calls", "open", "short", "dropped", "drift"]
    assert rows[0] == [*header, "conf", "serial", "lot", "order", "boards", "tolerated"]
    assert rows[1][0] == "'=1+2+cmd|calc!A0.jpg" and rows[2][0] == "'@x.png" and rows[2][3] == "'-bad: unreadable"
    assert rows[2][8] == "'-" and rows[3][:6] == ["board.png", "7", "fail", "", "1", "1"]


def test_save_json_holds_no_record_in_memory(tmp_path: Path) -> None:
    """Issue 44: ``--save-json`` kept every record in memory (2-4 KB a frame: gigabytes for a week's stream); the JSON
    is now written from the run's JSONL at the end, so memory stays flat however many frames go by."""
    folder = tmp_path / "frames"
    folder.mkdir()
    (folder / "a.png").write_bytes(b"")
    outputs = Outputs(open_source(str(folder)), CLASSES, str(tmp_path / "det.json"), None)
    record = Inspection.finish(_prepared(), _detections(0.9, 0.5), drift="normal")
    outputs.add(record)  # the first line opens what stays open
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(2000):
        outputs.add(record)
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    outputs.close()
    assert grown < 100_000, f"{grown} bytes held after 2,000 frames"
    written = json.loads((tmp_path / "det.json").read_text())
    assert len(written) == 2001 and written[0] == record.to_json() and "timestamp" not in written[0]


def test_a_frame_too_small_for_the_stamp_is_drawn_as_a_legible_placeholder(tmp_path: Path) -> None:
    """A 16x16 frame stamped NOT INSPECTED at its own size showed one red blur; it gets the unread frame's placeholder."""
    folder = tmp_path / "frames"
    folder.mkdir()
    (folder / "a.png").write_bytes(b"")
    outputs = Outputs(open_source(str(folder)), CLASSES, None, str(tmp_path / "ann"))
    tiny = Prepared(Frame(0, np.zeros((16, 16), np.uint8), "cam0", "tiny.png", 0.0), refusal=Refusal(RefusalKind.TOO_SMALL, "too small"))
    outputs.add(Inspection.finish(tiny))
    outputs.close()
    assert cv2.imread(str(tmp_path / "ann" / "tiny.png")).shape == (240, 640, 3)


def test_the_record_carries_its_threshold_trace_and_panel_boards_into_every_output() -> None:
    """Issue 58 item 4: the threshold that decided the frame, the board's serial, lot and work order, and a panel's
    per-board verdicts are in the JSON record, the CSV row and the station's row alike."""
    outlines = (BoardOutline("A", (0.0, 0.0, 4.0, 20.0)), BoardOutline("B", (4.0, 0.0, 30.0, 20.0)), BoardOutline("C", (0, 20, 30, 40)))
    record = Inspection.finish(_prepared(), _detections(0.8, 0.3), conf=0.3, trace=Trace("SN1", "L2", "WO3"), outlines=outlines)
    data, station, row = record.to_json(), record.to_station(NOW), record.csv_row(CLASSES)  # call centres (3, 4) and (6, 6)
    assert (data["serial"], data["lot"], data["order"], data["conf"]) == ("SN1", "L2", "WO3", 0.3)
    assert data["boards"] == [{"name": "A", "verdict": "fail", "calls": 1}, {"name": "B", "verdict": "fail", "calls": 1}] + [
        {"name": "C", "verdict": "pass", "calls": 0}
    ]
    assert [c["board"] for c in data["calls"]] == ["A", "B"] and [c.board for c in station.calls] == ["A", "B"]
    assert (station.serial, station.lot, station.order, station.conf) == ("SN1", "L2", "WO3", 0.3)
    assert [(b.name, b.verdict) for b in station.boards] == [("A", "fail"), ("B", "fail"), ("C", "pass")]
    assert row[-6:] == [0.3, "SN1", "L2", "WO3", "A:fail(1) B:fail(1) C:pass", 0]
    refused = Inspection.finish(_records()["refused"], trace=Trace("SN1"), outlines=outlines)
    assert [b["verdict"] for b in refused.to_json()["boards"]] == ["not_inspected"] * 3 and refused.to_json()["conf"] is None
    plain = _records()["fail"].to_json()  # a frame of one board, no trace: the keys are there, empty; its calls on no board
    assert (plain["serial"], plain["boards"], plain["conf"]) == (None, [], None) and all("board" not in c for c in plain["calls"])
