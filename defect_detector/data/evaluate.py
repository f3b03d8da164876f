"""Evaluation: COCO mAP with pycocotools, DeepPCB's F-score protocol, confusion matrix.

Predictions are the postprocess output: one dict per image with ``boxes``
(xyxy, original-image pixels), ``scores`` and ``labels`` (0..C-1). Ground truth
is the ``COCO`` object of the json read (``coco_gt``), in original pixels.
COCO xywh exists only inside :func:`to_coco_results`.

Classes are matched to the json's categories by name (the dataset's ``label_to_cat_id``, whatever the ids). A
model class absent from the json (not among its categories, so not annotated) is not scored: its detections are
left out of every metric, mAP averages over the classes present, and ``absent_classes`` names the others.
"""

from __future__ import annotations

import contextlib
import io
from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from torchvision.ops import box_area, box_convert, box_iou

Predictions = dict[int, dict[str, torch.Tensor]]


def to_coco_results(predictions: Predictions, label_to_cat_id: Mapping[int, int]) -> list[dict]:
    """Predictions -> pycocotools result list (``bbox`` in COCO xywh, original pixels); detections of a label
    without a category (a class absent from the json) are left out."""
    out = []
    for image_id, pred in predictions.items():
        xywh = box_convert(pred["boxes"], "xyxy", "xywh").tolist()
        for box, score, label in zip(xywh, pred["scores"].tolist(), pred["labels"].tolist()):
            if label not in label_to_cat_id:
                continue
            out.append(
                {"image_id": image_id, "category_id": label_to_cat_id[label], "bbox": [round(v, 2) for v in box], "score": round(score, 5)}
            )
    return out


def coco_map(coco_gt: COCO, predictions: Predictions, label_to_cat_id: Mapping[int, int], class_names: Sequence[str]) -> dict:
    """COCO box mAP via ``COCOeval`` over the images in ``predictions``.

    Returns ``map50``, ``map50_95``, ``per_class`` ``{name: AP@0.5}`` (NaN-free:
    classes without ground truth are left out), ``absent_classes`` (classes with no category in the json, not
    scored) and ``pr_curve`` float32 ``[101, C]`` (precision at 101 recall points, IoU 0.5, -1 = no ground truth).
    """
    num_classes = len(class_names)
    absent = [name for label, name in enumerate(class_names) if label not in label_to_cat_id]
    pr50 = -np.ones((101, num_classes), np.float32)
    empty = {"map50": 0.0, "map50_95": 0.0, "per_class": {}, "absent_classes": absent, "pr_curve": pr50}
    results = to_coco_results(predictions, label_to_cat_id)
    if not results:
        return empty
    cat_ids = sorted(set(label_to_cat_id.values()))  # COCOeval orders its classes by category id
    cat_to_label = {c: label for label, c in label_to_cat_id.items()}
    with contextlib.redirect_stdout(io.StringIO()):
        coco_dt = coco_gt.loadRes(results)
        evaluator = COCOeval(coco_gt, coco_dt, iouType="bbox")
        evaluator.params.imgIds = sorted(predictions)
        evaluator.params.catIds = cat_ids
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    precision = evaluator.eval["precision"]  # [T iou, R recall, K classes (by category id), A areas, M maxDets]
    pr50[:, [cat_to_label[c] for c in cat_ids]] = precision[0, :, :, 0, -1]  # [101, C] in label order
    per_class = {}
    for k, name in enumerate(class_names):
        column = pr50[:, k]
        if (column > -1).any():
            per_class[name] = float(column[column > -1].mean())
    return {
        "map50": float(evaluator.stats[1]),
        "map50_95": float(evaluator.stats[0]),
        "per_class": per_class,
        "absent_classes": absent,
        "pr_curve": pr50,
    }


def scored_predictions(predictions: Predictions, label_to_cat_id: Mapping[int, int]) -> Predictions:
    """``predictions`` without the detections of labels that have no category in the json (absent classes)."""
    labels = torch.tensor(sorted(label_to_cat_id), dtype=torch.int64)
    out: Predictions = {}
    for image_id, pred in predictions.items():
        keep = torch.isin(pred["labels"].to(torch.int64).cpu(), labels)
        out[image_id] = pred if bool(keep.all()) else {k: v[keep] for k, v in pred.items()}
    return out


