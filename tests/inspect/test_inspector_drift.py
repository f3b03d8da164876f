"""Drift through the inspector with the bundled models: warm-up, blank frames not inspected and alerted at once
(issue 24), the golden-template model read against each frame's golden image, a new golden image logged as a
changeover (issue 27)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from defect_detector.cli.main import main
from defect_detector.data.images import load_image_gray, pixel_fingerprint
from defect_detector.inspect.inspector import Inspector
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def _boards() -> list[np.ndarray]:
    return [load_image_gray(p) for p in sorted((SAMPLES / "deeppcb").glob("*.jpg"))]


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (np.zeros_like, "blank frame: dark"),
        (lambda b: (b * 0.1).astype(np.uint8), "blank frame: dark"),
        (lambda b: np.full_like(b, 255), "blank frame: white"),
    ],
)
def test_a_blank_frame_is_not_inspected_and_alerted_at_once(tmp_path: Path, make, words: str) -> None:
    boards = _boards()
    alerts = tmp_path / "alerts.jsonl"
    with Inspector.load(device="cpu", threads=1, alerts=alerts) as inspector:
        clean = [inspector.inspect(boards[i % len(boards)], name=f"{i}.jpg") for i in range(20)]
        blank = inspector.inspect(make(boards[0]), name="20.jpg")
        again = inspector.inspect(make(boards[1]), name="21.jpg")
    assert clean[0].drift == "warming_up" and clean[-1].drift == "normal"  # not "normal" before it can judge
    assert not any(r.events for r in clean)
    assert blank.verdict == "not_inspected" and blank.reason.startswith(words) and blank.detections is None
    assert [(e.event, e.severity, e.cause, e.since) for e in blank.events] == [("drift", "critical", "blank", 20)]
    assert blank.drift == "critical" and again.verdict == "not_inspected" and again.events == ()  # held, not repeated
    lines = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert [(e["event"], e["frame"], e["cause"]) for e in lines] == [("drift", 20, "blank")]


def test_the_golden_template_model_reads_each_frame_against_its_golden_image(tmp_path: Path) -> None:
    boards = sorted((SAMPLES / "deeppcb").glob("*.jpg"))
    pairs = [(load_image_gray(b), load_image_gray(SAMPLES / "golden" / b.name)) for b in boards]
    order = [(t // 2) % 4 for t in range(20)] + [4 + (t // 2) % 4 for t in range(8)]  # two frames per golden image
    alerts = tmp_path / "alerts.jsonl"
    with Inspector.load(DEFAULT_REFERENCE_WEIGHTS, reference=SAMPLES / "golden", device="cpu", threads=1, alerts=alerts) as inspector:
        assert inspector.monitoring and inspector.router.relative
        results = [inspector.inspect(pairs[k][0], name=f"{t}.jpg", reference=pairs[k][1]) for t, k in enumerate(order)]
        cached = sum(d.drift is not None for d in inspector.designs._designs.values())
    assert cached == 8  # one more pipeline call per golden image, not per frame
    assert all(r.verdict != "not_inspected" for r in results) and results[0].drift == "warming_up"
    events = [e for r in results for e in r.events]
    assert [(e.event, e.frame) for e in events] == [("changeover", t) for t in range(2, len(order), 2)]  # never an alarm
    assert results[-1].drift == "normal"
    lines = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert lines[-1] == {
        "event": "changeover",
        "frame": len(order) - 2,
        "source": "api",
        "time": lines[-1]["time"],
        "reference": pixel_fingerprint(pairs[order[-1]][1]),
        "previous": pixel_fingerprint(pairs[order[-3]][1]),
        "reason": lines[-1]["reason"],
    }


def test_predict_with_golden_images_logs_a_changeover_per_new_golden_image(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    alerts = tmp_path / "alerts.jsonl"
    with caplog.at_level("INFO", logger="defect_detector.monitor"):
        code = main(
            ["predict", str(SAMPLES / "deeppcb"), "--reference", str(SAMPLES / "golden"), "--device", "cpu", "--alerts", str(alerts)]
        )
    assert code == 0
    lines = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert [e["event"] for e in lines] == ["changeover"] * 7  # 8 boards, each with its own golden image
    assert lines[0]["previous"] == "50600000_test.jpg" and lines[0]["reference"] == "50600017_test.jpg"
    assert any(r.getMessage().startswith("changeover at frame 1 of ") for r in caplog.records)


def test_boards_of_one_design_make_no_changeover_whatever_the_golden_file_names(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issues 33 and 35: 39 changeover lines for 40 boards of one design. A changeover fires on new golden pixels only:
    four copies of one golden image under four names make none; the second design makes exactly one."""
    boards = sorted((SAMPLES / "deeppcb").glob("*.jpg"))[:2]
    frames, golden = tmp_path / "frames", tmp_path / "golden"
    frames.mkdir()
    golden.mkdir()
    for i in range(6):
        board = boards[0] if i < 4 else boards[1]
        shutil.copyfile(board, frames / f"{i}.jpg")
        shutil.copyfile(SAMPLES / "golden" / board.name, golden / f"{i}.jpg")  # one file per frame, copies of one design
    alerts = tmp_path / "alerts.jsonl"
    with caplog.at_level("INFO", logger="defect_detector.monitor"):
        code = main(["predict", str(frames), "--reference", str(golden), "--device", "cpu", "--alerts", str(alerts)])
    assert code == 0
    lines = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert [(e["event"], e["frame"], e["previous"], e["reference"]) for e in lines] == [("changeover", 4, "3.jpg", "4.jpg")]
    assert len([r for r in caplog.records if r.getMessage().startswith("changeover at frame")]) == 1
