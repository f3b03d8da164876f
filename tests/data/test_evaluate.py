import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from pycocotools.coco import COCO
from small_checkpoint import write_small_checkpoint

from defect_detector.cli.main import main
from defect_detector.data.evaluate import (
    _above,
    box_convention_note,
    box_fit,
    coco_map,
    confusion_matrix,
    deeppcb_f1,
    evaluate_predictions,
    f_optimal_conf,
    greedy_matches,
    ground_truth,
    image_groups,
    operating_points,
    per_group_map,
    to_coco_results,
)
from defect_detector.data.synth import write_synthetic_dataset

NAMES = ("open", "short")
LABEL_TO_CAT = {0: 1, 1: 2}
CAT_TO_LABEL = {1: 0, 2: 1}


def _index(data: dict) -> COCO:
    """A pycocotools index over a COCO dict (its progress prints silenced)."""
    with contextlib.redirect_stdout(io.StringIO()):
        c = COCO()
        c.dataset = data
        c.createIndex()
    return c


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
    return _index(data)


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
    # Catching all three defects needs the lowest of their scores, and costs no false call.
    assert [(op["recall"], op["conf"], op["false_calls_per_image"]) for op in m["operating_points"]] == [
        (0.99, pytest.approx(0.7), 0.0),
        (0.995, pytest.approx(0.7), 0.0),
    ]


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


