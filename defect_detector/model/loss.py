"""Task-aligned assignment and the detection loss.

Assigner: TOOD's task-aligned assigner (TAL). A location is a candidate for a
ground-truth box when its centre lies inside the box; among candidates the
``topk`` with the highest alignment ``score**alpha * iou**beta`` become
positives. It is dynamic (assignment follows what the model predicts) and,
unlike SimOTA, needs no per-image optimisation loop, which matters on a CPU;
unlike ATSS it couples classification and localisation quality, which is
what ranks boxes for mAP.

Loss: quality focal loss (GFL) on class logits against IoU-aware soft targets
(the normalised alignment), plus Complete-IoU box loss
(``torchvision.ops.complete_box_iou_loss``) weighted by the same targets.
Both are normalised by the sum of soft targets, so an image without defects
contributes only the (finite) negative classification term. A distribution box head
(``box_bins`` > 0, ``model.box_head: dfl``) adds GFL's distribution focal loss on each edge's
bins, weighted and normalised the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torchvision.ops import box_iou, complete_box_iou_loss

from defect_detector.core.boxes import xyxy_to_ltrb
from defect_detector.model.postprocess import decode_boxes


@dataclass(frozen=True)
class Assignment:
    """TAL result for one image with ``A`` locations and ``C`` classes.

    ``target_scores`` float32 ``[A, C]`` (soft, IoU-aware), ``target_boxes``
    float32 ``[A, 4]`` xyxy input pixels (valid where ``foreground``),
    ``foreground`` bool ``[A]``.
    """

    target_scores: torch.Tensor
    target_boxes: torch.Tensor
    foreground: torch.Tensor


@torch.no_grad()
def task_aligned_assign(
    pred_scores: torch.Tensor,
    pred_boxes: torch.Tensor,
    points: torch.Tensor,
    gt_boxes: torch.Tensor,
    gt_labels: torch.Tensor,
    topk: int = 10,
    alpha: float = 0.5,
    beta: float = 6.0,
) -> Assignment:
    """Assign ground truth to locations for one image.

    ``pred_scores`` ``[A, C]`` probabilities, ``pred_boxes`` ``[A, 4]`` xyxy,
    ``points`` ``[A, 2]``, ``gt_boxes`` ``[G, 4]`` xyxy, ``gt_labels`` int64 ``[G]``.
    """
    num_anchors, num_classes = pred_scores.shape
    device = pred_scores.device
    target_scores = torch.zeros(num_anchors, num_classes, device=device)
    target_boxes = torch.zeros(num_anchors, 4, device=device)
    foreground = torch.zeros(num_anchors, dtype=torch.bool, device=device)
    if gt_boxes.shape[0] == 0:
        return Assignment(target_scores, target_boxes, foreground)

    ious = box_iou(gt_boxes, pred_boxes).clamp_(min=0)  # [G, A]
    scores = pred_scores[:, gt_labels].T  # [G, A]
    x, y = points[:, 0], points[:, 1]
    inside = (x > gt_boxes[:, None, 0]) & (x < gt_boxes[:, None, 2]) & (y > gt_boxes[:, None, 1]) & (y < gt_boxes[:, None, 3])  # [G, A]
    # A box smaller than the finest stride may contain no anchor point: give it the nearest one.
    no_point = ~inside.any(1)  # [G]
    if no_point.any():
        centres = (gt_boxes[no_point, :2] + gt_boxes[no_point, 2:]) / 2  # [E, 2]
        inside[no_point.nonzero().squeeze(1), torch.cdist(centres, points).argmin(1)] = True
    align = scores.pow(alpha) * ious.pow(beta) * inside

    k = min(topk, num_anchors)
    top_idx = align.topk(k, dim=1).indices  # [G, k]
    candidate = torch.zeros_like(inside)
    candidate.scatter_(1, top_idx, True)
    candidate &= inside

    # A location claimed by several boxes keeps the one it overlaps most.
    claimed = candidate.sum(0) > 1  # [A]
    if claimed.any():
        best_gt = ious.argmax(0)  # [A]
        best = F.one_hot(best_gt, gt_boxes.shape[0]).T.bool()  # [G, A]
        candidate = torch.where(claimed[None], best & candidate.any(0, keepdim=True), candidate)

    foreground = candidate.any(0)  # [A]
    gt_index = candidate.float().argmax(0)  # [A]
    align = align * candidate
    max_align = align.amax(1, keepdim=True).clamp_(min=1e-9)  # [G, 1]
    max_iou = (ious * candidate).amax(1, keepdim=True)  # [G, 1]
    quality = (align / max_align * max_iou).amax(0)  # [A]

    target_boxes = gt_boxes[gt_index]
    target_scores[foreground, gt_labels[gt_index[foreground]]] = quality[foreground]
    return Assignment(target_scores, target_boxes, foreground)


def quality_focal_loss(logits: torch.Tensor, target_scores: torch.Tensor, beta: float = 2.0) -> torch.Tensor:
    """Quality focal loss (Li et al., GFL): BCE against soft targets, weighted by ``|sigmoid - target| ** beta``.

    ``logits``, ``target_scores``: float ``[..., C]``; returns the elementwise loss.
    """
    prob = logits.sigmoid()
    bce = F.binary_cross_entropy_with_logits(logits, target_scores, reduction="none")
    return bce * (prob - target_scores).abs().pow(beta)


def distribution_focal_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Distribution focal loss (Li et al., GFL): cross-entropy towards the two bins around a continuous target.

    ``logits`` float ``[N, 4, n]`` (a distribution over distances 0..n-1 per edge), ``target`` float ``[N, 4]``
    edge distances in the same units, clamped here to ``[0, n - 1.01]``. Returns ``[N]``: the mean over edges of
    ``CE(left) * (right - t) + CE(right) * (t - left)`` with ``left = floor(t)``, ``right = left + 1``.
    """
    bins = logits.shape[-1]
    target = target.clamp(0, bins - 1.01)
    left = target.long()
    weight_left = left.float() + 1 - target
    log_probs = logits.float().log_softmax(-1)  # [N, 4, n]
    ce_left = -log_probs.gather(-1, left[..., None]).squeeze(-1)
    ce_right = -log_probs.gather(-1, (left + 1)[..., None]).squeeze(-1)
    return (ce_left * weight_left + ce_right * (1 - weight_left)).mean(-1)


