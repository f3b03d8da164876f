"""Anchor points, decoding of raw predictions, NMS and mapping back to original pixels."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torchvision.ops import batched_nms, box_area, box_iou, remove_small_boxes

from defect_detector.core.boxes import boxes_from_letterbox, ltrb_to_xyxy
from defect_detector.core.types import LetterboxMeta

PRE_NMS_TOPK = 1000
MIN_SIDE = 1e-3
"""Boxes narrower or shorter than this (pixels) once mapped back and clipped lie in the letterbox padding: dropped."""


def make_anchor_points(
    height: int, width: int, strides: Sequence[int], device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Anchor-point centres for an input of ``height x width`` pixels.

    Returns ``points [A, 2]`` (x, y) float32 in input pixels, at the centre of
    each grid cell, and ``strides [A]`` float32; levels in ``strides`` order,
    locations row-major, matching the head's output order.
    """
    points, stride_values = [], []
    for stride in strides:
        h, w = height // stride, width // stride
        ys = (torch.arange(h, device=device, dtype=torch.float32) + 0.5) * stride
        xs = (torch.arange(w, device=device, dtype=torch.float32) + 0.5) * stride
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
        points.append(torch.stack((grid_x, grid_y), dim=-1).reshape(-1, 2))  # [h * w, 2]
        stride_values.append(torch.full((h * w,), float(stride), device=device))
    return torch.cat(points), torch.cat(stride_values)


def box_distances(raw_boxes: torch.Tensor, box_bins: int = 0) -> torch.Tensor:
    """Raw box outputs -> float32 edge distances ``[B, A, 4]`` (l, t, r, b) in units of the level's stride.

    ``box_bins`` 0: ``raw_boxes`` ``[B, A, 4]``, each value ``softplus(raw)``. ``box_bins`` n > 0 (distribution
    focal loss): ``[B, A, 4 * n]``, 4 groups of n logits over the distances 0..n-1, each read as the expectation
    of its softmax (the integral of GFL).
    """
    if not box_bins:
        return F.softplus(raw_boxes.float())
    probs = raw_boxes.float().unflatten(-1, (4, box_bins)).softmax(-1)  # [B, A, 4, n]
    bins = torch.arange(box_bins, dtype=torch.float32, device=raw_boxes.device)
    return (probs * bins).sum(-1)


def decode_boxes(raw_boxes: torch.Tensor, points: torch.Tensor, strides: torch.Tensor, box_bins: int = 0) -> torch.Tensor:
    """Raw box outputs (``[B, A, 4]``, or ``[B, A, 4 * box_bins]``: see :func:`box_distances`) -> xyxy ``[B, A, 4]``
    in input (letterboxed) pixels: each edge distance times the location's stride, from its anchor point."""
    distances = box_distances(raw_boxes, box_bins) * strides[:, None]
    return ltrb_to_xyxy(distances, points)


def decode(raw: torch.Tensor, points: torch.Tensor, strides: torch.Tensor, box_bins: int = 0) -> torch.Tensor:
    """Raw predictions ``[B, A, R + C]`` (``R`` 4, or ``4 * box_bins`` for a distribution head) -> ``[B, A, 4 + C]``:
    xyxy boxes in input pixels, then class probabilities."""
    split = 4 * box_bins if box_bins else 4
    return torch.cat((decode_boxes(raw[..., :split], points, strides, box_bins), raw[..., split:].float().sigmoid()), dim=-1)


def demote_cross_class(boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor, iou: float, factor: float) -> torch.Tensor:
    """Scores after cross-class suppression: a detection that overlaps a higher-scored detection of another class
    by IoU > ``iou`` has its score multiplied by ``factor`` (0 drops it below any threshold).

    ``boxes`` float ``[K, 4]`` xyxy, ``scores`` ``[K]``, ``labels`` int64 ``[K]``; returns new float ``[K]`` scores in
    the same order. One defect then gets one call at a line's threshold, while the other classes it might be stay
    in the ranking (for mAP) at a fraction of their score; ties in score do not demote each other.
    """
    if scores.numel() < 2:
        return scores.clone()
    overlap = box_iou(boxes.float(), boxes.float()) > iou  # [K, K]
    higher = scores[None, :] > scores[:, None]  # [i, j]: j scores above i
    other = labels[None, :] != labels[:, None]
    demoted = (overlap & higher & other).any(1)
    return torch.where(demoted, scores * factor, scores)


