import contextlib
import io

import numpy as np
import pytest
import torch
from pycocotools.coco import COCO

from defect_detector.engine.evaluate import coco_map, confusion_matrix, deeppcb_f1, evaluate_predictions, ground_truth, to_coco_results

NAMES = ("open", "short")
LABEL_TO_CAT = {0: 1, 1: 2}
CAT_TO_LABEL = {1: 0, 2: 1}


@pytest.fixture
def coco() -> COCO:
    data = {
        "images": [
            {"id": 1, "file_name": "a.png", "width": 100, "height": 100},
            {"id": 2, "file_name": "b.png", "width": 100, "height": 100},
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
