"""``val`` through the frame pipeline: an exported artifact scores what its checkpoint scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from small_checkpoint import SPREAD, assert_apart, write_small_checkpoint

from defect_detector.cli.main import main
from defect_detector.export import export_torchscript
from defect_detector.jobs.validate import validate
from defect_detector.model.checkpoint import load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


def test_val_scores_an_artifact_as_its_checkpoint(synth_coco: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """v0.8 refused TorchScript ("already an exported TorchScript model"), so it never scored what is deployed. The calls
    are compared in order: the model's scores are far from ties (``small_checkpoint.SPREAD``)."""
    checkpoint = write_small_checkpoint(tmp_path / "small.pt", 128, -9.0, spread=SPREAD)  # 15-26 calls a board at conf 0.001
    artifact = tmp_path / "small.torchscript.pt"
    export_torchscript(load_checkpoint(checkpoint), artifact, optimize=False)
    eager, exported = validate(checkpoint, synth_coco, progress=False), validate(artifact, synth_coco, progress=False)
    assert exported.runtime.kind == "torchscript" and eager.runtime.kind == "checkpoint"
    assert sum(len(p["scores"]) for p in exported.predictions.values()) > 0
    for image_id, want in eager.predictions.items():
        got = exported.predictions[image_id]
        assert len(got["scores"]) == len(want["scores"])
        assert_apart(want["scores"])
        assert got["labels"].tolist() == want["labels"].tolist()
        torch.testing.assert_close(got["boxes"], want["boxes"], atol=1e-2, rtol=0)
    assert abs(exported.metrics["map50"] - eager.metrics["map50"]) <= 0.002
    assert main(["val", "--weights", str(artifact), "--data", str(synth_coco)]) == 0
    assert "small.torchscript.pt (torchscript: exported artifact)" in capsys.readouterr().out
    assert main(["val", "--weights", str(artifact), "--data", str(synth_coco), "--imgsz", "256"]) == 2
    assert "fixed input size" in capsys.readouterr().err


def test_val_gallery_writes_the_pages_and_crops_that_hold_their_boxes(
    synth_coco: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = write_small_checkpoint(tmp_path / "small.pt", 128, cls_bias=1.0)
    folder = tmp_path / "gallery"
    assert main(["val", "--weights", str(checkpoint), "--data", str(synth_coco), "--gallery", str(folder), "--gallery-n", "3"]) == 0
    assert f"wrote the error gallery to {folder}/index.html" in capsys.readouterr().out
    entries = json.loads((folder / "gallery.json").read_text())
    assert 1 <= len(entries["miss"]) <= 3 and 1 <= len(entries["false_call"]) <= 3
    page = (folder / "index.html").read_text()
    for entry in entries["miss"] + entries["false_call"]:
        x0, y0, x1, y1 = entry["crop"]
        bx0, by0, bx1, by1 = entry["box"]
        assert x0 <= bx0 and y0 <= by0 and bx1 <= x1 + 1 and by1 <= y1 + 1  # the crop holds the box it names
        assert (folder / entry["path"]).is_file() and entry["path"] in page
    assert (folder / "misses.png").is_file() and (folder / "false_calls.png").is_file()
    assert main(["val", "--weights", str(checkpoint), "--data", str(synth_coco), "--gallery", str(folder), "--gallery-n", "0"]) == 2
    assert "--gallery-n must be >= 1" in capsys.readouterr().err


def test_the_cross_class_setting_travels_with_the_weights_into_the_pipeline(synth_coco: Path, tmp_path: Path) -> None:
    """``eval.cross_class_iou`` is part of the operating point: checkpoint, exported artifact and val apply it."""
    plain = write_small_checkpoint(tmp_path / "plain.pt", 128, cls_bias=1.0)
    ckpt = torch.load(plain, weights_only=True)
    ckpt["config"]["eval"].update({"cross_class_iou": 0.3, "cross_class_factor": 0.5})
    demoting = tmp_path / "demoting.pt"
    torch.save(ckpt, demoting)
    artifact = tmp_path / "demoting.torchscript.pt"
    export_torchscript(load_checkpoint(demoting), artifact, optimize=False)
    base = validate(plain, synth_coco, progress=False)
    for weights in (demoting, artifact):
        result = validate(weights, synth_coco, progress=False)
        point = result.runtime.operating_point
        assert (point["cross_class_iou"], point["cross_class_factor"]) == (0.3, 0.5)
        demoted = 0
        for image_id, want in base.predictions.items():
            got = result.predictions[image_id]
            assert len(got["scores"]) == len(want["scores"])  # demoted, not removed
            assert torch.all(got["scores"] <= want["scores"].max() + 1e-6)
            demoted += int(got["scores"].sum() < want["scores"].sum() - 1e-4)
        assert demoted > 0


def test_val_shows_its_progress_on_stderr(synth_coco: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 58: ``val`` ran 11 minutes silent where stderr was not a terminal; now its bar is whole lines there."""
    checkpoint = write_small_checkpoint(tmp_path / "small.pt", 128, -9.0, spread=SPREAD)
    assert main(["val", "--weights", str(checkpoint), "--data", str(synth_coco)]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert any(line.startswith("val:   0%") and "0/4" in line for line in lines)
    assert any(line.startswith("val: 100%") and "4/4" in line for line in lines)
