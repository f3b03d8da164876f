import torch

from defect_detector.core.config import ModelConfig
from defect_detector.model.detector import build_model
from defect_detector.model.loss import DetectionLoss, quality_focal_loss, task_aligned_assign
from defect_detector.model.postprocess import make_anchor_points


def _targets(*boxes: list[float]) -> dict:
    return {"boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4), "labels": torch.zeros(len(boxes), dtype=torch.int64)}


def test_loss_finite_with_empty_targets_and_backward() -> None:
    model = build_model(ModelConfig(widths=(16, 32, 48, 64), depths=(1, 1, 1, 1), neck_channels=32), num_classes=6)
    points, strides = make_anchor_points(128, 128, model.strides)
    raw = model(torch.rand(2, 1, 128, 128))
    loss, parts = DetectionLoss(6)(raw, [_targets(), _targets()], points, strides)
    assert torch.isfinite(loss) and parts["num_fg"] == 0 and parts["box"] == 0.0
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


def test_loss_mixed_batch_is_finite() -> None:
    model = build_model(ModelConfig(widths=(16, 32, 48, 64), depths=(1, 1, 1, 1), neck_channels=32), num_classes=6)
    points, strides = make_anchor_points(128, 128, model.strides)
    raw = model(torch.rand(2, 1, 128, 128))
    loss, parts = DetectionLoss(6)(raw, [_targets([10, 10, 40, 30], [60, 60, 100, 120]), _targets()], points, strides)
    assert torch.isfinite(loss) and parts["num_fg"] > 0 and parts["box"] > 0


def test_assigner_positives_lie_inside_their_box() -> None:
    points, _ = make_anchor_points(64, 64, (8,))
    gt = torch.tensor([[8.0, 8.0, 40.0, 24.0], [30.0, 30.0, 60.0, 60.0]])
    pred_boxes = torch.cat((points - 10, points + 10), dim=1)
    scores = torch.full((points.shape[0], 2), 0.5)
    result = task_aligned_assign(scores, pred_boxes, points, gt, torch.tensor([0, 1]), topk=4)
    fg = result.foreground
    assert 0 < fg.sum() <= 8
    for idx in fg.nonzero().flatten().tolist():
        box = result.target_boxes[idx]
        x, y = points[idx].tolist()
        assert box[0] < x < box[2] and box[1] < y < box[3]
        label = result.target_scores[idx].argmax()
        assert result.target_scores[idx, label] > 0
    assert result.target_scores[~fg].sum() == 0


def test_assigner_empty_ground_truth() -> None:
    points, _ = make_anchor_points(32, 32, (8,))
    result = task_aligned_assign(torch.rand(16, 3), torch.rand(16, 4), points, torch.zeros(0, 4), torch.zeros(0, dtype=torch.int64))
    assert not result.foreground.any() and result.target_scores.sum() == 0


def test_quality_focal_loss_is_minimal_at_target() -> None:
    target = torch.tensor([0.3])
    at_target = quality_focal_loss(torch.logit(target), target)
    away = quality_focal_loss(torch.logit(torch.tensor([0.8])), target)
    assert at_target.item() == 0.0 and away.item() > 0


def test_assigner_gives_tiny_boxes_their_nearest_point() -> None:
    points, _ = make_anchor_points(32, 32, (8,))  # centres at 4, 12, 20, 28
    gt = torch.tensor([[5.0, 5.0, 10.0, 10.0]])  # contains no centre
    pred_boxes = torch.cat((points - 4, points + 4), dim=1)
    result = task_aligned_assign(torch.full((16, 1), 0.5), pred_boxes, points, gt, torch.tensor([0]))
    assert result.foreground.sum() == 1 and points[result.foreground].tolist() == [[4.0, 4.0]]