def test_val_command_writes_design_keys_and_groups(tmp_path: Path, one_thread: None, capsys: pytest.CaptureFixture[str]) -> None:
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
    args = ["--tta", "flip2", "--out", str(out), "--plots", str(plots)]
    assert main(["val", "--weights", str(checkpoint), "--data", str(ann), *args]) == 0
    metrics = json.loads(out.read_text())
    assert {"map50", "map50_95", "per_class", "f1_iou033", "precision", "recall"} <= metrics.keys()
    assert metrics["images"] == 4 and metrics["tta"] == "flip2" and metrics["f1_conf"] == 0.45
    assert [op["recall"] for op in metrics["operating_points"]] == [0.99, 0.995]
    assert all({"conf", "false_calls_per_image"} <= op.keys() and op["images"] == 4 for op in metrics["operating_points"])
    printed = capsys.readouterr().out
    assert "catch 99.0% of defects" in printed and "catch 99.5% of defects" in printed and "false calls/board" in printed
    assert main(["val", "--weights", str(checkpoint), "--data", str(ann), "--conf", "0.2", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["f1_conf"] == 0.2
    assert sorted(p.name for p in plots.iterdir()) == ["confusion_matrix.png", "pr_curves.png", "val_predictions.png"]
    assert {g: m["images"] for g, m in metrics["per_group"].items()} == {"g0": 2, "g1": 2}
    assert main(["val", "--weights", str(checkpoint), "--data", str(tmp_path / "missing.json")]) == 2
    assert main(["val", "--weights", str(checkpoint), "--data", str(ann), "--tta", "d4"]) == 2


def _coco_from(images: list[int], boxes: list[tuple[int, int, list[float]]]) -> COCO:
    """COCO ground truth of 100x100 ``images`` with ``boxes`` ``(image_id, category_id, xywh)``."""
    data = {
        "images": [{"id": i, "file_name": f"{i}.png", "width": 100, "height": 100} for i in images],
        "annotations": [
            {"id": k + 1, "image_id": i, "category_id": c, "bbox": b, "area": b[2] * b[3], "iscrowd": 0}
            for k, (i, c, b) in enumerate(boxes)
        ],
        "categories": [{"id": 1, "name": "open"}, {"id": 2, "name": "short"}],
    }
    return _index(data)


def _direct(coco: COCO, preds: dict, conf: float, iou: float = 0.33) -> tuple[int, int, int]:
    """(caught defects, false calls, defects) with only the detections at score >= conf, matched from scratch."""
    caught = false_calls = num_gt = 0
    for image_id, pred in preds.items():
        kept = _above(pred, conf)
        gt = ground_truth(coco, image_id, CAT_TO_LABEL)
        pairs = greedy_matches(kept, gt, iou, same_class=False)
        caught += len(pairs)
        false_calls += len(kept["boxes"]) - len(pairs)
        num_gt += len(gt["boxes"])
    return caught, false_calls, num_gt


# Two boards, four defects: A, B on board 1; C, D on board 2.
FOUR = [(1, 1, [10, 10, 20, 20]), (1, 2, [50, 50, 30, 30]), (2, 1, [0, 0, 40, 40]), (2, 2, [60, 60, 30, 30])]


def _four_preds(with_d: bool = True) -> dict:
    # Ranked: 0.9 A, 0.8 false, 0.7 C, 0.65 second box on C (false: one-to-one), 0.6 false, 0.4 B (as 'open'), 0.3 D, 0.2, 0.05 false.
    board2 = [[0, 0, 40, 40], [1, 1, 41, 41], [45, 0, 55, 10], [60, 60, 90, 90], [0, 80, 10, 90]]
    scores2, labels2 = [0.7, 0.65, 0.6, 0.3, 0.05], [0, 0, 1, 1, 0]
    if not with_d:
        del board2[3], scores2[3], labels2[3]
    return {
        1: _pred([[10, 10, 30, 30], [80, 0, 95, 15], [50, 50, 80, 80], [0, 50, 10, 60]], [0.9, 0.8, 0.4, 0.2], [0, 1, 0, 1]),
        2: _pred(board2, scores2, labels2),
    }


def test_operating_points_known_answers() -> None:
    coco, preds = _coco_from([1, 2], FOUR), _four_preds()
    ops = operating_points(coco, preds, CAT_TO_LABEL, recalls=(0.5, 0.75, 0.99, 0.995))
    f32 = [float(torch.tensor(v)) for v in (0.7, 0.4, 0.3, 0.3)]  # thresholds are the float32 scores themselves
    assert [op["conf"] for op in ops] == f32
    assert [op["false_calls"] for op in ops] == [1, 3, 3, 3]
    assert [op["false_calls_per_image"] for op in ops] == [0.5, 1.5, 1.5, 1.5]
    assert [op["achieved_recall"] for op in ops] == [0.5, 0.75, 1.0, 1.0]
    assert [op["recall"] for op in ops] == [0.5, 0.75, 0.99, 0.995] and {op["images"] for op in ops} == {2}
    assert [op["recall"] for op in operating_points(coco, preds, CAT_TO_LABEL)] == [0.99, 0.995]  # the defaults
    for op in ops:  # applied from scratch, each threshold catches its share; the next score up does not
        caught, false_calls, num_gt = _direct(coco, preds, op["conf"])
        assert caught / num_gt >= op["recall"] and false_calls == op["false_calls"]
        higher = sorted({s for p in preds.values() for s in p["scores"].tolist() if s > op["conf"]})
        assert _direct(coco, preds, higher[0])[0] / num_gt < op["recall"]


def test_operating_points_unreachable_recall() -> None:
    # Defect D has no detection at all: 3 of 4 is the most any threshold catches.
    coco, preds = _coco_from([1, 2], FOUR), _four_preds(with_d=False)
    low, high = operating_points(coco, preds, CAT_TO_LABEL, recalls=(0.75, 0.99))
    assert low["conf"] == float(torch.tensor(0.4)) and low["false_calls"] == 3
    assert high["conf"] is None and high["achieved_recall"] == 0.75
    assert high["false_calls"] == 5 and high["false_calls_per_image"] == 2.5  # every false detection, down to 0.05
    # A board with defects and no detections, and no boards at all.
    empty = operating_points(coco, {1: _pred([], [], []), 2: _pred([], [], [])}, CAT_TO_LABEL)
    assert [(op["conf"], op["achieved_recall"], op["false_calls_per_image"], op["images"]) for op in empty] == [(None, 0.0, 0.0, 2)] * 2
    assert operating_points(coco, {}, CAT_TO_LABEL)[0] | {"recall": 0.99} == {
        "recall": 0.99,
        "conf": None,
        "achieved_recall": 0.0,
        "false_calls_per_image": 0.0,
        "false_calls": 0,
        "images": 0,
    }


def test_operating_points_ignore_class() -> None:
    # The only defect is a 'short' reported as 'open': it is still caught, and the detection is no false call.
    coco = _coco_from([1, 2], [(1, 2, [50, 50, 30, 30])])
    preds = {1: _pred([[50, 50, 80, 80]], [0.6], [0]), 2: _pred([], [], [])}
    assert deeppcb_f1(coco, preds, CAT_TO_LABEL, conf=0.5)["tp"] == 0  # the F-score wants the class
    (op,) = operating_points(coco, preds, CAT_TO_LABEL, recalls=(0.99,))
    assert (op["conf"], op["achieved_recall"], op["false_calls"], op["images"]) == (float(torch.tensor(0.6)), 1.0, 0, 2)


def test_operating_points_iou_threshold_is_033() -> None:
    # A 20x20 box shifted right by dx has IoU (20 - dx) / (20 + dx) with the 20x20 defect:
    # dx = 10 -> 1/3 > 0.33 catches it; dx = 10.2 -> 0.3245 does not, and is a false call.
    coco = _coco_from([1], [(1, 1, [10, 10, 20, 20])])
    hit = {1: _pred([[20, 10, 40, 30]], [0.5], [0])}
    miss = {1: _pred([[20.2, 10, 40.2, 30]], [0.5], [0])}
    assert operating_points(coco, hit, CAT_TO_LABEL, recalls=(0.99,))[0]["conf"] == 0.5
    (op,) = operating_points(coco, miss, CAT_TO_LABEL, recalls=(0.99,))
    assert (op["conf"], op["achieved_recall"], op["false_calls"]) == (None, 0.0, 1)
    assert operating_points(coco, hit, CAT_TO_LABEL, recalls=(0.99,), iou_threshold=0.34)[0]["conf"] is None


def _crowded(seed: int) -> tuple[COCO, dict, list]:
    """Crowded boards: overlapping defects, several detections per defect near the IoU limit, tied scores.
    Returns the ground truth, the predictions and the ``(image_id, category_id, xywh)`` boxes."""
    rng = np.random.default_rng(seed)
    boxes, preds = [], {}
    for image_id in range(1, 7):
        gts = []
        for _ in range(int(rng.integers(0, 5))):
            x, y = rng.uniform(0, 60, 2)
            w, h = rng.uniform(10, 30, 2)
            gts.append([x, y, w, h])
            boxes.append((image_id, int(rng.integers(1, 3)), [float(v) for v in (x, y, w, h)]))
        dets = []
        for x, y, w, h in gts:
            for _ in range(int(rng.integers(0, 4))):
                dx, dy = rng.normal(0, 0.35 * w), rng.normal(0, 0.35 * h)
                dets.append([x + dx, y + dy, x + dx + w, y + dy + h])
        for _ in range(int(rng.integers(0, 4))):
            x, y = rng.uniform(0, 80, 2)
            dets.append([x, y, x + 15, y + 15])
        scores = np.round(rng.uniform(0.001, 1, len(dets)), 1).clip(0.001).tolist()
        preds[image_id] = _pred(dets, scores, rng.integers(0, 2, len(dets)).tolist())
    return _coco_from(list(preds), boxes), preds, boxes


@pytest.mark.parametrize("seed", range(8))
def test_operating_points_match_a_direct_sweep(seed: int) -> None:
    coco, preds, boxes = _crowded(seed)
    targets = (0.2, 0.5, 0.75, 0.9, 0.99, 0.995, 1.0)
    thresholds = sorted({s for p in preds.values() for s in p["scores"].tolist()}, reverse=True)
    direct = {t: _direct(coco, preds, t) for t in thresholds}
    num_gt = len(boxes)
    for target, op in zip(targets, operating_points(coco, preds, CAT_TO_LABEL, recalls=targets)):
        reaching = [t for t in thresholds if num_gt and direct[t][0] / num_gt >= target]
        if reaching:  # the highest threshold that reaches the target, with its false calls
            assert op["conf"] == reaching[0] and op["false_calls"] == direct[reaching[0]][1]
            assert op["achieved_recall"] == direct[reaching[0]][0] / num_gt >= target
        else:
            lowest = direct[thresholds[-1]] if thresholds else (0, 0, num_gt)
            assert op["conf"] is None and op["false_calls"] == lowest[1]
            assert op["achieved_recall"] == (lowest[0] / num_gt if num_gt else 0.0)
        assert op["false_calls_per_image"] == op["false_calls"] / len(preds)


def test_f_optimal_conf_known_answer() -> None:
    # Two defects; ranked 0.9 hit, 0.8 false, 0.6 hit, 0.2 false: F = 2/3, 1/2, 4/5, 2/3 -> keep down to 0.6.
    coco = _coco_from([1], [(1, 1, [0, 0, 20, 20]), (1, 1, [50, 50, 20, 20])])
    preds = {1: _pred([[0, 0, 20, 20], [80, 80, 95, 95], [50, 50, 70, 70], [30, 0, 40, 10]], [0.9, 0.8, 0.6, 0.2], [0, 0, 0, 0])}
    best = f_optimal_conf(coco, preds, CAT_TO_LABEL)
    assert best is not None and best["f1"] == pytest.approx(0.8) and (best["precision"], best["recall"]) == (pytest.approx(2 / 3), 1.0)
    assert best["conf"] == pytest.approx(0.4)  # the middle of (0.2, 0.6]: the F-score is flat there
    assert f_optimal_conf(coco, {1: _pred([], [], [])}, CAT_TO_LABEL) is None
    assert f_optimal_conf(_coco_from([1], []), preds, CAT_TO_LABEL) is None


@pytest.mark.parametrize("seed", range(6))
def test_f_optimal_conf_is_the_best_of_a_direct_sweep(seed: int) -> None:
    coco, preds, _ = _crowded(seed)
    best = f_optimal_conf(coco, preds, CAT_TO_LABEL)
    thresholds = sorted({s for p in preds.values() for s in p["scores"].tolist()}, reverse=True)
    sweep = [deeppcb_f1(coco, preds, CAT_TO_LABEL, t)["f1"] for t in thresholds]
    if best is None:
        assert not thresholds or not max(sweep)
        return
    assert best["f1"] == pytest.approx(max(sweep))
    assert deeppcb_f1(coco, preds, CAT_TO_LABEL, best["conf"])["f1"] == pytest.approx(max(sweep))  # applied from scratch


def test_classes_absent_from_the_json_are_not_scored() -> None:
    # The model knows open, short and spur; the json lists only open and short, with ids in the other order
    # (COCOeval sorts its classes by id: per-class AP must still land on the right names).
    names = ("open", "short", "spur")
    gt = _index(
        {
            "images": [{"id": 1, "file_name": "a.png", "width": 100, "height": 100}],
            "annotations": [
                {"id": 1, "image_id": 1, "category_id": 5, "bbox": [10, 10, 20, 20], "area": 400, "iscrowd": 0},
                {"id": 2, "image_id": 1, "category_id": 2, "bbox": [50, 50, 30, 30], "area": 900, "iscrowd": 0},
            ],
            "categories": [{"id": 5, "name": "open"}, {"id": 2, "name": "short"}],
        }
    )
    label_to_cat = {0: 5, 1: 2}
    # open found, short missed (the box is elsewhere), and a spur detection the json cannot judge
    preds = {1: _pred([[10, 10, 30, 30], [0, 0, 5, 5], [60, 0, 90, 20]], [0.9, 0.8, 0.95], [0, 1, 2])}
    metrics = evaluate_predictions(gt, preds, label_to_cat, names, f1_conf=0.5)
    assert metrics["per_class"] == {"open": pytest.approx(1.0), "short": pytest.approx(0.0)}
    assert metrics["absent_classes"] == ["spur"] and metrics["map50"] == pytest.approx(0.5)
    assert (metrics["pr_curve"][:, 2] == -1).all() and (metrics["pr_curve"][:, 0] == 1).all()
    assert metrics["deeppcb_counts"] == {"tp": 1, "num_pred": 2, "num_gt": 2}  # the spur detection is no false call
    assert metrics["confusion"][2].sum() == 0
    assert {r["category_id"] for r in to_coco_results(preds, label_to_cat)} == {5, 2}


def test_val_scores_a_json_with_some_of_the_classes(tmp_path: Path, one_thread: None, capsys: pytest.CaptureFixture[str]) -> None:
    ann = write_synthetic_dataset(tmp_path / "boards", n_images=2, height=128, width=128, seed=1)
    data = json.loads(ann.read_text())
    kept = {c["id"] for c in data["categories"] if c["name"] in ("open", "short", "mousebite")}
    data["categories"] = [c for c in data["categories"] if c["id"] in kept] + [{"id": 99, "name": "scratch"}]
    data["annotations"] = [a for a in data["annotations"] if a["category_id"] in kept]
    data["annotations"][0]["category_id"] = 99
    ann.write_text(json.dumps(data))
    checkpoint = write_small_checkpoint(tmp_path / "small.pt", imgsz=128)
    out = tmp_path / "metrics.json"
    assert main(["val", "--weights", str(checkpoint), "--data", str(ann), "--out", str(out)]) == 0
    metrics = json.loads(out.read_text())
    assert metrics["absent_classes"] == ["spur", "copper", "pin-hole"]
    assert set(metrics["per_class"]) <= {"open", "short", "mousebite"}
    printed = capsys.readouterr().out
    assert "unknown category x1" in printed and "not scored (not among the json's categories): spur, copper, pin-hole" in printed

    data["categories"] = [{"id": 99, "name": "scratch"}]
    ann.write_text(json.dumps(data))
    assert main(["val", "--weights", str(checkpoint), "--data", str(ann)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"defect-detector val: error: {ann}: none of its categories (scratch) is a class of the model "
        "(open, short, mousebite, spur, copper, pin-hole); categories are matched by name"
    )


def test_boxes_of_another_convention_are_named_in_one_line() -> None:
    """Issue 43: a model that finds every defect, its boxes padded as DeepPCB's annotators drew theirs, scored against
    tight boxes: mAP@0.5 0, and ``val`` says why in one line (the convention of docs/looks.md)."""
    tight = [(1, 1, [40, 40, 10, 10]), (1, 2, [10, 10, 6, 6]), (2, 1, [60, 20, 10, 10])]
    coco = _coco_from([1, 2], tight)
    padded = {  # a 26 px box around each defect: IoU with its tight box 0.15, 0.05, 0.15
        1: _pred([[31, 31, 57, 57], [0, 0, 26, 26]], [0.9, 0.8], [0, 1]),
        2: _pred([[52, 12, 78, 38]], [0.7], [0]),
    }
    metrics = evaluate_predictions(coco, padded, LABEL_TO_CAT, NAMES, 0.5)
    fit = metrics["box_fit"]
    assert metrics["map50"] == 0.0 and fit["defects"] == 3 and fit["matched_iou050"] == 0
    assert fit["matched_iou010"] == 2 and fit["area_ratio"] == pytest.approx(26 * 26 / 100)  # the 6 px box: IoU 0.05
    note = box_convention_note(fit, 0.5)
    assert note is not None and "\n" not in note
    assert "2 of 3 defects have a call at IoU > 0.1 but only 0 at IoU > 0.5" in note and "docs/looks.md" in note
    matched = {1: _pred([[40, 40, 50, 50], [10, 10, 16, 16]], [0.9, 0.8], [0, 1]), 2: _pred([[60, 20, 70, 30]], [0.7], [0])}
    assert box_convention_note(evaluate_predictions(coco, matched, LABEL_TO_CAT, NAMES, 0.5)["box_fit"], 0.5) is None
    assert box_convention_note(box_fit(coco, padded, CAT_TO_LABEL, 0.95), 0.95) is None  # no call kept: nothing to say


def test_val_lines_name_each_measure_and_its_key(capsys: pytest.CaptureFixture[str]) -> None:
    """``recall`` (same class) and ``at_conf.caught`` (any class) printed side by side read as one measure that
    disagrees with itself: each line names its keys, its score threshold and its match."""
    from defect_detector.cli.val import _print_val

    at = {"conf": 0.36, "caught": 0.905, "defects": 148, "missed": 14, "false_calls_per_image": 0.5, "false_calls": 12, "images": 24}
    op = {"recall": 0.99, "conf": 0.1, "achieved_recall": 0.99, "false_calls_per_image": 2.0}
    out = {"weights": "w.pt", "kind": "checkpoint", "params": 1e6, "gflops": 1.0, "images": 24, "not_inspected": {}, "tta": "none",
           "map50": 0.0, "map50_95": 0.0, "per_class": {"open": 0.0}, "absent_classes": [], "f1_conf": 0.36, "precision": 0.4,
           "recall": 0.4054, "f1_iou033": 0.4, "at_conf": at, "per_group": {}, "operating_points": [op],
           "box_fit": {"defects": 148, "matched_iou010": 140, "matched_iou050": 3, "area_ratio": 6.5}}  # fmt: skip
    _print_val(out, "1x2x640x640", "ok")
    lines = capsys.readouterr().out.splitlines()
    recall = next(line for line in lines if "recall 0.4054" in line)
    caught = next(line for line in lines if "90.5% of 148 defects caught" in line)
    assert "score >= 0.36" in recall and "class is right" in recall and "(precision, recall, f1_iou033" in recall
    assert "score >= 0.36" in caught and "any class" in caught and "(at_conf" in caught
    assert sum(line.startswith("box convention: at score >= 0.36, 140 of 148 defects") for line in lines) == 1
