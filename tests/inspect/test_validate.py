"""``val`` through the frame pipeline: an exported artifact scores what its checkpoint scores."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from small_checkpoint import write_small_checkpoint

from defect_detector.cli.main import main
from defect_detector.export import export_torchscript
from defect_detector.inspect.validate import validate
from defect_detector.model.checkpoint import load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


def test_val_scores_an_artifact_as_its_checkpoint(synth_coco: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """v0.8 refused TorchScript ("already an exported TorchScript model"), so it never scored what is deployed."""
    checkpoint = write_small_checkpoint(tmp_path / "small.pt", 128, cls_bias=1.0)
    artifact = tmp_path / "small.torchscript.pt"
    export_torchscript(load_checkpoint(checkpoint), artifact, optimize=False)
    eager, exported = validate(checkpoint, synth_coco, progress=False), validate(artifact, synth_coco, progress=False)
    assert exported.runtime.kind == "torchscript" and eager.runtime.kind == "checkpoint"
    assert sum(len(p["scores"]) for p in exported.predictions.values()) > 0
    for image_id, want in eager.predictions.items():
        got = exported.predictions[image_id]
        assert len(got["scores"]) == len(want["scores"])
        torch.testing.assert_close(got["boxes"], want["boxes"], atol=1e-2, rtol=0)
    assert abs(exported.metrics["map50"] - eager.metrics["map50"]) <= 0.002
    assert main(["val", "--weights", str(artifact), "--data", str(synth_coco)]) == 0
    assert "small.torchscript.pt (torchscript: exported artifact)" in capsys.readouterr().out
    assert main(["val", "--weights", str(artifact), "--data", str(synth_coco), "--imgsz", "256"]) == 2
    assert "fixed input size" in capsys.readouterr().err
