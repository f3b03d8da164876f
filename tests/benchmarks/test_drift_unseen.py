"""Smoke test of the unseen-design drift benchmark (benchmarks/drift_unseen.py) on tiny synthetic boards: name-order
streams, designs left out of calibration, faulted segments, both model kinds, golden images paired with themselves
left out of the boards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from design_boards import write_design_json
from small_checkpoint import write_small_checkpoint

from benchmarks.drift_unseen import boards_of, main, name_order
from defect_detector.jobs.calibrate import run_calibrate
from defect_detector.model.checkpoint import attach_baseline

pytestmark = pytest.mark.usefixtures("one_thread")

SIZE = 96


def _json(root: Path, name: str, designs: list[str], per_design: int, seed: int) -> Path:
    return write_design_json(root, name, designs, per_design, seed, SIZE, self_pairs=True)


def test_boards_leave_out_golden_images_paired_with_themselves_and_run_in_name_order(tmp_path: Path) -> None:
    boards = boards_of(_json(tmp_path, "a.json", ["g2/d2", "g1/d1"], 3, 0))
    assert len(boards) == 6 and all(Path(b.image).name.endswith("_test.png") for b in boards)
    assert {b.design for b in boards} == {"g1/d1", "g2/d2"}
    names = [Path(boards[i].image).name for i in name_order(boards)]
    assert names == sorted(names)


def test_drift_unseen_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train = _json(tmp_path / "data", "train.json", ["g1/d1", "g2/d2"], 5, 0)
    val = _json(tmp_path / "data", "val.json", ["g3/d3"], 4, 1000)
    weights = []
    for name, channels in (("single.pt", 1), ("golden.pt", 2)):
        path = write_small_checkpoint(tmp_path / name, imgsz=SIZE, in_channels=channels)
        baseline = run_calibrate(path, train, None, tmp_path / f"{name}.json", max_images=6, progress=False, fault_frames=2)
        attach_baseline(path, baseline.to_dict())
        weights += ["--weights", str(path)]
    out = tmp_path / "unseen.json"
    args = ["--train", str(train), "--val", str(val), "--extra", str(val), "--extra-faults", "--logo", "--onsets", "1"]
    assert main([*args, *weights, "--cache", str(tmp_path / "c"), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "== golden.pt: baseline" in printed and "g1/d1 left out of calibration, then held-out" in printed
    models = json.loads(out.read_text())["models"]
    for result in models.values():
        clean = result["clean"]
        assert clean["all designs, name order"]["frames"] == 14  # 10 + 4 boards, their golden images left out
        assert clean["held-out designs, name order x2"]["frames"] == 8
        assert clean["g2/d2 left out of calibration, then held-out"]["frames"] == 9
        assert all(0 <= r["max_score"] and r["flagged"] <= r["frames"] for r in clean.values())
        assert set(result["faults"]) == {"held-out", "data"} and len(result["faults"]["held-out"]) == 7
        assert all(r["streams"] == 1 and r["alerted"] in (0, 1) for r in result["faults"]["held-out"].values())
    assert list((tmp_path / "c").glob("unseen_*.npz"))  # cached: a second run reads the statistics
    assert main([*args, *weights, "--cache", str(tmp_path / "c"), "--out", str(out), "--quiet"]) == 0