def image_groups(coco_gt: COCO, image_ids: Sequence[int]) -> dict[str, list[int]]:
    """``{group: [image_id, ...]}``: an image's group is the first folder of its ``file_name``
    (DeepPCB: ``group92000/92000/92000000_test.jpg`` -> ``group92000``); files at the top level form group ``.``."""
    groups: dict[str, list[int]] = defaultdict(list)
    for image_id in sorted(image_ids):
        parts = coco_gt.imgs[image_id]["file_name"].replace("\\", "/").split("/")
        groups[parts[0] if len(parts) > 1 else "."].append(image_id)
    return dict(sorted(groups.items()))


def per_group_map(coco_gt: COCO, predictions: Predictions, label_to_cat_id: Mapping[int, int], class_names: Sequence[str]) -> dict:
    """COCO mAP of each image group alone (see :func:`image_groups`): ``{group: {"images", "map50", "map50_95"}}``.

    Empty when all images form one group. A group's mAP ranks only its own detections, so
    groups scoring higher alone than together means scores are not comparable across groups.
    """
    groups = image_groups(coco_gt, list(predictions))
    if len(groups) < 2:
        return {}
    out = {}
    for name, ids in groups.items():
        m = coco_map(coco_gt, {i: predictions[i] for i in ids}, label_to_cat_id, class_names)
        out[name] = {"images": len(ids), "map50": m["map50"], "map50_95": m["map50_95"]}
    return out


def truth_index(truth: Sequence[dict[str, torch.Tensor]], class_names: Sequence[str]) -> tuple[COCO, dict[int, int]]:
    """Ground truth held in memory (one dict per image: ``boxes`` float ``[N, 4]`` xyxy, ``labels`` int64 ``[N]``) as
    the ``COCO`` index :func:`coco_map` reads (image ids 0..len-1, category ``label + 1`` named after ``class_names``),
    with its ``label_to_cat_id``; the inverse of :func:`ground_truth`."""
    annotations = []
    for image_id, t in enumerate(truth):
        boxes = box_convert(t["boxes"].reshape(-1, 4).double(), "xyxy", "xywh").tolist()
        for (x, y, w, h), label in zip(boxes, t["labels"].tolist()):
            box = {"bbox": [x, y, w, h], "area": w * h, "iscrowd": 0}
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": int(label) + 1} | box)
    categories = [{"id": label + 1, "name": name} for label, name in enumerate(class_names)]
    coco = COCO()
    coco.dataset = {"images": [{"id": i} for i in range(len(truth))], "annotations": annotations, "categories": categories}
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco, {label: label + 1 for label in range(len(class_names))}


def ground_truth(coco_gt: COCO, image_id: int, cat_id_to_label: Mapping[int, int]) -> dict[str, torch.Tensor]:
    """Ground truth of one image: ``boxes`` float32 ``[N, 4]`` xyxy original pixels, ``labels`` int64 ``[N]``."""
    anns = [a for a in coco_gt.loadAnns(coco_gt.getAnnIds(imgIds=[image_id])) if a["category_id"] in cat_id_to_label]
    boxes = torch.tensor([a["bbox"] for a in anns], dtype=torch.float32).reshape(-1, 4)
    labels = torch.tensor([cat_id_to_label[a["category_id"]] for a in anns], dtype=torch.int64)
    return {"boxes": box_convert(boxes, "xywh", "xyxy"), "labels": labels}


def greedy_matches(
    pred: dict[str, torch.Tensor], gt: dict[str, torch.Tensor], iou_threshold: float, same_class: bool
) -> list[tuple[int, int]]:
    """Greedy one-to-one matching by descending score; pairs ``(pred_index, gt_index)`` with IoU > threshold.

    Ties keep index order (stable sort), so the matching of the detections at score >= t is the
    first part of the matching of all detections: :func:`operating_points` relies on that."""
    if len(pred["boxes"]) == 0 or len(gt["boxes"]) == 0:
        return []
    ious = box_iou(pred["boxes"], gt["boxes"])  # [P, G]
    if same_class:
        ious = ious * (pred["labels"][:, None] == gt["labels"][None, :])
    taken: set[int] = set()
    pairs = []
    for p in torch.argsort(pred["scores"], descending=True, stable=True).tolist():
        candidates = [(float(ious[p, g]), g) for g in range(ious.shape[1]) if g not in taken and ious[p, g] > iou_threshold]
        if candidates:
            _, g = max(candidates)
            taken.add(g)
            pairs.append((p, g))
    return pairs


