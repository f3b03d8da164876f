import math

import torch

from defect_detector.core.types import LetterboxMeta
from defect_detector.model.postprocess import decode, decode_boxes, make_anchor_points, postprocess


def test_anchor_points_order_and_centres() -> None:
    points, strides = make_anchor_points(64, 32, (8, 16, 32))
    assert points.shape == (8 * 4 + 4 * 2 + 2 * 1, 2)
    assert points[0].tolist() == [4.0, 4.0] and points[1].tolist() == [12.0, 4.0]  # row-major: x runs first
    assert points[4].tolist() == [4.0, 12.0]
    assert strides[:32].eq(8).all() and strides[32:40].eq(16).all() and strides[40:].eq(32).all()


def test_decode_known_answer() -> None:
    points = torch.tensor([[100.0, 50.0]])
    strides = torch.tensor([8.0])
    raw = torch.full((1, 1, 4), math.log(math.expm1(2.0)))  # softplus(raw) = 2 -> 16 px at stride 8
    assert decode_boxes(raw, points, strides).tolist() == [[[84.0, 34.0, 116.0, 66.0]]]


def _decoded(boxes: list[list[float]], scores: list[list[float]]) -> torch.Tensor:
    return torch.cat((torch.tensor(boxes), torch.tensor(scores)), dim=-1)[None]  # [1, A, 4 + C]


def test_postprocess_threshold_nms_and_unletterbox() -> None:
    decoded = _decoded(
        [[10, 10, 50, 50], [11, 11, 51, 51], [200, 200, 240, 240], [300, 300, 310, 310]],
        [[0.9, 0.0], [0.8, 0.0], [0.1, 0.7], [0.01, 0.02]],
    )
    meta = LetterboxMeta(scale=0.5, pad_x=0.0, pad_y=20.0, orig_h=1000, orig_w=2000)
    (out,) = postprocess(decoded, [meta], conf=0.25, iou=0.5)
    assert out["labels"].tolist() == [0, 1]  # the overlapping duplicate is suppressed, the low scores dropped
    torch.testing.assert_close(out["boxes"], torch.tensor([[20.0, -20.0, 100.0, 60.0], [400.0, 360.0, 480.0, 440.0]]).clamp(min=0))
    assert out["scores"].tolist() == sorted(out["scores"].tolist(), reverse=True)


def test_postprocess_multi_label_and_empty() -> None:
    decoded = _decoded([[0, 0, 20, 20]], [[0.6, 0.5]])
    (out,) = postprocess(decoded, [None], conf=0.3, iou=0.5)
    assert sorted(out["labels"].tolist()) == [0, 1]  # different classes are not suppressed
    (empty,) = postprocess(decoded, [None], conf=0.9, iou=0.5)
    assert empty["boxes"].shape == (0, 4) and empty["labels"].dtype == torch.int64


def test_decode_probabilities() -> None:
    raw = torch.zeros(2, 3, 4 + 2)
    points, strides = torch.zeros(3, 2), torch.full((3,), 8.0)
    out = decode(raw, points, strides)
    assert out.shape == (2, 3, 6) and torch.allclose(out[..., 4:], torch.full((2, 3, 2), 0.5))


def test_postprocess_drops_boxes_wholly_in_padding() -> None:
    # Canvas rows 0..20 are padding (pad_y=20): the first box lies entirely above the image.
    decoded = _decoded([[10, 2, 30, 18], [10, 30, 30, 50]], [[0.9], [0.8]])
    meta = LetterboxMeta(scale=1.0, pad_x=0.0, pad_y=20.0, orig_h=100, orig_w=100)
    (out,) = postprocess(decoded, [meta], conf=0.25, iou=0.5, max_det=1)
    assert out["boxes"].tolist() == [[10.0, 10.0, 30.0, 30.0]]  # max_det counts real detections only
    assert out["scores"].tolist() == [0.800000011920929]


def test_cross_class_suppression_demotes_the_lower_class_only() -> None:
    from defect_detector.model.postprocess import demote_cross_class

    boxes = torch.tensor([[0, 0, 10, 10], [1, 0, 11, 10], [0, 0, 10, 10], [50, 50, 60, 60]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.5, 0.4, 0.3])
    labels = torch.tensor([0, 1, 0, 1])
    got = demote_cross_class(boxes, scores, labels, 0.3, 0.25)
    # 1 overlaps the higher-scored 0 of another class: demoted; 2 overlaps 0 (its own class: no matter) and the
    # higher-scored 1 of another class: demoted (by original scores); 3 overlaps nothing
    torch.testing.assert_close(got, torch.tensor([0.9, 0.125, 0.1, 0.3]))
    assert torch.equal(demote_cross_class(boxes, scores, labels, 0.3, 1.0), scores)


