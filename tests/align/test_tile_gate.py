"""The difference gate of tiled frames: calls stand where the frame and its golden image differ, and only there."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from defect_detector.align.tile_gate import at_scale, box_counts, difference_map, gate_tiled, keep_differing
from defect_detector.data.tiles import plan_tiles


def _panel() -> np.ndarray:
    """A 400x600 frame: two boards (white substrate, black tracks and pads) on white bare substrate."""
    golden = np.full((400, 600), 255, np.uint8)
    for x0 in (20, 320):  # two boards of 260 x 360 px
        for k in range(6):
            golden[30:370, x0 + 20 + 40 * k : x0 + 32 + 40 * k] = 0  # vertical tracks, 12 px wide, cut by the board's edge
        golden[150:190, x0 + 100 : x0 + 150] = 0  # a pad
    return golden


def _dets(*rows: tuple[float, float, float, float, float, int]) -> dict[str, torch.Tensor]:
    data = torch.tensor([r[:5] for r in rows], dtype=torch.float32).reshape(-1, 5)
    return {"boxes": data[:, :4], "scores": data[:, 4], "labels": torch.tensor([r[5] for r in rows], dtype=torch.int64)}


def test_difference_map_finds_defects_and_ignores_registration_residue() -> None:
    golden = _panel()
    shifted = np.roll(golden, 1, axis=1)  # one pixel off: a registration residue, not a defect
    assert not difference_map(golden, shifted).any()
    image = golden.copy()
    image[100:112, 220:232] = 0  # a copper blob on substrate (12 px)
    image[250:252, 340:352] = 255  # an open: a track cut by a 2 px gap (thin, as some of DeepPCB's are)
    differs = difference_map(golden, image)
    assert differs[100:112, 220:232].all()
    assert differs[250:252, 340:352].sum() >= 8
    assert differs.sum() == differs[100:112, 220:232].sum() + differs[250:252, 340:352].sum()  # nothing else


def test_box_counts_grow_and_clip() -> None:
    differs = np.zeros((50, 80), bool)
    differs[10:20, 10:20] = True
    boxes = torch.tensor([[10.0, 10.0, 20.0, 20.0], [20.5, 10.0, 30.0, 20.0], [-5.0, -5.0, 200.0, 200.0], [60.0, 30.0, 70.0, 40.0]])
    assert box_counts(differs, boxes, grow=0).tolist() == [100, 0, 100, 0]
    assert box_counts(differs, boxes, grow=2).tolist() == [100, 20, 100, 0]  # the second box, grown, reaches 2 columns


def test_gate_keeps_calls_on_defects_and_drops_calls_where_both_images_agree() -> None:
    golden = _panel()
    image = golden.copy()
    image[100:112, 220:232] = 0  # the one defect
    calls = _dets(
        (14.0, 100.0, 40.0, 160.0, 0.9, 0),  # along the first board's left edge, tracks cut by it: no difference
        (218.0, 98.0, 234.0, 114.0, 0.8, 4),  # the defect
        (280.0, 0.0, 330.0, 40.0, 0.7, 1),  # on the bare substrate between the boards
        (222.0, 102.0, 230.0, 110.0, 0.6, 1),  # inside the defect
    )
    kept = keep_differing(calls, image, golden)
    assert kept["scores"].tolist() == pytest.approx([0.8, 0.6]) and kept["labels"].tolist() == [4, 1]
    assert kept["boxes"].tolist() == [[218.0, 98.0, 234.0, 114.0], [222.0, 102.0, 230.0, 110.0]]
    assert keep_differing(calls, golden, golden)["boxes"].shape == (0, 4)  # a flawless board: no call stands
    empty = _dets()
    assert keep_differing(empty, image, golden) is empty



def test_the_gate_measures_a_frame_at_its_tiles_scale() -> None:
    """A panel shown at 2x (a working scale of 2: 1280 px tiles into 640 px inputs) keeps the calls the panel keeps at
    1x, boxes twice as large; measured in the 2x pixels instead, the gate's 2 px tolerance and 8 px minimum are half
    as large on the board and a 1 px step the 1x gate ignores (a thin sliver) counts, so a call on it would stand."""
    golden = _panel()
    image = golden.copy()
    image[100:112, 220:232] = 0  # the one defect
    image[300, 100:200] = 255  # a 1 px line across a track: below the gate's sliver at 1x
    calls = _dets((218.0, 98.0, 234.0, 114.0, 0.8, 4), (95.0, 296.0, 125.0, 304.0, 0.7, 0))
    big_image, big_golden = (cv2.resize(a, None, fx=2.0, fy=2.0, interpolation=cv2.INTER_NEAREST) for a in (image, golden))
    big_calls = {**calls, "boxes": calls["boxes"] * 2.0}
    at_1x = keep_differing(calls, image, golden)
    assert at_1x["scores"].tolist() == pytest.approx([0.8])
    record = plan_tiles(*big_image.shape, 1280, 192)
    at_2x = gate_tiled(big_calls, big_image, big_golden, record, imgsz=640)
    assert at_2x["scores"].tolist() == pytest.approx([0.8]) and at_2x["boxes"].tolist() == [[436.0, 196.0, 468.0, 228.0]]
    assert keep_differing(big_calls, big_image, big_golden)["scores"].tolist() == pytest.approx([0.8, 0.7])  # at 2x px
    assert gate_tiled(big_calls, big_image, None, record, 640) is big_calls and gate_tiled(calls, image, golden, None, 640) is calls
    shrunk, _, boxes = at_scale(big_image, big_golden, big_calls["boxes"], 0.5)
    assert np.array_equal(shrunk, image) and torch.equal(boxes, calls["boxes"])


def test_bad_images_raise() -> None:
    golden = _panel()
    with pytest.raises(ValueError, match="one shape"):
        difference_map(golden, golden[:, :500])
    with pytest.raises(ValueError, match="golden: expected uint8"):
        difference_map(golden.astype(np.float32), golden)
    with pytest.raises(ValueError, match="image: expected uint8"):
        difference_map(golden, np.dstack([golden, golden]))


def test_the_golden_images_thin_border_line_is_not_a_difference() -> None:
    """DeepPCB's golden images carry a dark border line, 1-4 px wide, that their boards lack: on a panel it runs along
    each board's edge against bare substrate. It does not count; a 12 px track that the board lacks does."""
    golden = _panel()
    golden[30:370, 276:279] = 0  # the first board's right border, 3 px wide
    image = _panel()
    assert difference_map(golden, image, line_px=0)[30:370, 276:279].all()  # the plain map sees it
    assert not difference_map(golden, image).any()
    calls = _dets((268.0, 100.0, 284.0, 160.0, 0.9, 0))  # along that edge
    assert keep_differing(calls, image, golden)["boxes"].shape == (0, 4)
    image[100:140, 80:92] = 255  # an open: the board lacks 40 px of a 12 px track
    assert difference_map(golden, image)[102:138, 80:92].all()  # (2 px of tolerance at its ends)
    golden[30:370, 400:403] = 0  # a thin straight dark line the board lacks, over 64 px long, reads as a border too
    assert not difference_map(golden, image)[30:370, 400:403].any()