def _above(pred: dict[str, torch.Tensor], conf: float) -> dict[str, torch.Tensor]:
    keep = pred["scores"] >= conf
    return {k: v[keep] for k, v in pred.items()}


def deeppcb_f1(
    coco_gt: COCO, predictions: Predictions, cat_id_to_label: Mapping[int, int], conf: float, iou_threshold: float = 0.33
) -> dict:
    """DeepPCB's protocol: a detection at score >= ``conf`` is correct when it matches a
    ground-truth box of the same class with IoU > ``iou_threshold`` (one-to-one).
    Returns ``precision``, ``recall``, ``f1`` and the counts."""
    tp = num_pred = num_gt = 0
    for image_id, pred in predictions.items():
        pred = _above(pred, conf)
        gt = ground_truth(coco_gt, image_id, cat_id_to_label)
        tp += len(greedy_matches(pred, gt, iou_threshold, same_class=True))
        num_pred += len(pred["boxes"])
        num_gt += len(gt["boxes"])
    precision = tp / num_pred if num_pred else 0.0
    recall = tp / num_gt if num_gt else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "tp": tp, "num_pred": num_pred, "num_gt": num_gt}


def confusion_matrix(
    coco_gt: COCO, predictions: Predictions, cat_id_to_label: Mapping[int, int], num_classes: int, conf: float, iou_threshold: float = 0.5
) -> np.ndarray:
    """int64 ``[C+1, C+1]``: rows predicted class, columns true class; index C is background
    (last row: missed ground truth; last column: detections matching nothing). Matching ignores class."""
    matrix = np.zeros((num_classes + 1, num_classes + 1), dtype=np.int64)
    for image_id, pred in predictions.items():
        pred = _above(pred, conf)
        gt = ground_truth(coco_gt, image_id, cat_id_to_label)
        pairs = greedy_matches(pred, gt, iou_threshold, same_class=False)
        for p, g in pairs:
            matrix[int(pred["labels"][p]), int(gt["labels"][g])] += 1
        matched_p = {p for p, _ in pairs}
        matched_g = {g for _, g in pairs}
        for p in range(len(pred["boxes"])):
            if p not in matched_p:
                matrix[int(pred["labels"][p]), num_classes] += 1
        for g in range(len(gt["boxes"])):
            if g not in matched_g:
                matrix[num_classes, int(gt["labels"][g])] += 1
    return matrix


def operating_points(
    coco_gt: COCO,
    predictions: Predictions,
    cat_id_to_label: Mapping[int, int],
    recalls: Sequence[float] = (0.99, 0.995),
    iou_threshold: float = 0.33,
) -> list[dict]:
    """The inspector's operating points: for each target recall, the highest score threshold ``conf``
    at which the detections with score >= ``conf`` catch at least that share of the defects, and the
    false calls per board it costs.

    Matching ignores class: a ground-truth box is caught by a detection of any class with IoU >
    ``iou_threshold``, one-to-one, greedy by descending score (:func:`greedy_matches`); a false call
    is a detection at score >= ``conf`` that matches no ground-truth box. Boards are the images in
    ``predictions``. One matching of all detections serves every threshold: greedy matching visits
    detections by descending score, so the detections at score >= t are matched exactly as a
    matching of them alone would (ties are all in or all out, in a stable order).

    Returns one dict per target: ``recall`` (the target), ``conf`` (None when no threshold reaches
    the target, e.g. a defect without any detection, or no ground truth at all), ``achieved_recall``
    at ``conf`` (without one: the most reached, at the lowest score), ``false_calls`` (at ``conf``, or
    at the lowest score), ``false_calls_per_image`` and ``images``.
    """
    score, hit, num_gt = ranked_hits(coco_gt, predictions, cat_id_to_label, iou_threshold)
    images = len(predictions)
    tp = np.cumsum(hit)  # caught defects with the detections ranked 0..i
    fp = np.cumsum(~hit)
    # A threshold at a score keeps every detection of that score: the end of each run of equal scores.
    ends = np.flatnonzero(np.append(score[1:] != score[:-1], True)) if len(score) else np.zeros(0, np.int64)
    out = []
    for target in recalls:
        reached = np.flatnonzero(tp[ends] / num_gt >= target) if num_gt and len(ends) else np.zeros(0, np.int64)
        if len(reached):
            end = int(ends[reached[0]])
            conf, caught, false_calls = float(score[end]), int(tp[end]), int(fp[end])
        else:
            conf, caught, false_calls = None, int(tp[-1]) if len(tp) else 0, int(fp[-1]) if len(fp) else 0
        out.append(
            {
                "recall": float(target),
                "conf": conf,
                "achieved_recall": caught / num_gt if num_gt else 0.0,
                "false_calls_per_image": false_calls / images if images else 0.0,
                "false_calls": false_calls,
                "images": images,
            }
        )
    return out


