"""Tiling: plans that cover the frame, crops that round-trip, and the merge of tile detections into frame pixels."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from defect_detector.core.constants import PAD_VALUE as TILE_PAD_VALUE
from defect_detector.core.types import TileRecord
from defect_detector.data.tiles import crop_tiles, merge_tile_detections, plan_tiles, pool_tile_stats
from defect_detector.model.postprocess import demote_and_drop


def _dets(*rows: tuple[float, float, float, float, float, int]) -> dict[str, torch.Tensor]:
    """Detections in tile pixels from ``(x1, y1, x2, y2, score, label)`` rows."""
    data = torch.tensor([r[:5] for r in rows], dtype=torch.float32).reshape(-1, 5)
    return {"boxes": data[:, :4], "scores": data[:, 4], "labels": torch.tensor([r[5] for r in rows], dtype=torch.int64)}


NONE = _dets()


def test_plan_known_answer_for_a_production_frame() -> None:
    record = plan_tiles(1536, 2048, 640, 96)
    assert record.xs == (0, 469, 939, 1408) and record.ys == (0, 448, 896)
    assert len(record) == 12 and record.origins[:5] == [(0, 0), (469, 0), (939, 0), (1408, 0), (0, 448)]


@pytest.mark.parametrize(
    ("height", "width", "tile", "overlap"),
    [(1536, 2048, 640, 96), (640, 640, 640, 96), (641, 1281, 640, 96), (500, 700, 640, 96), (1000, 3000, 320, 0), (97, 1000, 100, 99)],
)
def test_plan_covers_the_frame_with_the_fewest_overlapping_tiles(height: int, width: int, tile: int, overlap: int) -> None:
    record = plan_tiles(height, width, tile, overlap)
    covered = np.zeros((height, width), bool)
    for x0, y0 in record.origins:
        covered[y0 : y0 + tile, x0 : x0 + tile] = True
    assert covered.all()
    for origins, length in ((record.xs, width), (record.ys, height)):
        assert origins[0] == 0
        if length <= tile:
            assert origins == (0,)
            continue
        assert origins[-1] == length - tile  # flush with the far edge
        steps = np.diff(origins)
        assert (steps > 0).all() and (tile - steps >= overlap).all()  # neighbours overlap by >= overlap
        assert steps.max() - steps.min() <= 1  # evenly spread
        assert tile + (len(origins) - 2) * (tile - overlap) < length  # one tile fewer would not cover it


def test_crops_round_trip_and_pad_small_frames() -> None:
    image = np.random.default_rng(0).integers(0, 256, (700, 1500), dtype=np.uint8)
    record = plan_tiles(700, 1500, 640, 96)
    crops = crop_tiles(image, record)
    assert len(crops) == len(record) and all(c.shape == (640, 640) and c.dtype == np.uint8 for c in crops)
    rebuilt = np.zeros_like(image)
    for crop, (x0, y0) in zip(crops, record.origins):
        rebuilt[y0 : y0 + 640, x0 : x0 + 640] = crop
    np.testing.assert_array_equal(rebuilt, image)
    small = image[:500, :300]
    (crop,) = crop_tiles(small, plan_tiles(500, 300, 640, 96))
    np.testing.assert_array_equal(crop[:500, :300], small)
    assert (crop[500:] == TILE_PAD_VALUE).all() and (crop[:, 300:] == TILE_PAD_VALUE).all()


# 1100 x 640 frame, tiles of 640: origins x 0 and 460 (overlap 180), one row.
WIDE = plan_tiles(640, 1100, 640, 96)


def test_box_cut_by_a_tile_edge_is_reported_once_whole() -> None:
    assert WIDE.xs == (0, 460) and WIDE.ys == (0,)
    # Defect at frame x 620..700: tile 0 sees its left 20 px (cut at its edge 640), tile 1 sees it whole at 160..240.
    # The cut part scores higher and overlaps the whole box by IoU 0.25 only: NMS alone would report both.
    cut, whole = (620.0, 100.0, 640.0, 160.0, 0.9, 3), (160.0, 100.0, 240.0, 160.0, 0.8, 3)
    merged = merge_tile_detections([_dets(cut), _dets(whole)], WIDE, iou=0.5, max_det=100)
    assert merged["boxes"].tolist() == [[620.0, 100.0, 700.0, 160.0]]
    assert merged["scores"].tolist() == pytest.approx([0.8]) and merged["labels"].tolist() == [3]
    # Mirrored: whole in tile 0 (x 480..530), cut at tile 1's left edge (frame 460) and seen as 460..530.
    merged = merge_tile_detections([_dets((480.0, 0.0, 530.0, 40.0, 0.7, 1)), _dets((0.0, 0.0, 70.0, 40.0, 0.9, 1))], WIDE, 0.5, 100)
    assert merged["boxes"].tolist() == [[480.0, 0.0, 530.0, 40.0]] and merged["scores"].tolist() == pytest.approx([0.7])


def test_box_at_a_corner_of_four_tiles_is_reported_once() -> None:
    record = plan_tiles(1100, 1100, 640, 96)  # 2 x 2 tiles at 0 and 460
    # Defect at frame 600..660 both ways: cut at the right and bottom edges of tile (0, 0), at the left edge of
    # tile (460, 0), at the top edge of tile (0, 460); whole only in tile (460, 460).
    per_tile = [
        _dets((600.0, 600.0, 640.0, 640.0, 0.9, 0)),
        _dets((140.0, 600.0, 200.0, 640.0, 0.9, 0)),
        _dets((600.0, 140.0, 640.0, 200.0, 0.9, 0)),
        _dets((140.0, 140.0, 200.0, 200.0, 0.6, 0)),
    ]
    merged = merge_tile_detections(per_tile, record, 0.5, 100)
    assert merged["boxes"].tolist() == [[600.0, 600.0, 660.0, 660.0]] and merged["scores"].tolist() == pytest.approx([0.6])


def test_defect_in_the_overlap_is_deduplicated_per_class() -> None:
    # Whole in both tiles (frame x 500..560); the second tile also holds another class at the same place.
    a, b = (500.0, 10.0, 560.0, 70.0, 0.6, 2), (40.0, 10.0, 100.0, 70.0, 0.7, 2)
    other = (40.0, 10.0, 100.0, 70.0, 0.5, 4)
    merged = merge_tile_detections([_dets(a), _dets(b, other)], WIDE, 0.5, 100)
    assert merged["boxes"].tolist() == [[500.0, 10.0, 560.0, 70.0]] * 2
    assert merged["scores"].tolist() == pytest.approx([0.7, 0.5]) and merged["labels"].tolist() == [2, 4]


def test_one_defect_on_a_seam_gives_one_call() -> None:
    """The frame pipeline's merge: tiles merged, then the weights' cross-class demotion across them (as in one image).
    Two tiles that see one defect as two classes give one call, whether both see it whole or one sees it cut."""
    # Whole in both tiles (frame x 500..560): tile 0 calls it class 2, tile 1 class 4 at a box 2 px lower.
    seen = [_dets((500.0, 10.0, 560.0, 70.0, 0.8, 2)), _dets((40.0, 12.0, 100.0, 72.0, 0.6, 4))]
    merged = merge_tile_detections(seen, WIDE, 0.5, 100)
    assert merged["labels"].tolist() == [2, 4]  # per-class NMS alone keeps both
    final = demote_and_drop(merged, 0.25, 0.5, 0.25)  # 0.6 x 0.25 = 0.15 <= conf 0.25: dropped
    assert final["labels"].tolist() == [2] and final["boxes"].tolist() == [[500.0, 10.0, 560.0, 70.0]]
    # Cut by tile 0's right edge (frame 640) and called class 0 there; whole in tile 1 (frame 620..700), class 3.
    cut = [_dets((620.0, 100.0, 640.0, 160.0, 0.9, 0)), _dets((160.0, 100.0, 240.0, 160.0, 0.7, 3))]
    final = demote_and_drop(merge_tile_detections(cut, WIDE, 0.5, 100), 0.25, 0.5, 0.25)
    assert final["labels"].tolist() == [3] and final["boxes"].tolist() == [[620.0, 100.0, 700.0, 160.0]]


def test_defect_longer_than_the_overlap_is_kept_in_parts() -> None:
    # Frame x 400..700 (300 px > the 180 px overlap): no tile sees it whole; each keeps its part. The parts overlap
    # by IoU 0.6, so NMS at 0.5 keeps the better one and NMS at 0.7 both, as documented.
    parts = [_dets((400.0, 0.0, 640.0, 50.0, 0.9, 0)), _dets((0.0, 0.0, 240.0, 50.0, 0.8, 0))]
    assert merge_tile_detections(parts, WIDE, 0.5, 100)["boxes"].tolist() == [[400.0, 0.0, 640.0, 50.0]]
    assert merge_tile_detections(parts, WIDE, 0.7, 100)["boxes"].tolist() == [[400.0, 0.0, 640.0, 50.0], [460.0, 0.0, 700.0, 50.0]]


def test_frame_border_is_not_a_tile_edge_and_padding_is_clipped() -> None:
    # Boxes touching the frame's own edges are whole defects; a tile reaching past a small frame clips its boxes.
    edges = [_dets((0.0, 0.0, 30.0, 640.0, 0.9, 0)), _dets((610.0, 600.0, 640.0, 640.0, 0.8, 1))]
    merged = merge_tile_detections(edges, WIDE, 0.5, 100)
    assert merged["boxes"].tolist() == [[0.0, 0.0, 30.0, 640.0], [1070.0, 600.0, 1100.0, 640.0]]
    small = plan_tiles(500, 300, 640, 96)
    merged = merge_tile_detections([_dets((280.0, 480.0, 330.0, 520.0, 0.9, 0), (400.0, 10.0, 450.0, 50.0, 0.8, 0))], small, 0.5, 100)
    assert merged["boxes"].tolist() == [[280.0, 480.0, 300.0, 500.0]]  # the second box lies wholly in the padding


def test_merge_sorts_by_score_and_keeps_max_det() -> None:
    per_tile = [_dets((10.0, 10.0, 20.0, 20.0, 0.3, 0), (100.0, 10.0, 120.0, 20.0, 0.9, 0)), _dets((300.0, 300.0, 320.0, 330.0, 0.6, 5))]
    merged = merge_tile_detections(per_tile, WIDE, 0.5, 2)
    assert merged["scores"].tolist() == pytest.approx([0.9, 0.6])
    assert merged["boxes"].tolist() == [[100.0, 10.0, 120.0, 20.0], [760.0, 300.0, 780.0, 330.0]]
    assert merged["boxes"].dtype == torch.float32 and merged["labels"].dtype == torch.int64
    empty = merge_tile_detections([NONE, NONE], WIDE, 0.5, 10)
    assert empty["boxes"].shape == (0, 4) and empty["scores"].shape == (0,) and empty["labels"].shape == (0,)


def test_pooled_tile_stats_are_those_of_all_tiles_together() -> None:
    activations = torch.randn(5, 3, 16, 16, dtype=torch.float64) * torch.tensor([1.0, 2.0, 0.5])[None, :, None, None] + 3.0
    flat = activations.flatten(2)  # [N tiles, L layers, values]
    per_tile = torch.stack((flat.mean(-1), flat.std(-1, unbiased=False)), dim=-1)  # [N, L, 2]
    pooled = pool_tile_stats(per_tile)
    everything = activations.transpose(0, 1).flatten(1)  # [L, N * values]
    want = torch.stack((everything.mean(-1), everything.std(-1, unbiased=False)), dim=-1).float()
    assert pooled.shape == (3, 2) and pooled.dtype == torch.float32
    torch.testing.assert_close(pooled, want)
    assert not torch.allclose(pooled[:, 1], per_tile[..., 1].mean(0).float())  # not just the mean of the stds


def test_bad_arguments_raise() -> None:
    for args in ((0, 10, 640, 96), (10, 0, 640, 96), (10, 10, 0, 0), (10, 10, 640, 640), (10, 10, 640, -1)):
        with pytest.raises(ValueError):
            plan_tiles(*args)
    with pytest.raises(ValueError, match="does not match"):
        crop_tiles(np.zeros((640, 1000), np.uint8), WIDE)
    with pytest.raises(ValueError, match="1 tiles, the plan has 2"):
        merge_tile_detections([NONE], WIDE, 0.5, 100)
    with pytest.raises(ValueError, match="iou"):
        merge_tile_detections([NONE, NONE], WIDE, 1.5, 100)
    with pytest.raises(ValueError, match="max_det"):
        merge_tile_detections([NONE, NONE], WIDE, 0.5, 0)
    assert isinstance(WIDE, TileRecord) and len(WIDE) == 2
