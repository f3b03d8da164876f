"""``calibrate`` through the frame pipeline: a json, a folder of good frames, large frames tiled as predict tiles them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from defect_detector.core.config import Config, ModelConfig
from defect_detector.core.constants import DEFAULT_LAYERS
from defect_detector.data.synth import write_synthetic_dataset
from defect_detector.model.detector import build_model
from defect_detector.monitor.baseline import Baseline

pytestmark = pytest.mark.usefixtures("one_thread")


def test_run_calibrate_writes_a_baseline(tmp_path: Path) -> None:
    from defect_detector.jobs.calibrate import run_calibrate

    ann = write_synthetic_dataset(tmp_path / "data", 5, 128, 128, seed=3)
    cfg = Config()
    ckpt = {"model": build_model(ModelConfig(), 6).state_dict(), "config": cfg.to_dict(), "class_names": list(cfg.data.class_names)}
    torch.save(ckpt, tmp_path / "w.pt")
    out = tmp_path / "out" / "baseline.json"
    baseline = run_calibrate(tmp_path / "w.pt", ann, None, out, imgsz=128, max_images=4, batch=3)
    loaded = Baseline.load(out)
    assert loaded.count == 4 and loaded.imgsz == 128 and loaded.layer_names == list(DEFAULT_LAYERS)
    assert loaded.to_dict() == baseline.to_dict()
    assert loaded.model["weights"].endswith("w.pt")
    with pytest.raises(FileNotFoundError):
        run_calibrate(tmp_path / "missing.pt", ann, None, out)




def test_run_calibrate_shows_each_stage_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 58: ``calibrate`` showed no progress where stderr was not a terminal, and none at all while it read the
    layer statistics; each stage now ends with a whole line at 100%."""
    from defect_detector.jobs.calibrate import run_calibrate

    ann = write_synthetic_dataset(tmp_path / "data", 5, 128, 128, seed=3)
    cfg = Config()
    ckpt = {"model": build_model(ModelConfig(), 6).state_dict(), "config": cfg.to_dict(), "class_names": list(cfg.data.class_names)}
    torch.save(ckpt, tmp_path / "w.pt")
    run_calibrate(tmp_path / "w.pt", ann, None, tmp_path / "baseline.json", imgsz=128, max_images=4, batch=3, fault_frames=2)
    lines = capsys.readouterr().err.splitlines()
    for stage, total in (("calibrate", 4), ("layer statistics", 4)):
        assert any(line.startswith(f"{stage}: 100%") and f"{total}/{total}" in line for line in lines), (stage, lines)
    assert any(line.startswith("simulated faults: 100%") for line in lines)
