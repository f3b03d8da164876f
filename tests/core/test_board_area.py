"""The board's own area (core/board_area.py): the board in an image, not the plain background round it."""

from pathlib import Path

import numpy as np

from defect_detector.core.board_area import board_area
from defect_detector.data.images import load_image_gray

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def _golden(i: int) -> np.ndarray:
    return load_image_gray(SAMPLES / "golden" / sorted((SAMPLES / "deeppcb").glob("*.jpg"))[i].name)


def test_a_scan_on_a_grey_frame_is_found_to_the_pixel_and_its_crop_is_the_scan() -> None:
    golden = _golden(0)
    canvas = np.full((1536, 2048), 128, np.uint8)
    canvas[400:1040, 700:1340] = golden
    area = board_area(canvas)
    assert not area.whole and area.box == (700, 400, 640, 640) and abs(area.share - 640 * 640 / (1536 * 2048)) < 0.01
    assert np.array_equal(area.crop(canvas), golden)


def test_a_board_that_fills_its_image_is_the_whole_image_even_with_blank_copper_at_an_edge() -> None:
    for i in range(4):  # binarized scans whose plain black or white reaches the image's edges
        golden = _golden(i)
        area = board_area(golden)
        assert area.whole and area.box == (0, 0, 640, 640)
    assert board_area(np.full((300, 400), 90, np.uint8)).whole  # a plain image: nothing to cut


def test_a_board_on_a_lit_table_is_its_textured_region() -> None:
    """A textured board on a light background with a gentle gradient (as a photograph on a table)."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:900, 0:1200]
    table = 200.0 + 12.0 * x / 1200 + rng.normal(0, 1.5, (900, 1200))
    board = 60.0 + 40.0 * (rng.random((400, 300)) > 0.5)
    table[250:650, 500:800] = board
    area = board_area(np.clip(table, 0, 255).astype(np.uint8))
    bx, by, bw, bh = area.box
    assert not area.whole and abs(bx - 500) <= 4 and abs(by - 250) <= 4 and abs(bw - 300) <= 8 and abs(bh - 400) <= 8
