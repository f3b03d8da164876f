"""core/capture.py: the one capture model (DESIGN.md "Captures"): its numbers, its factors applied together, a factor
alone or fixed, the geometry's maps and boxes, and seeded draws."""

from __future__ import annotations

import dataclasses

import cv2
import numpy as np
import pytest

from defect_detector.core.capture import (
    CAPTURE,
    FACTORS,
    GENTLE,
    Capture,
    CaptureGeometry,
    CaptureLight,
    CaptureModel,
    draw_capture,
    draw_geometry,
    named_model,
)

EVERY = dataclasses.replace(CAPTURE, defocus_p=1.0, jpeg_p=1.0)
"""A line's day with defocus and JPEG on every capture (each is on half of a line's captures)."""


def _board(shape: tuple[int, int] = (240, 320), seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    board = np.full(shape, 70, np.uint8)
    for _ in range(40):
        x, y = int(rng.integers(0, shape[1] - 20)), int(rng.integers(0, shape[0] - 20))
        size = rng.integers(4, 30, 2)
        cv2.rectangle(board, (x, y), (x + int(size[0]), y + int(size[1])), int(rng.integers(120, 230)), -1)
    return board


def test_the_defaults_are_designs_numbers() -> None:
    assert CAPTURE.shift == (-25.0, 25.0) and CAPTURE.degrees == (-1.5, 1.5) and CAPTURE.scale == (0.995, 1.005)
    assert CAPTURE.perspective == (0.0, 0.003) and CAPTURE.k1 == (-0.02, 0.02) and CAPTURE.bow == (0.0, 2.0)
    assert CAPTURE.gain == (0.85, 1.15) and CAPTURE.offset == (-10.0, 10.0) and CAPTURE.gamma == (0.85, 1.15)
    assert CAPTURE.gradient == (0.0, 0.12) and CAPTURE.defocus[1] == 1.2 and CAPTURE.noise == (0.0, 4.0) and CAPTURE.jpeg == (85, 95)
    assert GENTLE.shift == (-8.0, 8.0) and GENTLE.degrees == (-0.4, 0.4) and GENTLE.gain == (0.9, 1.1)
    assert GENTLE.scale == (1.0, 1.0) and GENTLE.perspective == (0.0, 0.0) and GENTLE.k1 == (0.0, 0.0) and GENTLE.bow == (0.0, 0.0)
    with pytest.raises(ValueError, match="scale must be a range"):
        CaptureModel(scale=(1.01, 0.99))


def test_every_factor_is_applied_together_and_the_geometry_is_recorded() -> None:
    board = _board()
    full = draw_capture(board.shape, np.random.default_rng(3), EVERY)
    geometry = full.geometry
    assert abs(geometry.scale - 1) > 1e-4 and geometry.perspective > 0.05 and geometry.k1 != 0 and geometry.bow_px > 0.1
    light = full.light
    assert light.gain != 1 and light.gamma != 1 and light.offset != 0 and light.gradient > 0
    assert light.defocus > 0 and light.noise > 0 and light.jpeg >= 85
    together = full.apply(board).astype(np.float32)
    for factor in FACTORS:  # a value given to only() is always applied: defocus and JPEG too
        alone = draw_capture(board.shape, np.random.default_rng(3), CaptureModel.only(**{factor: getattr(EVERY, factor)}))
        assert np.abs(together - alone.apply(board)).mean() > 1.0, f"{factor} alone gives the image of every factor"
    identity = CaptureModel.only()
    for factor in FACTORS:  # and each factor changes the image of every factor
        off = {factor: getattr(identity, factor)} | ({f"{factor}_p": 0.0} if factor in ("defocus", "jpeg") else {})
        without = draw_capture(board.shape, np.random.default_rng(3), dataclasses.replace(EVERY, **off)).apply(board)
        assert np.abs(together - without).mean() > 0.2, f"{factor} is not applied with the others"
    same = draw_geometry(board.shape, np.random.default_rng(3), CaptureModel.only("k1", "bow"))
    assert same.k1 == geometry.k1 and np.allclose(same.bow, geometry.bow)  # one seed draws one value of a factor


def test_a_factor_alone_or_at_a_fixed_value() -> None:
    rng = np.random.default_rng(0)
    scaled = draw_capture((300, 400), rng, CaptureModel.only(scale=(1.005, 1.005)))
    image = _board((300, 400))
    assert scaled.geometry.scale == pytest.approx(1.005, abs=1e-9) and np.array_equal(scaled.light.apply(image), image)
    assert scaled.geometry.perspective < 1e-6 and scaled.geometry.k1 == 0 and len(scaled.geometry.bow) == 0
    centre = np.array([[199.5, 149.5], [0.0, 0.0]])
    assert np.allclose(scaled.geometry.points(centre), [[199.5, 149.5], [199.5 - 1.005 * 199.5, 149.5 - 1.005 * 149.5]])
    assert named_model("scale-0.995").scale == (0.995, 0.995) and named_model("scale-0.995").gain == (1.0, 1.0)
    assert named_model("k1--0.02").k1 == (-0.02, -0.02) and named_model("scale").scale == CAPTURE.scale
    assert named_model("line") is CAPTURE and named_model("gentle") is GENTLE
    assert named_model("jpeg-85").jpeg_p == 1.0 and CaptureModel.only("jpeg").jpeg_p == CAPTURE.jpeg_p
    off = draw_capture((300, 400), np.random.default_rng(1), named_model("off"))
    assert np.array_equal(off.apply(image), image) and np.array_equal(CaptureLight().apply(image), image)
    for bad in ("zoom", "scale-x", "scale-2-3"):
        with pytest.raises(ValueError, match="give line, gentle"):
            named_model(bad)


@pytest.mark.parametrize("shape", [(150, 200), (480, 640)])
def test_points_and_maps_invert_each_other_within_a_hundredth_of_a_pixel(shape: tuple[int, int]) -> None:
    extreme = CaptureModel.only(
        shift=(25, 25), degrees=(1.5, 1.5), scale=(1.005, 1.005), perspective=(0.003, 0.003), k1=(0.02, 0.02), bow=(2, 2)
    )
    for model in (CAPTURE, extreme):
        geometry = draw_geometry(shape, np.random.default_rng(7), model)
        for margin in (0, 9):
            map_x, map_y = geometry.maps(margin)
            assert map_x.shape == (shape[0] + 2 * margin, shape[1] + 2 * margin) and map_x.dtype == np.float32
            ys, xs = np.mgrid[0 : map_x.shape[0] : 3, 0 : map_x.shape[1] : 3]
            sources = np.stack([map_x[ys, xs].ravel(), map_y[ys, xs].ravel()], 1).astype(np.float64)
            captured = np.stack([xs.ravel(), ys.ravel()], 1) - margin
            assert np.abs(geometry.points(sources) - captured).max() < 0.01
        fx, fy = geometry.forward_maps()
        ys, xs = np.mgrid[0 : shape[0] : 3, 0 : shape[1] : 3]
        source = np.stack([xs.ravel(), ys.ravel()], 1).astype(np.float64)
        assert np.abs(np.stack([fx[ys, xs].ravel(), fy[ys, xs].ravel()], 1) - geometry.points(source)).max() < 0.01
        assert np.abs(geometry.inverse(geometry.points(source)) - source).max() < 1e-4


def test_boxes_follow_the_geometry_and_those_mostly_out_of_the_frame_are_dropped() -> None:
    moved = CaptureGeometry.make((640, 640), shift=(30.0, -5.0))
    boxes, keep = moved.boxes(np.array([[10.0, 10, 30, 30], [600, 10, 630, 40]]))
    assert keep.tolist() == [True, False] and np.allclose(boxes[0], [40, 5, 60, 25])
    geometry = draw_geometry((480, 640), np.random.default_rng(2), CaptureModel.only(degrees=(1.5, 1.5), k1=(0.02, 0.02), bow=(2, 2)))
    box = np.array([[400.0, 300, 460, 340]])
    (around,), (kept,) = geometry.boxes(box)
    corners = geometry.points(np.array([[400.0, 300], [460, 300], [460, 340], [400, 340]]))
    assert kept and np.allclose(around, [*corners.min(0), *corners.max(0)], atol=0.5)
    board = np.zeros((480, 640), np.uint8)
    board[300:340, 400:460] = 255
    seen = Capture(geometry).apply(board)
    ys, xs = np.nonzero(seen > 127)
    assert abs(xs.min() - around[0]) <= 1.5 and abs(xs.max() + 1 - around[2]) <= 1.5 and abs(ys.min() - around[1]) <= 1.5


def test_seeded_draws_are_reproducible() -> None:
    board = _board()
    first, again = (draw_capture(board.shape, np.random.default_rng(11)) for _ in range(2))
    assert np.array_equal(first.apply(board), again.apply(board))
    assert not np.array_equal(first.apply(board), draw_capture(board.shape, np.random.default_rng(12)).apply(board))


def test_seen_back_puts_the_board_where_it_was_and_reports_the_uncovered_band() -> None:
    board = _board()
    model = CaptureModel.only(shift=(20, 20), degrees=(1.0, 1.0), k1=(0.02, 0.02), bow=(2, 2))
    capture = draw_capture(board.shape, np.random.default_rng(5), model)
    back, uncovered = capture.seen_back(board)
    assert uncovered[:, -5:].all() and uncovered[-5:, :].all() and not uncovered[:150, :200].any()
    inside = ~cv2.dilate(uncovered.astype(np.uint8), np.ones((5, 5), np.uint8)).astype(bool)
    assert np.abs(back.astype(float) - board)[inside].mean() < 6  # two bilinear resamplings, nothing moved
    assert np.abs(capture.apply(board).astype(float) - board).mean() > 20  # captured, it moved
