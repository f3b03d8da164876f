"""``review export``: fully reviewed frames as COCO (confirmed calls with corrected classes, no false calls, drawn misses,
``reference`` per image), read as is by ``CocoDetectionDataset`` and ``train``; SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import StationDB
from station_data import board_record

from defect_detector.cli.main import main
from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.station.app import create_app
from defect_detector.station.export import export_review
from defect_detector.station.recorder import Recorder
from defect_detector.station.store import Store

TestClient = pytest.importorskip("fastapi.testclient").TestClient


def _review(url: str, images: Path) -> tuple[dict[int, list], list]:
    """Record 4 boards, review them through the API; returns the expected annotations per frame and the frames."""
    frames = [board_record(i, calls=2) for i in range(4)]  # calls at 0.9 and 0.7 on defects (queued), 0.1 off them
    with Recorder(url, conf=0.5, classes=DEEPPCB_CLASSES, images=images) as recorder:
        for record in frames:
            recorder.record(record)
    expected: dict[int, list] = {}
    with Store(url, images) as store, TestClient(create_app(store), base_url="http://localhost") as client:
        items = {i["frame"]: i for i in client.get("/api/inspections").json()["items"]}

        def judge(frame: int, score: float, verdict: str, cls: str | None = None) -> None:
            call = next(c for c in items[frame]["calls"] if c["score"] == score)
            body = {"verdict": verdict, "reviewer": "ana", **({"class": cls} if cls else {})}
            assert client.post(f"/api/calls/{call['id']}/verdict", json=body).status_code == 200
            if verdict == "defect":
                expected.setdefault(frame, []).append((cls or call["class"], call["box"]))

        judge(0, 0.9, "defect")  # frame 0: confirmed as called, the other call corrected to "short", a miss drawn
        judge(0, 0.7, "defect", "short")
        box = [2.0, 3.0, 40.0, 33.0]
        assert (
            client.post(f"/api/inspections/{items[0]['id']}/missed", json={"box": box, "class": "spur", "reviewer": "bo"}).status_code
            == 201
        )
        expected[0].append(("spur", box))
        judge(1, 0.9, "false_call")  # frame 1: both calls false: a board without defects
        judge(1, 0.7, "false_call")
        expected[1] = []
        judge(2, 0.9, "defect")  # frame 2: one call skipped: not exported
        judge(2, 0.7, "skip")
        judge(3, 0.9, "defect")  # frame 3: one call still waiting: not exported
    return expected, frames


def test_export_writes_what_reviewers_confirmed(station_db: StationDB, tmp_path: Path) -> None:
    expected, frames = _review(station_db.url, station_db.images)
    out = tmp_path / "export"
    summary = export_review(station_db.url, out, images=station_db.images)
    assert summary["images"] == 2 and summary["skipped"] == {"not fully reviewed": 2}
    coco = json.loads((out / "annotations.json").read_text())
    assert coco["info"]["images_root"] == "." and [c["name"] for c in coco["categories"]][:6] == list(DEEPPCB_CLASSES)
    names = {c["id"]: c["name"] for c in coco["categories"]}
    assert [img["frame"] for img in coco["images"]] == [0, 1]
    for img in coco["images"]:
        frame = frames[img["frame"]]
        assert np.array_equal(cv2.imread(str(out / img["file_name"]), cv2.IMREAD_UNCHANGED), frame.image)
        assert np.array_equal(cv2.imread(str(out / img["reference"]), cv2.IMREAD_UNCHANGED), frame.reference_image)
        assert (img["width"], img["height"]) == (320, 240)
        got = sorted(
            (
                names[a["category_id"]],
                [round(v, 3) for v in (a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3])],
            )
            for a in coco["annotations"]
            if a["image_id"] == img["id"]
        )
        want = sorted((c, [round(v, 3) for v in b]) for c, b in expected[img["frame"]])
        assert got == want
    # the training loader reads it as it is, golden images included
    dataset = CocoDetectionDataset(out / "annotations.json", None, DEEPPCB_CLASSES, 128, on_bad="error", reference=True)
    assert len(dataset) == 2 and sum(dataset.skipped.values()) == 0
    image, target = dataset[0]
    assert image.shape == (2, 128, 128)
    assert sorted(target["labels"].tolist()) == sorted(DEEPPCB_CLASSES.index(c) for c, _ in expected[0])


def test_review_export_cli_and_training_on_it(tmp_path: Path, tiny_config, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    from defect_detector.engine.trainer import fit
    from defect_detector.jobs.validate import TrainingValidation

    db = tmp_path / "station.db"
    _review(str(db), Path(f"{db}.images"))
    out = tmp_path / "export"
    assert main(["review", "export", "--db", str(db), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out / 'annotations.json'}: 2 images, 3 annotations" in printed and "not fully reviewed x2" in printed
    cfg = tiny_config(out / "annotations.json", tmp_path / "runs", imgsz=128, epochs=1, batch_size=2)
    run_dir = fit(cfg, TrainingValidation(), threads=1)
    assert (Path(run_dir) / "weights" / "last.pt").is_file()
    assert main(["review", "export", "--db", str(tmp_path / "missing" / "x.db"), "--out", str(out)]) == 2
    assert "cannot open the station database" in capsys.readouterr().err


def test_nothing_to_export_says_so_in_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "station.db"
    with Recorder(str(db), conf=0.5, classes=DEEPPCB_CLASSES) as recorder:
        for i in range(3):
            recorder.record(board_record(i, calls=2))  # two calls to review per frame
    out = tmp_path / "export"
    assert main(["review", "export", "--db", str(db), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "train on it" not in captured.out and "wrote" not in captured.out
    (line,) = captured.err.strip().splitlines()
    assert "nothing to export, nothing written" in line and "(0 verdicts on 0 frames, 6 calls waiting for review" in line
    assert not (out / "annotations.json").exists()
    with Store(str(db)) as store, TestClient(create_app(store), base_url="http://localhost") as client:
        call = client.get("/api/review/next").json()["call"]  # one call of a frame judged, its other still waiting
        assert client.post(f"/api/calls/{call['id']}/verdict", json={"verdict": "defect", "reviewer": "ana"}).status_code == 200
    assert main(["review", "export", "--db", str(db), "--out", str(out)]) == 2
    line = capsys.readouterr().err.strip()
    assert "(1 verdicts on 1 frames, 5 calls waiting for review; left out: not fully reviewed x1)" in line
    assert not (out / "annotations.json").exists()