def test_postprocess_cross_class_one_call_per_defect() -> None:
    decoded = torch.zeros(1, 3, 4 + 2)
    decoded[0, :, :4] = torch.tensor([[10, 10, 30, 30], [11, 10, 31, 30], [100, 100, 120, 120]], dtype=torch.float32)
    decoded[0, 0, 4], decoded[0, 1, 5], decoded[0, 2, 5] = 0.9, 0.6, 0.5
    plain = postprocess(decoded, [None], conf=0.25, iou=0.6)[0]
    assert plain["labels"].tolist() == [0, 1, 1]
    ranked = postprocess(decoded, [None], conf=0.1, iou=0.6, cross_class_iou=0.3, cross_class_factor=0.25)[0]
    assert ranked["labels"].tolist() == [0, 1, 1]  # demoted, still ranked (for mAP) above the threshold
    torch.testing.assert_close(ranked["scores"], torch.tensor([0.9, 0.5, 0.15]))
    assert ranked["boxes"][2].tolist() == [11, 10, 31, 30]
    one = postprocess(decoded, [None], conf=0.25, iou=0.6, cross_class_iou=0.3, cross_class_factor=0.25)[0]
    assert one["labels"].tolist() == [0, 1]  # demoted below the line's threshold: one call for the defect
    torch.testing.assert_close(one["scores"], torch.tensor([0.9, 0.5]))


def test_intersection_over_smaller_is_one_for_a_box_inside_another() -> None:
    from defect_detector.model.postprocess import intersection_over_smaller

    boxes = torch.tensor([[0, 0, 40, 40], [10, 10, 20, 20], [30, 0, 50, 10], [100, 100, 110, 110]], dtype=torch.float32)
    got = intersection_over_smaller(boxes)
    torch.testing.assert_close(got[0, 1], torch.tensor(1.0))  # IoU 0.0625, but wholly inside
    torch.testing.assert_close(got[0, 2], torch.tensor(0.5))  # half of the smaller box overlaps
    assert got[0, 3] == 0 and torch.equal(got, got.T)


def test_nested_calls_on_one_defect_become_one() -> None:
    from defect_detector.model.postprocess import merge_nested

    calls = {
        "boxes": torch.tensor([[10, 10, 20, 20], [0, 0, 40, 40], [100, 100, 110, 110], [5, 5, 45, 12]], dtype=torch.float32),
        "scores": torch.tensor([0.5, 0.8, 0.7, 0.3]),
        "labels": torch.tensor([0, 1, 0, 2]),
    }
    one, merged = merge_nested(calls, 0.6)
    # the inner box (another class, lower score) and the strip mostly inside the outer box are merged into it;
    # the call 60 px away stays
    assert merged == 2
    assert one["boxes"].tolist() == [[0, 0, 40, 40], [100, 100, 110, 110]]
    assert one["labels"].tolist() == [1, 0] and one["scores"].tolist() == [0.800000011920929, 0.699999988079071]
    assert merge_nested(calls, 0.9)[0]["scores"].tolist() == [0.800000011920929, 0.699999988079071, 0.30000001192092896]


def test_an_absorbed_call_joins_nothing_and_calls_below_the_floor_stay() -> None:
    from defect_detector.model.postprocess import merge_nested

    # two defects 40 px apart under one large, lower-scored box: the box is merged into the first, the second stays
    boxes = torch.tensor([[0, 0, 10, 10], [40, 0, 50, 10], [0, 0, 50, 10], [2, 2, 8, 8]], dtype=torch.float32)
    calls = {"boxes": boxes, "scores": torch.tensor([0.9, 0.8, 0.5, 0.1]), "labels": torch.tensor([0, 0, 1, 2])}
    kept, merged = merge_nested(calls, 0.7, floor=0.2)
    assert merged == 1 and kept["boxes"].tolist() == [[0, 0, 10, 10], [40, 0, 50, 10], [2, 2, 8, 8]]  # 0.1 < floor
    assert merge_nested(calls, 0.7)[0]["boxes"].tolist() == [[0, 0, 10, 10], [40, 0, 50, 10]]


def test_calls_side_by_side_on_one_defect_chain_into_one_around_them() -> None:
    """Issue 55 item 6: three calls of any class along one long defect, each overlapping the next by half, become the
    best one with the box around all three; a call 60 px away stays, and so does a box five times larger that overlaps
    one of them by half (no chain across scales)."""
    from defect_detector.model.postprocess import merge_nested

    boxes = torch.tensor([[0, 0, 20, 10], [10, 0, 30, 10], [20, 0, 40, 10], [100, 0, 120, 10]], dtype=torch.float32)
    calls = {"boxes": boxes, "scores": torch.tensor([0.6, 0.9, 0.5, 0.8]), "labels": torch.tensor([0, 1, 2, 0])}
    one, merged = merge_nested(calls, 0.7)
    assert merged == 2 and one["scores"].tolist() == [0.8999999761581421, 0.800000011920929]
    assert one["boxes"].tolist() == [[0, 0, 40, 10], [100, 0, 120, 10]] and one["labels"].tolist() == [1, 0]
    apart = {"boxes": torch.tensor([[0, 0, 20, 10], [10, 0, 60, 20]], dtype=torch.float32), "scores": torch.tensor([0.9, 0.5])}
    assert merge_nested(apart | {"labels": torch.tensor([0, 1])}, 0.7)[1] == 0


def test_postprocess_merges_nested_calls_after_nms() -> None:
    decoded = torch.zeros(1, 2, 4 + 2)
    decoded[0, :, :4] = torch.tensor([[0, 0, 40, 40], [10, 10, 20, 20]], dtype=torch.float32)
    decoded[0, 0, 4], decoded[0, 1, 4] = 0.9, 0.6  # one class: IoU 0.06 survives NMS
    assert len(postprocess(decoded, [None], conf=0.25, iou=0.5)[0]["scores"]) == 2
    assert postprocess(decoded, [None], conf=0.25, iou=0.5, merge=(0.6, 0.0))[0]["boxes"].tolist() == [[0, 0, 40, 40]]
