import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from pycocotools.coco import COCO
from small_checkpoint import write_small_checkpoint

from defect_detector.cli import main
from defect_detector.data.synth import write_synthetic_dataset
from defect_detector.engine.evaluate import (
    coco_map,
    confusion_matrix,
    deeppcb_f1,
    evaluate_predictions,
    ground_truth,
    image_groups,
    per_group_map,
    to_coco_results,
)

NAMES = ("open", "short")
LABEL_TO_CAT = {0: 1, 1: 2}
CAT_TO_LABEL = {1: 0, 2: 1}


def _coco(file_names: tuple[str, str]) -> COCO:
    data = {
        "images": [
            {"id": 1, "file_name": file_names[0], "width": 100, "height": 100},
            {"id": 2, "file_name": file_names[1], "width": 100, "height": 100},
        ],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20], "area": 400, "iscrowd": 0},
            {"id": 2, "image_id": 1, "category_id": 2, "bbox": [50, 50, 30, 30], "area": 900, "iscrowd": 0},
            {"id": 3, "image_id": 2, "category_id": 1, "bbox": [0, 0, 40, 40], "area": 1600, "iscrowd": 0},
        ],
        "categories": [{"id": 1, "name": "open"}, {"id": 2, "name": "short"}],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        c = COCO()
        c.dataset = data
        c.createIndex()
    return c


@pytest.fixture
def coco() -> COCO:
    return _coco(("a.png", "b.png"))


def _pred(boxes: list[list[float]], scores: list[float], labels: list[int]) -> dict[str, torch.Tensor]:
    return {
        "boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
        "scores": torch.tensor(scores),
        "labels": torch.tensor(labels),
    }


def test_ground_truth_is_xyxy(coco: COCO) -> None:
    gt = ground_truth(coco, 1, CAT_TO_LABEL)
    assert gt["boxes"].tolist() == [[10, 10, 30, 30], [50, 50, 80, 80]] and gt["labels"].tolist() == [0, 1]


def test_perfect_predictions_score_one(coco: COCO) -> None:
    preds = {1: _pred([[10, 10, 30, 30], [50, 50, 80, 80]], [0.9, 0.8], [0, 1]), 2: _pred([[0, 0, 40, 40]], [0.7], [0])}
    m = evaluate_predictions(coco, preds, LABEL_TO_CAT, NAMES, f1_conf=0.5)
    assert m["map50"] == pytest.approx(1.0) and m["map50_95"] == pytest.approx(1.0)
    assert m["per_class"] == {"open": pytest.approx(1.0), "short": pytest.approx(1.0)}
    assert (m["f1_iou033"], m["precision"], m["recall"]) == (1.0, 1.0, 1.0)


def test_wrong_class_and_missed_box(coco: COCO) -> None:
    # image 1: the 'short' defect is reported as 'open'; image 2: missed.
    preds = {1: _pred([[10, 10, 30, 30], [50, 50, 80, 80]], [0.9, 0.8], [0, 0]), 2: _pred([], [], [])}
    m = coco_map(coco, preds, LABEL_TO_CAT, NAMES)
    assert m["per_class"]["short"] == pytest.approx(0.0)
    assert 0.0 < m["map50"] < 1.0
    f1 = deeppcb_f1(coco, preds, CAT_TO_LABEL, conf=0.5)
    assert (f1["tp"], f1["num_pred"], f1["num_gt"]) == (1, 2, 3)
    assert f1["precision"] == pytest.approx(0.5) and f1["recall"] == pytest.approx(1 / 3)
    matrix = confusion_matrix(coco, preds, CAT_TO_LABEL, num_classes=2, conf=0.5)
    expected = np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0]])  # rows predicted, columns true, index 2 = background
    np.testing.assert_array_equal(matrix, expected)


def test_deeppcb_iou_threshold_is_033(coco: COCO) -> None:
    # A box shifted so its IoU with the 20x20 ground truth is about 0.47 counts; one at 0.2 does not.
    shifted = {1: _pred([[17.14, 10, 37.14, 30]], [0.9], [0]), 2: _pred([], [], [])}
    far = {1: _pred([[23.33, 10, 43.33, 30]], [0.9], [0]), 2: _pred([], [], [])}
    assert deeppcb_f1(coco, shifted, CAT_TO_LABEL, conf=0.5)["tp"] == 1
    assert deeppcb_f1(coco, far, CAT_TO_LABEL, conf=0.5)["tp"] == 0