def demote_and_drop(detections: dict[str, torch.Tensor], conf: float, iou: float, factor: float) -> dict[str, torch.Tensor]:
    """One image's calls after :func:`demote_cross_class` at ``iou`` / ``factor``, re-sorted by score, those demoted
    to ``conf`` or below dropped (no call at that threshold). ``detections``: ``boxes`` float ``[K, 4]`` xyxy (any one
    pixel frame), ``scores`` ``[K]``, ``labels`` int64 ``[K]``; returns the same keys. Used by :func:`postprocess` per
    model input and by the frame pipeline again after tiles are merged (one defect on a seam: one call)."""
    boxes, scores, labels = detections["boxes"], detections["scores"], detections["labels"]
    scores = demote_cross_class(boxes, scores, labels, iou, factor)
    order = torch.argsort(scores, descending=True, stable=True)
    order = order[scores[order] > conf]
    return {"boxes": boxes[order], "scores": scores[order], "labels": labels[order]}


def intersection_over_smaller(boxes: torch.Tensor) -> torch.Tensor:
    """``[K, 4]`` xyxy boxes -> float ``[K, K]``: the area the boxes of each pair share over the smaller box's area
    (1 when one lies wholly inside the other, whatever their IoU). Read from torchvision's IoU:
    ``inter = iou * (a_i + a_j) / (1 + iou)``."""
    boxes = boxes.float()
    area = box_area(boxes)
    iou = box_iou(boxes, boxes)
    inter = iou * (area[:, None] + area[None, :]) / (1.0 + iou)
    return inter / torch.minimum(area[:, None], area[None, :]).clamp_min(1e-9)


CHAIN_IOS, CHAIN_AREA = 0.3, 2.0
"""Calls chain on one defect (:func:`merge_nested`) when their boxes overlap by more than this share of the smaller
one and neither is more than this many times the other's area: pieces of one long or irregular defect, side by side.
A box much larger than another never chains with it, so a large low box over two defects never joins them."""


def _chains(boxes: torch.Tensor) -> list[list[int]]:
    """The groups of ``boxes`` ``[K, 4]`` (sorted best first) that chain (:data:`CHAIN_IOS`, :data:`CHAIN_AREA`), each
    group's indices ascending (its best first), groups in the order of their best."""
    area = box_area(boxes.float()).clamp_min(1e-9)
    ratio = torch.maximum(area[:, None] / area[None, :], area[None, :] / area[:, None])
    linked = (intersection_over_smaller(boxes) > CHAIN_IOS) & (ratio <= CHAIN_AREA)
    group = list(range(len(boxes)))
    for i, j in linked.nonzero().tolist():
        a, b = group[i], group[j]
        if a != b:
            low, high = min(a, b), max(a, b)
            group = [low if g == high else g for g in group]
    return [[i for i, g in enumerate(group) if g == root] for root in sorted(set(group))]


def merge_nested(detections: dict[str, torch.Tensor], ios: float, floor: float = 0.0) -> tuple[dict[str, torch.Tensor], int]:
    """One call per defect: best score first, each kept call absorbs the lower-scored calls of any class whose
    intersection over the smaller box with it exceeds ``ios`` (a box mostly inside another, or boxes stacked along one
    long defect over its best call), as NMS does with IoU; then the calls left that chain side by side on one defect
    (:data:`CHAIN_IOS`, :data:`CHAIN_AREA`) become their best call, its box the one around them all. Only calls scoring
    at least ``floor`` take part (the weights' operating point: below it the ranking mAP reads is left as it was, other
    classes' hypotheses included).

    ``detections``: ``boxes`` float ``[K, 4]`` xyxy (any one pixel frame), ``scores`` ``[K]``, ``labels`` int64
    ``[K]``; returns the kept calls (same keys, sorted by score; equal scores keep their given order) and how many
    were merged into them. An absorbed call absorbs nothing, so a large low box over two defects never joins them."""
    scores = detections["scores"]
    order = torch.argsort(scores, descending=True, stable=True)
    calls = {k: v[order] for k, v in detections.items()}
    taking = int((calls["scores"] >= floor).sum())
    if taking < 2:
        return calls, 0
    keep = torch.ones(len(order), dtype=torch.bool)
    boxes = calls["boxes"].clone()
    while True:  # a chain's grown box may hold calls it did not before: nest and chain again until nothing changes
        before = int(keep.sum())
        taken = keep[:taking].nonzero().flatten()
        linked = intersection_over_smaller(boxes[taken]) > ios
        for a in range(len(taken)):
            if keep[taken[a]]:
                keep[taken[a + 1 :][linked[a, a + 1 :]]] = False
        taken = keep[:taking].nonzero().flatten()
        for group in _chains(boxes[taken]):
            members = taken[group]
            boxes[members[0], :2] = boxes[members, :2].amin(0)
            boxes[members[0], 2:] = boxes[members, 2:].amax(0)
            keep[members[1:]] = False
        if int(keep.sum()) == before:
            break
    calls["boxes"] = boxes
    return {k: v[keep] for k, v in calls.items()}, int((~keep).sum())


