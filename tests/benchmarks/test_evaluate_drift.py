"""Smoke test of the drift benchmark (benchmarks/evaluate_drift.py) on tiny inputs: multi-design streams, both model
kinds, composed large frames, the targets table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from design_boards import write_design_json
from small_checkpoint import write_small_checkpoint

from benchmarks.drift_streams import BOARDS_PER_LARGE, Board, compose, design_changes, design_stream, large_frames
from benchmarks.evaluate_drift import main

pytestmark = pytest.mark.usefixtures("one_thread")

SIZE = 96


def _json(root: Path, name: str, designs: list[str], per_design: int, seed: int) -> Path:
    return write_design_json(root, name, designs, per_design, seed, SIZE, self_pairs=False)


def test_design_streams_run_design_by_design() -> None:
    boards = [Board(f"{d}/{k}.png", None, d) for d in "abc" for k in range(5)]
    stream = design_stream(boards, 200, seed=3, runs=(10, 60))
    runs = np.split(np.array([boards[i].design for i in stream]), design_changes(boards, stream))
    assert all(10 <= len(r) <= 60 for r in runs[:-1]) and len(set(r[0] for r in runs)) == 3  # every design, in runs
    assert all(a[0] != b[0] for a, b in zip(runs, runs[1:]))  # a change of design at each run boundary
    frames = large_frames(boards, 4, seed=1)
    assert len(frames) == 4 and all(len(f) == BOARDS_PER_LARGE for f in frames)
    large = compose([np.full((2, 3), 9, np.uint8)] * 6, size=(8, 12))
    assert large.shape == (8, 12) and int(large.sum()) == 9 * 36


def test_evaluate_drift_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train = _json(tmp_path / "data", "train.json", ["g1/d1", "g2/d2"], 6, 0)
    val = _json(tmp_path / "data", "val.json", ["g3/d3"], 4, 1000)
    single = write_small_checkpoint(tmp_path / "single.pt", imgsz=SIZE)
    golden = write_small_checkpoint(tmp_path / "golden.pt", imgsz=SIZE, in_channels=2)
    out = tmp_path / "eval.json"
    args = ["--train", str(train), "--val", str(val), "--calibration", "4", "--frames", "80", "--onsets", "1"]
    args += ["--large-frames", "2", "--large-size", "320x224", "--cost-repeats", "2", "--calibrate", "--cache", str(tmp_path / "c")]
    assert main([*args, "--weights", str(single), "--weights", str(golden), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "== single.pt" in printed and "== golden.pt: baseline relative to the golden image" in printed
    assert "clean 320x224, tiled: " in printed and "alerted median" in printed
    result = json.loads(out.read_text())["models"]
    for model in result.values():
        assert model["clean"]["frames"] == 80 and model["large"]["frames"] == 300 and model["large"]["distinct"] == 2
        faults = model["faults"]
        assert set(faults) == {
            "defocus",
            "contrast_loss",
            "lighting_drop",
            "salt_and_pepper",
            "defocus_mild",
            "contrast_loss_mild",
            "lighting_drop_mild",
        }
        assert all(len(r["frames_to_alert"]) == 1 for r in faults.values())
        assert model["cost"]["frame_ms"] > 0
    assert result[str(golden)]["clean"]["changeovers"] > 0 and result[str(single)]["clean"]["changeovers"] == 0
    assert list((tmp_path / "c").glob("*.npz"))  # the statistics are cached: a second run reads them
    assert main([*args, "--weights", str(single), "--out", str(out), "--quiet", "--cost-repeats", "0"]) == 0
