"""Issue 35: training-time validation goes through the frame pipeline's prepare stage, so ``val`` reproduces what chose
``best.pt``: the same calls on every image, hence the same mAP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from defect_detector.core.config import Config
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.engine.trainer import fit
from defect_detector.inspect.validate import TrainingValidation, validate

pytestmark = pytest.mark.usefixtures("one_thread")


def test_val_reproduces_the_calls_and_the_mAP_of_training_time_validation(synth_coco: Path, tmp_path: Path, tiny_config) -> None:
    seen: list[dict] = []
    pipeline_validation = TrainingValidation()

    def recording(model: torch.nn.Module, cfg: Config, dataset: CocoDetectionDataset) -> dict:
        seen.append(pipeline_validation(model, cfg, dataset))
        return seen[-1]

    run = fit(tiny_config(synth_coco, tmp_path, epochs=1), progress=False, threads=1, validator=recording)
    recorded = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert len(seen) == 1 and len(seen[0]) == 4  # the one validation went through the frame pipeline, every image
    measured = validate(run / "weights" / "last.pt", synth_coco, progress=False)
    assert set(measured.predictions) == set(seen[0])
    for image_id, ours in seen[0].items():
        theirs = measured.predictions[image_id]
        assert len(ours["scores"]) == len(theirs["scores"]) > 0
        assert torch.allclose(_rows(ours), _rows(theirs), atol=1e-2)  # as sets: an untrained model's ties come in any order
    assert measured.metrics["map50_95"] == pytest.approx(recorded["map50_95"], abs=1e-6)


def _rows(prediction: dict) -> torch.Tensor:
    """``[K, 6]`` (score, label, box) rows of a prediction, sorted, scores and boxes rounded."""
    scores, labels = prediction["scores"][:, None].round(decimals=3), prediction["labels"][:, None].float()
    rows = torch.cat([scores, labels, prediction["boxes"].round()], 1)
    for column in reversed(range(rows.shape[1])):
        rows = rows[rows[:, column].argsort(stable=True)]
    return rows
