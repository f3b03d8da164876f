"""The boards teach makes (jobs/teach_sets.py): crops of a large golden image, a deadline, checks before any work."""

import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from defect_detector.data.images import load_image_gray
from defect_detector.jobs.teach_sets import (
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


def test_a_binarized_design_is_captured_as_its_line_thresholds_and_predict_refuses_none_of_its_captures(tmp_path: Path) -> None:
    """Issue 56: ``teach`` on a DeepPCB golden image refused its own captures ("dark occluder or shadow over 35% of
    the board"): a light gradient over a binarized board is not what its line delivers. A binarized line's design is
    captured thresholded (before any JPEG), so the prepare stage takes every capture; a photograph is not thresholded."""
    from defect_detector.inspect.inspector import Inspector
    from defect_detector.looks.render import render_pair, sample_look
    from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS

    golden = SAMPLES / "golden" / "92000000_test.jpg"
    (design,) = read_designs([golden])
    rng = np.random.default_rng(8)
    layout = load_image_gray(golden)
    cv2.imwrite(str(tmp_path / "photo.png"), render_pair(layout, layout, sample_look(rng, "holdout"), rng, strength=0.0)[1])
    assert design.binarized and not read_designs([tmp_path / "photo.png"])[0].binarized
    boards = [b for _, b, *_ in clean_pairs([design], 4, np.random.default_rng(0))]
    boards += [b for _, b, *_ in painted_pairs([design], 2, np.random.default_rng(1), "held")]
    for board in boards:  # two levels, but for JPEG's ringing on some
        assert ((board < 40) | (board > 215)).mean() > 0.97
    with Inspector.load(DEFAULT_REFERENCE_WEIGHTS, reference=golden, device="cpu", threads=1, monitor=False) as inspector:
        refused = [r.reason for r in (inspector.inspect(b, name=f"{i}.png") for i, b in enumerate(boards)) if r.detections is None]
    assert refused == []
