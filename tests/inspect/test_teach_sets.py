"""The boards teach makes (inspect/teach_sets.py): crops of a large golden image, a deadline, checks before any work."""

import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from defect_detector.inspect.teach_sets import (
    MIN_SIDE,
    VIEW_SIDE,
    clean_pairs,
    design_views,
    painted_pairs,
    read_designs,
    until,
)

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def test_a_large_golden_image_is_taught_on_its_busiest_crops() -> None:
    big = np.full((9000, 9000), 40, np.uint8)
    cv2.rectangle(big, (5000, 6000), (5900, 6900), 220, 9)  # the one place with tracks
    views = design_views(big)
    assert len(views) == 4 and all(v.shape == (VIEW_SIDE, VIEW_SIDE) for v in views)
    assert max(float(v.std()) for v in views) > 10  # the crop with the tracks is among them
    small = np.zeros((1500, 1200), np.uint8)
    assert design_views(small)[0] is small  # up to 1.5x VIEW_SIDE: whole


def test_a_golden_image_too_small_to_teach_is_refused_with_its_size(tmp_path: Path) -> None:
    cv2.imwrite(str(tmp_path / "tiny.png"), np.zeros((32, 48), np.uint8))
    with pytest.raises(ValueError, match=rf"48x32 px golden image is too small to teach \(needs at least {MIN_SIDE} px"):
        read_designs([tmp_path / "tiny.png"])
    (tmp_path / "broken.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(ValueError, match="broken.png: cannot teach it"):
        read_designs([tmp_path / "broken.png"])


def test_a_writer_stops_at_its_deadline_keeping_the_least_it_must() -> None:
    items = iter(range(100))
    assert list(until(items, time.perf_counter() - 1, least=3)) == [0, 1, 2]
    assert list(until(range(5), time.perf_counter() + 60, least=0)) == [0, 1, 2, 3, 4]


def test_captures_go_round_the_designs_and_painted_boxes_stay_on_the_board(tmp_path: Path) -> None:
    golden = SAMPLES / "golden"
    designs = read_designs(sorted(golden.glob("*.jpg"))[:2])
    line = np.random.default_rng(0)
    clean = list(clean_pairs(designs, 2, line))
    assert [c[0] for c in clean] == ["d00_clean000", "d01_clean000", "d00_clean001", "d01_clean001"]
    assert all(len(c[3]) == 0 and c[1].shape == c[2].shape for c in clean)
    painted = list(painted_pairs(designs, 3, line, "held"))
    assert sum(len(p[3]) for p in painted) >= 6
    for _, board, view, boxes, labels in painted:
        h, w = view.shape
        assert board.shape == view.shape and len(boxes) == len(labels)
        assert (boxes[:, 0] >= 0).all() and (boxes[:, 2] <= w).all() and (boxes[:, 1] >= 0).all() and (boxes[:, 3] <= h).all()
        assert ((boxes[:, 2:] - boxes[:, :2]) > 4).all()