def postprocess(
    decoded: torch.Tensor,
    metas: Sequence[LetterboxMeta | None],
    conf: float = 0.25,
    iou: float = 0.5,
    max_det: int = 100,
    cross_class_iou: float | None = None,
    cross_class_factor: float = 0.25,
    merge: tuple[float, float] | None = None,
) -> list[dict[str, torch.Tensor]]:
    """Score threshold, per-class NMS, optional cross-class suppression, top-k, and un-letterboxing.

    ``decoded``: ``[B, A, 4 + C]`` from :func:`decode` (or the exported model).
    Every (location, class) pair scoring above ``conf`` is a candidate, so one
    location may propose several classes; with ``cross_class_iou`` set, :func:`demote_cross_class` then
    multiplies the score of each that overlaps a higher-scored call of another class by ``cross_class_factor``
    (after NMS, before top-k; None: off, as before v2), and a call demoted to ``conf`` or below is dropped. With
    ``merge`` ``(ios, floor)`` set, :func:`merge_nested` then makes the calls scoring ``floor`` or more on one defect
    one (None: off, as before v0.14).
    ``metas[i]`` maps boxes back to the original image; ``None`` keeps input pixels. Returns one dict per image:
    ``boxes`` float32 ``[K, 4]`` xyxy in original-image pixels, ``scores``
    float32 ``[K]``, ``labels`` int64 ``[K]`` in 0..C-1, sorted by score. Boxes that
    lie wholly in the letterbox padding (zero area once clipped) are dropped.
    """
    results = []
    for pred, meta in zip(decoded, metas):
        boxes, scores = pred[:, :4], pred[:, 4:]
        anchor_idx, labels = (scores > conf).nonzero(as_tuple=True)
        cand_scores = scores[anchor_idx, labels]
        if cand_scores.numel() > PRE_NMS_TOPK:
            cand_scores, order = cand_scores.topk(PRE_NMS_TOPK)
            anchor_idx, labels = anchor_idx[order], labels[order]
        cand_boxes = boxes[anchor_idx]
        keep = batched_nms(cand_boxes, cand_scores, labels, iou)
        out_boxes, out_scores, out_labels = cand_boxes[keep], cand_scores[keep], labels[keep]
        if cross_class_iou is not None:
            calls = {"boxes": out_boxes, "scores": out_scores, "labels": out_labels}
            calls = demote_and_drop(calls, conf, cross_class_iou, cross_class_factor)
            out_boxes, out_scores, out_labels = calls["boxes"], calls["scores"], calls["labels"]
        if merge is not None:
            calls, _ = merge_nested({"boxes": out_boxes, "scores": out_scores, "labels": out_labels}, *merge)
            out_boxes, out_scores, out_labels = calls["boxes"], calls["scores"], calls["labels"]
        if meta is not None:
            out_boxes = boxes_from_letterbox(out_boxes, meta)
            inside = remove_small_boxes(out_boxes, MIN_SIDE)  # a box wholly in the padding clips to zero area
            out_boxes, out_scores, out_labels = out_boxes[inside], out_scores[inside], out_labels[inside]
        out_boxes, out_scores, out_labels = out_boxes[:max_det], out_scores[:max_det], out_labels[:max_det]
        results.append({"boxes": out_boxes.float(), "scores": out_scores.float(), "labels": out_labels.long()})
    return results
