"""Fine-tuning from given weights, capped runs, and the drift baseline a finished run carries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from small_checkpoint import SMALL_MODEL, write_small_checkpoint

from defect_detector.cli.main import main
from defect_detector.model.checkpoint import load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


def _yaml(path: Path, ann: Path, out: Path, model: dict | None = None, **train: object) -> Path:
    raw = {
        "name": "ft",
        "out_dir": str(out),
        "data": {"train": str(ann), "val": str(ann), "imgsz": 128, "workers": 0},
        "augment": {"hflip": 0.0, "vflip": 0.0, "rotate_p": 0.0, "affine_p": 0.0, "photometric_p": 0.0, "blur_p": 0.0},
        "train": {"epochs": 1, "batch_size": 2, "device": "cpu", "warmup_epochs": 0.0, **train},
    }
    if model is not None:
        raw["model"] = model
    path.write_text(yaml.safe_dump(raw))
    return path


def test_fine_tuning_adopts_the_architecture_of_its_weights(synth_coco: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """v0.8 built default.yaml's architecture and loaded 87 of 276 tensors of the bundled model, with one INFO line."""
    init = write_small_checkpoint(tmp_path / "init.pt", 128)
    cfg = _yaml(tmp_path / "line1.yaml", synth_coco, tmp_path / "runs", init_weights=str(init))
    assert main(["train", "--config", str(cfg), "--no-baseline"]) == 0
    capsys.readouterr()
    trained = load_checkpoint(tmp_path / "runs" / "ft" / "weights" / "best.pt")
    assert list(trained.config.model.widths) == SMALL_MODEL["widths"] and trained.baseline is None
    other = {"widths": [8, 16, 24, 32], "depths": [1, 1, 1, 1], "neck_channels": 16, "head_convs": 1}
    named = _yaml(tmp_path / "other.yaml", synth_coco, tmp_path / "runs2", model=other, init_weights=str(init))
    assert main(["train", "--config", str(named), "--no-baseline"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("defect-detector train: error: train.init_weights=") and "drop the model section" in last


def test_a_run_stops_at_max_minutes_and_trains_on_max_images(synth_coco: Path, tmp_path: Path) -> None:
    cfg = _yaml(tmp_path / "capped.yaml", synth_coco, tmp_path / "runs", model=SMALL_MODEL, epochs=3, max_minutes=1e-4)
    assert main(["train", "--config", str(cfg), "--no-baseline", "data.max_images=2"]) == 0
    run = tmp_path / "runs" / "ft"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 1  # stopped after the first epoch: the time cap had passed
    assert load_checkpoint(run / "weights" / "last.pt").config.data.max_images == 2


def test_a_finished_run_carries_its_drift_baseline(synth_coco: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = _yaml(tmp_path / "run.yaml", synth_coco, tmp_path / "runs", model=SMALL_MODEL)
    assert main(["train", "--config", str(cfg)]) == 0, capsys.readouterr().err
    assert "drift baseline: 4 training images" in capsys.readouterr().out
    run = tmp_path / "runs" / "ft"
    for name in ("best.pt", "last.pt"):
        baseline = load_checkpoint(run / "weights" / name).baseline
        assert baseline is not None and baseline["count"] == 4 and baseline["faults"] is not None
    assert "optimizer" in torch.load(run / "weights" / "last.pt", weights_only=True)  # last.pt still resumes
    assert (run / "baseline.json").is_file()
