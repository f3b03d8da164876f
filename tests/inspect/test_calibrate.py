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
    from defect_detector.inspect.calibrate import run_calibrate

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