def f_optimal_conf(
    coco_gt: COCO, predictions: Predictions, cat_id_to_label: Mapping[int, int], floor: float = 0.0, iou_threshold: float = 0.33
) -> dict | None:
    """The score threshold at which DeepPCB's F-score (:func:`deeppcb_f1`: same class, IoU > ``iou_threshold``) is
    highest: ``{"conf", "f1", "precision", "recall"}``, or None without ground truth or detections.

    One same-class greedy matching of all detections serves every threshold (as in :func:`operating_points`). The
    F-score is flat between the score of the last detection kept and the next lower score; ``conf`` is the middle of
    that interval (at least ``floor``, the postprocess threshold; rounded to 4 decimals when that stays inside it), so a
    score that moves a little keeps its side.
    Of equal F-scores the highest threshold wins (fewest calls)."""
    score, hit, num_gt = ranked_hits(coco_gt, predictions, cat_id_to_label, iou_threshold, same_class=True)
    if not num_gt or not len(score):
        return None
    ends = np.flatnonzero(np.append(score[1:] != score[:-1], True))
    tp = np.cumsum(hit)[ends]
    f1 = 2 * tp / (ends + 1 + num_gt)
    best = int(np.argmax(f1))
    end = int(ends[best])
    lower = float(score[end + 1]) if end + 1 < len(score) else floor
    middle, upper = 0.5 * (float(score[end]) + lower), float(score[end])
    conf = max(floor, round(middle, 4) if lower < round(middle, 4) <= upper else middle)
    precision, recall = float(tp[best]) / (end + 1), float(tp[best]) / num_gt
    return {"conf": conf, "f1": float(f1[best]), "precision": precision, "recall": recall}


def ranked_hits(
    coco_gt: COCO, predictions: Predictions, cat_id_to_label: Mapping[int, int], iou_threshold: float, same_class: bool = False
) -> tuple[np.ndarray, np.ndarray, int]:
    """All detections' scores (float64, descending, stable) with whether each caught a defect (greedy matching per
    image, class-agnostic unless ``same_class``), and the number of ground-truth boxes."""
    scores, hits = [], []
    num_gt = 0
    for image_id, pred in predictions.items():
        gt = ground_truth(coco_gt, image_id, cat_id_to_label)
        num_gt += len(gt["boxes"])
        hit = np.zeros(len(pred["scores"]), dtype=bool)
        hit[[p for p, _ in greedy_matches(pred, gt, iou_threshold, same_class=same_class)]] = True
        scores.append(pred["scores"].detach().cpu().double().numpy().reshape(-1))  # float64 holds float32 scores exactly
        hits.append(hit)
    score = np.concatenate(scores) if scores else np.zeros(0, np.float64)
    hit = np.concatenate(hits) if hits else np.zeros(0, bool)
    order = np.argsort(-score, kind="stable")
    return score[order], hit[order], num_gt


def calls_at(coco_gt: COCO, predictions: Predictions, cat_id_to_label: Mapping[int, int], conf: float, iou_threshold: float = 0.33) -> dict:
    """What an inspector sees at score threshold ``conf``: ``caught`` (share of the defects matched by a call of any
    class with IoU > ``iou_threshold``, as :func:`operating_points` matches), ``false_calls_per_image`` and the counts
    ``defects``, ``missed``, ``false_calls``, ``images``."""
    score, hit, num_gt = ranked_hits(coco_gt, predictions, cat_id_to_label, iou_threshold)
    kept = score >= conf
    caught, false_calls, images = int((hit & kept).sum()), int((~hit & kept).sum()), len(predictions)
    return {
        "conf": float(conf),
        "caught": caught / num_gt if num_gt else 0.0,
        "false_calls_per_image": false_calls / images if images else 0.0,
        "defects": num_gt,
        "missed": num_gt - caught,
        "false_calls": false_calls,
        "images": images,
    }