def test_score_threshold_and_empty_results(coco: COCO) -> None:
    preds = {1: _pred([[10, 10, 30, 30]], [0.2], [0]), 2: _pred([], [], [])}
    assert deeppcb_f1(coco, preds, CAT_TO_LABEL, conf=0.5)["num_pred"] == 0
    empty = coco_map(coco, {1: _pred([], [], []), 2: _pred([], [], [])}, LABEL_TO_CAT, NAMES)
    assert empty["map50"] == 0.0 and empty["pr_curve"].shape == (101, 2)


def test_coco_results_are_xywh() -> None:
    out = to_coco_results({5: _pred([[10, 20, 30, 60]], [0.5], [1])}, LABEL_TO_CAT)
    assert out == [{"image_id": 5, "category_id": 2, "bbox": [10.0, 20.0, 20.0, 40.0], "score": 0.5}]


def test_image_groups_use_the_first_folder() -> None:
    assert image_groups(_coco(("g1/x/a.png", "g2\\b.png")), [2, 1]) == {"g1": [1], "g2": [2]}
    assert image_groups(_coco(("a.png", "b.png")), [1, 2]) == {".": [1, 2]}


def test_per_group_map_ranks_each_group_alone() -> None:
    coco = _coco(("g1/a.png", "g2/b.png"))
    # Group g1 is found exactly; g2's only defect is missed, and a false 'open' on g2 outranks g1's.
    preds = {
        1: _pred([[10, 10, 30, 30], [50, 50, 80, 80]], [0.5, 0.8], [0, 1]),
        2: _pred([[60, 60, 90, 90]], [0.9], [0]),
    }
    groups = per_group_map(coco, preds, LABEL_TO_CAT, NAMES)
    assert groups["g1"] == {"images": 1, "map50": pytest.approx(1.0), "map50_95": pytest.approx(1.0)}
    assert groups["g2"]["images"] == 1 and groups["g2"]["map50"] == pytest.approx(0.0)
    together = coco_map(coco, preds, LABEL_TO_CAT, NAMES)["map50"]
    assert 0.0 < together < 1.0
    assert per_group_map(_coco(("a.png", "b.png")), preds, LABEL_TO_CAT, NAMES) == {}


def test_val_command_writes_design_keys_and_groups(tmp_path: Path, one_thread: None) -> None:
    ann = write_synthetic_dataset(tmp_path / "boards", n_images=4, height=128, width=128, seed=1)
    root = ann.parent
    data = json.loads(ann.read_text())
    for i, img in enumerate(data["images"]):  # two boards in each of folders g0 and g1
        folder = root / "images" / f"g{i % 2}"
        folder.mkdir(exist_ok=True)
        (root / "images" / img["file_name"]).rename(folder / img["file_name"])
        img["file_name"] = f"g{i % 2}/{img['file_name']}"
    ann.write_text(json.dumps(data))
    checkpoint = write_small_checkpoint(tmp_path / "small.pt", imgsz=128)
    ckpt = torch.load(checkpoint, weights_only=True)
    ckpt["config"]["eval"]["f1_conf"] = 0.45  # the model's operating point is val's default --conf
    torch.save(ckpt, checkpoint)
    out = tmp_path / "metrics.json"
    plots = tmp_path / "plots"
    args = ["--workers", "0", "--tta", "flip2", "--out", str(out), "--plots", str(plots)]
    assert main(["val", "--weights", str(checkpoint), "--data", str(ann), *args]) == 0
    metrics = json.loads(out.read_text())
    assert {"map50", "map50_95", "per_class", "f1_iou033", "precision", "recall"} <= metrics.keys()
    assert metrics["images"] == 4 and metrics["tta"] == "flip2" and metrics["f1_conf"] == 0.45
    assert main(["val", "--weights", str(checkpoint), "--data", str(ann), "--workers", "0", "--conf", "0.2", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["f1_conf"] == 0.2
    assert sorted(p.name for p in plots.iterdir()) == ["confusion_matrix.png", "pr_curves.png", "val_predictions.png"]
    assert {g: m["images"] for g, m in metrics["per_group"].items()} == {"g0": 2, "g1": 2}
    assert main(["val", "--weights", str(checkpoint), "--data", str(tmp_path / "missing.json")]) == 2
    assert main(["val", "--weights", str(checkpoint), "--data", str(ann), "--workers", "0", "--tta", "d4"]) == 2
