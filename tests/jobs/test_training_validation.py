"""Issue 35: training-time validation goes through the frame pipeline's prepare stage, so ``val`` reproduces what chose
``best.pt``: the same calls on every image, hence the same mAP."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from small_checkpoint import SPREAD, assert_apart, write_small_checkpoint

from defect_detector.core.config import Config
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.engine.trainer import fit
from defect_detector.jobs.validate import TrainingValidation, validate

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("siamese", [False, True], ids=["single_image", "siamese"])
def test_val_reproduces_the_calls_and_the_mAP_of_training_time_validation(
    synth_coco: Path, tmp_path: Path, tiny_config, siamese: bool
) -> None:
    """Both model kinds; the siamese one is validated in the golden view, its golden features cached, as ``val`` runs it.
    The run starts from weights whose scores are far from ties (``small_checkpoint.SPREAD``; untrained, they tie within
    1e-7): COCOeval ranks each class's calls over all images by score, tied ones in input order, so the mAP of tied
    calls depends on the order they come in. At ``cls_bias`` -10 the 4 boards get 6 to 30 calls each above ``eval.conf``
    (none cut by ``max_det``), each class's at least 1.6e-4 apart in logit (measured)."""
    data = _with_references(synth_coco, tmp_path) if siamese else synth_coco
    kind = {"in_channels": 2, "model": {"fusion": "siamese"}} if siamese else {}
    init = write_small_checkpoint(tmp_path / "init.pt", 256, -10.0, spread=SPREAD, **kind)  # the tiny model, few calls
    frozen = ("backbone", "neck", "head.cls_branches")  # the epoch trains the box branches: the scores stay apart
    cfg = tiny_config(data, tmp_path, epochs=1, init_weights=str(init), freeze=frozen)
    if siamese:
        cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"in_channels": 2, "fusion": "siamese"})})
    seen: list[dict] = []
    pipeline_validation = TrainingValidation()

    def recording(model: torch.nn.Module, cfg: Config, dataset: CocoDetectionDataset) -> dict:
        seen.append(pipeline_validation(model, cfg, dataset))
        return seen[-1]

    run = fit(cfg, recording, progress=False, threads=1)
    recorded = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert len(seen) == 2 and all(len(s) == 4 for s in seen)  # the start's and the epoch's validation: the pipeline's, every image
    measured = validate(run / "weights" / "last.pt", data, progress=False)
    assert measured.runtime.caches_golden is siamese
    assert set(measured.predictions) == set(seen[-1])
    for label in range(len(cfg.data.class_names)):  # COCOeval ranks each class's calls over all images by score
        assert_apart(torch.cat([o["scores"][o["labels"] == label] for o in seen[-1].values()]))
    for image_id, ours in seen[-1].items():
        theirs = measured.predictions[image_id]
        assert len(ours["scores"]) == len(theirs["scores"]) > 0
        assert torch.allclose(ours["scores"].sort().values, theirs["scores"].sort().values, atol=1e-4)
        assert _unmatched(ours, theirs) == []
    assert measured.metrics["map50_95"] == pytest.approx(recorded["map50_95"], abs=1e-6)


def _unmatched(ours: dict, theirs: dict) -> list[int]:
    """Indices of ``ours``'s calls that no call of ``theirs`` repeats (same label, score within 1e-4, box within 0.5 px),
    leaving out calls tied with the lowest kept score: which of a tie at the cut survives ``max_det`` is arbitrary."""
    cut = float(torch.cat([ours["scores"], theirs["scores"]]).min()) + 1e-3
    same = (
        (ours["labels"][:, None] == theirs["labels"][None])
        & ((ours["scores"][:, None] - theirs["scores"][None]).abs() <= 1e-4)
        & ((ours["boxes"][:, None] - theirs["boxes"][None]).abs().amax(-1) <= 0.5)
    )
    return [i for i in range(len(ours["scores"])) if ours["scores"][i] > cut and not bool(same[i].any())]


def _with_references(ann: Path, tmp_path: Path) -> Path:
    """A copy of the COCO json ``ann`` whose every image has a golden image (``reference``): itself moved by 1.5 and 0.5
    px, so that registering it takes interpolation, which the golden view and the frame view put on different images."""
    raw = json.loads(ann.read_text())
    root = (ann.parent / raw["info"].get("images_root", ".")).resolve()
    raw["info"]["images_root"] = str(tmp_path)
    for image in raw["images"]:
        board = cv2.imread(str(root / image["file_name"]), cv2.IMREAD_GRAYSCALE)
        shape = (board.shape[1], board.shape[0])
        golden = cv2.warpAffine(board, np.float64([[1, 0, 1.5], [0, 1, 0.5]]), shape, borderMode=cv2.BORDER_REPLICATE)
        name = Path(image["file_name"]).name
        assert cv2.imwrite(str(tmp_path / name), board) and cv2.imwrite(str(tmp_path / f"golden_{name}"), golden)
        image["file_name"], image["reference"] = name, f"golden_{name}"
    out = tmp_path / "with_references.json"
    out.write_text(json.dumps(raw))
    return out