def box_fit(coco_gt: COCO, predictions: Predictions, cat_id_to_label: Mapping[int, int], conf: float) -> dict:
    """How the calls at score >= ``conf`` fit the json's boxes, class ignored: ``defects``, ``matched_iou010`` and
    ``matched_iou050`` (defects matched by a call at IoU > 0.1 / > 0.5, one-to-one, greedy by descending score) and
    ``area_ratio``: the median, over the IoU > 0.1 pairs, of the call's area over its defect box's (None without a
    pair). A model that finds every defect but draws its boxes by another convention than the json's (DeepPCB's
    annotators pad a defect; tight boxes hug it) matches at IoU > 0.1 and rarely at IoU > 0.5
    (:func:`box_convention_note`)."""
    loose = tight = defects = 0
    ratios: list[torch.Tensor] = []
    for image_id, pred in predictions.items():
        pred = _above(pred, conf)
        gt = ground_truth(coco_gt, image_id, cat_id_to_label)
        defects += len(gt["boxes"])
        pairs = greedy_matches(pred, gt, 0.1, same_class=False)
        loose += len(pairs)
        tight += len(greedy_matches(pred, gt, 0.5, same_class=False))
        if pairs:
            p, g = (torch.tensor(index) for index in zip(*pairs))
            ratios.append(box_area(pred["boxes"][p]) / box_area(gt["boxes"][g]).clamp(min=1e-6))
    ratio = float(torch.cat(ratios).median()) if ratios else None
    return {"defects": defects, "matched_iou010": loose, "matched_iou050": tight, "area_ratio": ratio}


def box_convention_note(fit: dict, conf: float) -> str | None:
    """One line when :func:`box_fit` ``fit`` says the json's boxes follow another convention than the model's: most
    defects matched at IoU > 0.1, under half of those at IoU > 0.5, and calls at least twice (or at most half) the
    json's boxes in area; else None. It names the convention the bundled models learnt (docs/looks.md)."""
    loose, tight, ratio = fit["matched_iou010"], fit["matched_iou050"], fit["area_ratio"]
    if ratio is None or loose < 0.5 * fit["defects"] or tight >= 0.5 * loose or 0.5 < ratio < 2.0:
        return None
    size = f"{ratio:.1f}x the json's boxes" if ratio >= 2.0 else f"{1 / ratio:.1f}x smaller than the json's boxes"
    return (
        f"box convention: at score >= {conf:g}, {loose} of {fit['defects']} defects have a call at IoU > 0.1 but only {tight} "
        f"at IoU > 0.5, the calls {size} in area (median): these weights draw a defect's box padded, as DeepPCB's "
        "annotators did (at least 26 px at DeepPCB's scale, docs/looks.md), so mAP counts boxes of another convention as "
        "misses; draw yours that way, or fine-tune on them"
    )


def evaluate_predictions(
    coco_gt: COCO, predictions: Predictions, label_to_cat_id: Mapping[int, int], class_names: Sequence[str], f1_conf: float
) -> dict:
    """All metrics for one prediction set; keys per DESIGN.md's ``val --out`` (``operating_points``:
    :func:`operating_points` at recall 0.99 and 0.995) plus extras (``pr_curve``, ``confusion``, DeepPCB counts,
    ``f1_optimal``: :func:`f_optimal_conf`; ``at_conf``: :func:`calls_at` the score threshold ``f1_conf``; ``box_fit``:
    :func:`box_fit` at ``f1_conf``).
    Detections of classes absent from the json (no ``label_to_cat_id`` entry) are left out of every metric."""
    cat_id_to_label = {c: label for label, c in label_to_cat_id.items()}
    predictions = scored_predictions(predictions, label_to_cat_id)
    metrics = coco_map(coco_gt, predictions, label_to_cat_id, class_names)
    f1 = deeppcb_f1(coco_gt, predictions, cat_id_to_label, f1_conf)
    metrics.update(
        {
            "f1_iou033": f1["f1"],
            "precision": f1["precision"],
            "recall": f1["recall"],
            "deeppcb_counts": {k: f1[k] for k in ("tp", "num_pred", "num_gt")},
            "f1_conf": f1_conf,
            "confusion": confusion_matrix(coco_gt, predictions, cat_id_to_label, len(class_names), f1_conf),
            "operating_points": operating_points(coco_gt, predictions, cat_id_to_label),
            "at_conf": calls_at(coco_gt, predictions, cat_id_to_label, f1_conf),
            "f1_optimal": f_optimal_conf(coco_gt, predictions, cat_id_to_label),
            "box_fit": box_fit(coco_gt, predictions, cat_id_to_label, f1_conf),
        }
    )
    return metrics