class DetectionLoss:
    """Loss over a batch of raw predictions.

    ``__call__(raw [B, A, 4 + C], targets, points [A, 2], strides [A])`` ->
    ``(total, parts)`` where ``targets`` is the list of per-image dicts
    (``boxes`` ``[N, 4]`` xyxy in input pixels, ``labels`` ``[N]``) and
    ``parts`` holds detached ``box``, ``cls``, ``dfl`` and ``num_fg`` values for logging. ``box_bins`` > 0: the raw
    predictions hold ``4 * box_bins`` distribution logits before the class logits (``[B, A, 4 * n + C]``), and the
    distribution focal loss (weight ``dfl_weight``) joins the CIoU loss.
    """

    def __init__(
        self,
        num_classes: int,
        box_weight: float = 2.0,
        cls_weight: float = 1.0,
        topk: int = 10,
        box_bins: int = 0,
        dfl_weight: float = 0.5,
    ) -> None:
        self.num_classes = num_classes
        self.box_weight = box_weight
        self.cls_weight = cls_weight
        self.topk = topk
        self.box_bins = box_bins
        self.dfl_weight = dfl_weight

    def __call__(
        self, raw: torch.Tensor, targets: Sequence[dict], points: torch.Tensor, strides: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, float]]:
        raw = raw.float()
        split = 4 * self.box_bins if self.box_bins else 4
        logits = raw[..., split:]  # [B, A, C]
        pred_boxes = decode_boxes(raw[..., :split], points, strides, self.box_bins)  # [B, A, 4]
        probs = logits.detach().sigmoid()

        assignments = [
            task_aligned_assign(
                probs[i],
                pred_boxes[i].detach(),
                points,
                t["boxes"].to(raw.device, torch.float32),
                t["labels"].to(raw.device),
                self.topk,
            )
            for i, t in enumerate(targets)
        ]
        target_scores = torch.stack([a.target_scores for a in assignments])  # [B, A, C]
        target_boxes = torch.stack([a.target_boxes for a in assignments])  # [B, A, 4]
        foreground = torch.stack([a.foreground for a in assignments])  # [B, A]
        normaliser = target_scores.sum().clamp(min=1.0)

        cls_loss = quality_focal_loss(logits, target_scores).sum() / normaliser
        if foreground.any():
            weight = target_scores.sum(-1)[foreground]  # [F]
            ciou = complete_box_iou_loss(pred_boxes[foreground], target_boxes[foreground], reduction="none")  # [F]
            box_loss = (ciou * weight).sum() / normaliser
            dfl_loss = self._dfl(raw[..., :split], target_boxes, foreground, weight, points, strides) / normaliser
        else:
            box_loss = pred_boxes.sum() * 0.0
            dfl_loss = box_loss
        total = self.box_weight * box_loss + self.cls_weight * cls_loss
        if self.box_bins:
            total = total + self.dfl_weight * dfl_loss
        parts = {
            "box": float(box_loss.detach()),
            "cls": float(cls_loss.detach()),
            "dfl": float(dfl_loss.detach()),
            "num_fg": float(foreground.sum()),
        }
        return total, parts

    def _dfl(
        self,
        raw_boxes: torch.Tensor,
        target_boxes: torch.Tensor,
        foreground: torch.Tensor,
        weight: torch.Tensor,
        points: torch.Tensor,
        strides: torch.Tensor,
    ) -> torch.Tensor:
        """Weighted sum of :func:`distribution_focal_loss` over the foreground (0 without a distribution head).

        ``raw_boxes`` ``[B, A, 4 * n]``, ``target_boxes`` ``[B, A, 4]`` xyxy input pixels, ``foreground`` bool
        ``[B, A]``, ``weight`` ``[F]``; targets become edge distances in units of each location's stride."""
        if not self.box_bins:
            return raw_boxes.sum() * 0.0
        batch_points = points.expand(raw_boxes.shape[0], -1, -1)[foreground]  # [F, 2]
        batch_strides = strides.expand(raw_boxes.shape[0], -1)[foreground][:, None]  # [F, 1]
        target = xyxy_to_ltrb(target_boxes[foreground], batch_points) / batch_strides  # [F, 4]
        logits = raw_boxes[foreground].unflatten(-1, (4, self.box_bins))  # [F, 4, n]
        return (distribution_focal_loss(logits, target) * weight).sum()
