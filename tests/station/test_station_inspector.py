"""The inspector records through the station: ``Inspector.load(..., db=URL)`` and ``predict --db URL`` put every frame
(its calls, the golden image it was registered against) into the database; the shift boundaries of the report."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import cv2
import numpy as np
import pytest
from small_checkpoint import write_small_checkpoint
from sqlalchemy import func, select

from defect_detector.cli.main import main
from defect_detector.data.images import pixel_fingerprint
from defect_detector.data.synth import generate_board_pair
from defect_detector.inspect.design_check import NO_NOTE, DesignNote
from defect_detector.inspect.inspector import Inspector
from defect_detector.inspect.options import InspectOptions
from defect_detector.station.queries import counts_since
from defect_detector.station.report import parse_shifts, shift_start, shift_windows
from defect_detector.station.schema import calls, inspections
from defect_detector.station.store import Store

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def boards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("boards")
    (folder / "frames").mkdir()
    (folder / "golden").mkdir()
    for i in range(3):
        image, template, _, _ = generate_board_pair(192, 256, np.random.default_rng(i), (2, 3))
        assert cv2.imwrite(str(folder / "frames" / f"b{i}.png"), image)
        assert cv2.imwrite(str(folder / "golden" / f"b{i}.png"), template)
    (folder / "frames" / "broken.png").write_bytes(b"not an image")
    image, _, _, _ = generate_board_pair(192, 256, np.random.default_rng(9), (2, 3))
    assert cv2.imwrite(str(folder / "frames" / "c_no_golden.png"), image)  # readable, but no golden image: not inspected
    return folder


def test_inspector_records_frames_and_their_golden_images(boards: Path, tmp_path: Path) -> None:
    weights = write_small_checkpoint(tmp_path / "ref.pt", 128, in_channels=2)
    db = tmp_path / "line.db"
    with Inspector.load(weights, reference=boards / "golden", device="cpu", threads=1, conf=0.25, db=str(db)) as inspector:
        summary = inspector.run(str(boards / "frames"))
        assert inspector.recorder is not None
    assert inspector.recorder is None and summary["frames"] == 5
    with Store(str(db)) as store, store.engine.connect() as conn:
        rows = conn.execute(select(inspections).order_by(inspections.c.name)).all()
        n_calls = conn.execute(select(func.count()).select_from(calls)).scalar()
        centres = conn.execute(select(calls.c.x1, calls.c.y1, calls.c.x2, calls.c.y2, calls.c.golden_x, calls.c.golden_y)).all()
        counts = counts_since(conn, datetime(2000, 1, 1))
    assert [r.name for r in rows] == ["b0.png", "b1.png", "b2.png", "broken.png", "c_no_golden.png"]
    assert [r.verdict for r in rows] == ["fail", "fail", "fail", "not_inspected", "not_inspected"]
    assert rows[3].reason and rows[3].image is None and rows[3].reference is None and rows[3].reason_kind == "unreadable"
    refused = rows[4]  # every frame counts: its reason, its kind and its picture are kept
    assert refused.reason_kind == "no reference" and "no golden image" in refused.reason and refused.image is not None
    assert cv2.imread(str(store.images / refused.image), cv2.IMREAD_UNCHANGED).shape == (192, 256)
    assert (counts["frames"], counts["boards"], counts["not_inspected"]) == (5, 3, 2)
    assert counts["reasons"] == {"unreadable": 1, "no reference": 1} == summary["not_inspected"]
    assert n_calls == summary["detections"] > 0
    # each call's box centre in its golden image's pixels (the boards lie where their golden images do: the same place)
    assert all(abs(gx - (x1 + x2) / 2) < 0.5 and abs(gy - (y1 + y2) / 2) < 0.5 for x1, y1, x2, y2, gx, gy in centres)
    for r in rows[:3]:
        assert r.model == "ref.pt" and r.reference == r.name and r.queued and (r.width, r.height) == (256, 192)
        golden = cv2.imread(str(store.images / r.reference_image), cv2.IMREAD_UNCHANGED)
        assert golden.shape == (192, 256) and golden.dtype == np.uint8  # registered into the frame's pixels
        template = cv2.imread(str(boards / "golden" / r.name), cv2.IMREAD_GRAYSCALE)
        assert r.golden_key == pixel_fingerprint(template)  # the design, by its pixels (issue 35)
        assert r.reg_score > 0.5 and r.reg_shift is not None and r.reg_angle is not None and 0 <= r.reg_difference < 0.5
    assert all(r.golden_key is None and r.reg_score is None for r in rows[3:])  # no golden image registered


def test_predict_db_flag(boards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weights = write_small_checkpoint(tmp_path / "small.pt", 128)
    db = tmp_path / "predict.db"
    argv = ["predict", str(boards / "frames" / "b0.png"), "--weights", str(weights), "--db", str(db), "--threads", "1", "--device", "cpu"]
    assert main(argv) == 0
    assert f"station database: {db}" in capsys.readouterr().out
    with Store(str(db)) as store, store.engine.connect() as conn:
        assert conn.execute(select(inspections.c.name)).scalars().all() == ["b0.png"]
    assert main([*argv[:4], "--db", "mysql://x/y", *argv[6:]]) == 2
    assert "unsupported database" in capsys.readouterr().err


@pytest.fixture
def utc_zone(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_shifts(utc_zone: None) -> None:
    at = datetime(2025, 3, 10, 5, 30, tzinfo=timezone.utc)
    assert shift_start(at) == datetime(2025, 3, 9, 22, tzinfo=timezone.utc)  # the night shift began yesterday
    assert shift_start(at.replace(hour=14)) == datetime(2025, 3, 10, 14, tzinfo=timezone.utc)
    windows = shift_windows(datetime(2025, 3, 10, 7, tzinfo=timezone.utc), datetime(2025, 3, 11, 1, tzinfo=timezone.utc))
    assert [(s.hour, e.hour) for s, e in windows] == [(6, 14), (14, 22), (22, 6)]
    assert parse_shifts("22, 6,14") == (6, 14, 22)
    with pytest.raises(ValueError, match="at most"):
        shift_windows(datetime(2024, 1, 1, tzinfo=timezone.utc), datetime(2025, 1, 1, tzinfo=timezone.utc))
    for bad in ("", "6,25", "day"):
        with pytest.raises(ValueError, match="--shifts"):
            parse_shifts(bad)
    assert os.environ["TZ"] == "UTC"


def test_a_frame_with_glare_over_a_defect_is_shown_at_the_station_as_hidden_area(tmp_path: Path) -> None:
    """Issue 42 item 3: a glare spot over a defect is ``not_inspected`` (kind ``hidden area``), and the station keeps
    its reason (what covers the board and where), its kind for the counts and its picture."""
    from benchmarks.hidden_roc import faulted

    samples = Path(__file__).resolve().parents[2] / "data" / "samples"
    board = cv2.imread(str(samples / "deeppcb" / "92000000_test.jpg"), cv2.IMREAD_GRAYSCALE)
    golden = samples / "golden" / "92000000_test.jpg"
    glared = faulted(board, "glare", 0.04, (320.0, 320.0), np.random.default_rng(0))
    db = tmp_path / "line.db"
    with Inspector.load(reference=golden, device="cpu", threads=1, monitor=False, db=str(db)) as inspector:
        record = inspector.inspect(glared, name="glare.png")
    with Store(str(db)) as store, store.engine.connect() as conn:
        row = conn.execute(select(inspections)).one()
        assert cv2.imread(str(store.images / row.image), cv2.IMREAD_UNCHANGED).shape == board.shape
    assert record.verdict == row.verdict == "not_inspected" and row.reason_kind == "hidden area"
    assert row.reason == record.reason and " of the board at x " in row.reason


class _UntaughtB1:
    """A design check that notes golden image ``b1.png`` as an untaught look (the others as known)."""

    def note(self, design: object, file_name: str) -> DesignNote:
        return DesignNote(warning="this design looks unlike the model's training images") if file_name == "b1.png" else NO_NOTE


def test_the_station_and_the_json_agree_on_every_frames_verdict(boards: Path, tmp_path: Path) -> None:
    """Issue 43: the station records the verdict the frame record computed (one rule): ``pass_suspect`` included, never
    decided again from a score threshold."""
    weights = write_small_checkpoint(tmp_path / "ref.pt", 128, in_channels=2)
    db, out = tmp_path / "line.db", tmp_path / "det.json"
    with Inspector.load(weights, reference=boards / "golden", device="cpu", threads=1, conf=0.99, db=str(db)) as inspector:
        inspector.prepare.design_check = _UntaughtB1()
        inspector.run(str(boards / "frames"), save_json=str(out))
    recorded = json.loads(out.read_text())
    with Store(str(db)) as store, store.engine.connect() as conn:
        stored = {r.name: (r.verdict, r.reason) for r in conn.execute(select(inspections))}
    assert {r["file_name"]: (r["verdict"], r["reason"]) for r in recorded} == stored
    assert {v for v, _ in stored.values()} == {"pass", "pass_suspect", "not_inspected"}
    assert stored["b1.png"][0] == "pass_suspect" and stored["b1.png"][1].startswith("untaught look")


class _RoutedTo:
    """A design check that routes every design to other bundled weights (``DesignNote.covering``)."""

    def __init__(self, weights: Path) -> None:
        self.weights = weights

    def note(self, design: object, file_name: str) -> DesignNote:
        return DesignNote(covering=self.weights)


def _with_operating_point(weights: Path, conf: float) -> Path:
    """``weights`` rewritten with ``eval.f1_conf`` (its operating point) at ``conf``."""
    import torch

    checkpoint = torch.load(weights, weights_only=True)
    checkpoint["config"]["eval"]["f1_conf"] = conf
    torch.save(checkpoint, weights)
    return weights


def test_a_call_between_the_routed_models_point_and_the_global_conf_is_queued_for_review(boards: Path, tmp_path: Path) -> None:
    """Issue 56 item 6: a frame routed to other weights is decided at their own operating point (0.25), but the station
    queued its calls at the first inspector's (0.5): the frame failed and none of its calls reached the review queue.
    The record now carries the threshold that decided it, and every consumer reads that one."""
    first = _with_operating_point(write_small_checkpoint(tmp_path / "first.pt", 128, in_channels=2), 0.5)
    routed = write_small_checkpoint(tmp_path / "routed.pt", 128, in_channels=2)  # its calls score about 0.27
    db = tmp_path / "line.db"
    board = cv2.imread(str(boards / "frames" / "b0.png"), cv2.IMREAD_GRAYSCALE)
    with Inspector.load(first, reference=boards / "golden", device="cpu", threads=1, db=str(db)) as inspector:
        assert inspector.pipeline.conf == 0.5
        inspector.options = InspectOptions(reference=boards / "golden", device="cpu", threads=1, monitor=False)
        inspector.prepare.design_check = _RoutedTo(routed)
        record = inspector.inspect(board, name="b0.png")
    scores = record.detections.scores.tolist()
    assert record.weights == "routed.pt" and record.verdict == "fail" and record.conf == 0.25 == record.to_json()["conf"]
    assert scores and all(0.25 <= s < 0.5 for s in scores)  # every call lies between the routed point and the global conf
    with Store(str(db)) as store, store.engine.connect() as conn:
        row = conn.execute(select(inspections)).one()
        queued = conn.execute(select(func.count()).select_from(calls).where(calls.c.pending.is_(True))).scalar()
    assert row.verdict == "fail" and row.queued and row.conf == 0.25 and queued == len(scores)
