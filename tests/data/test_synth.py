import json
from pathlib import Path

import numpy as np
import pytest

from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.data import synth
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.data.synth import generate_board, generate_board_pair, write_synthetic_dataset


def test_deterministic_for_a_seed() -> None:
    a = generate_board(640, 640, np.random.default_rng(5))
    b = generate_board(640, 640, np.random.default_rng(5))
    c = generate_board(640, 640, np.random.default_rng(6))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])


@pytest.mark.parametrize(("height", "width"), [(640, 640), (1536, 2048)])
@pytest.mark.parametrize("seed", range(4))
def test_boxes_inside_non_degenerate_and_cover_changed_pixels(height: int, width: int, seed: int) -> None:
    image, template, boxes, labels = generate_board_pair(height, width, np.random.default_rng(seed))
    assert image.shape == template.shape == (height, width) and image.dtype == np.uint8
    assert set(np.unique(image)) <= {0, 255}
    assert boxes.dtype == np.float32 and boxes.shape == (len(labels), 4) and labels.dtype == np.int64
    assert 3 <= len(labels) <= 8
    assert ((labels >= 0) & (labels < len(DEEPPCB_CLASSES))).all()
    scale = min(height, width) / 640
    sizes = boxes[:, 2:] - boxes[:, :2]
    assert (sizes >= 12 * scale - 1).all() and (sizes <= 60 * scale + 1).all()
    assert (boxes[:, :2] >= 0).all() and (boxes[:, 2] <= width).all() and (boxes[:, 3] <= height).all()
    changed = image != template
    covered = np.zeros_like(changed)
    for x1, y1, x2, y2 in boxes.astype(int):
        assert changed[y1:y2, x1:x2].sum() >= 4, "a defect box without a drawn defect"
        covered[y1:y2, x1:x2] = True
    assert not (changed & ~covered).any(), "changed pixels outside every box"


def test_all_defect_types_appear() -> None:
    labels = np.concatenate([generate_board(320, 320, np.random.default_rng(s))[2] for s in range(12)])
    assert set(labels.tolist()) == set(range(6))


def test_defect_placement_gives_up_after_a_bounded_number_of_tries(monkeypatch: pytest.MonkeyPatch) -> None:
    # A board with no room for any defect (every drawer fails) must still come back, defect-free, after
    # 2 * target * _TRIES_PER_DEFECT attempts: generation time is bounded by the work, not by luck.
    calls: list[int] = []

    def no_room(image: np.ndarray, layout: object, rng: np.random.Generator) -> None:
        calls.append(1)

    monkeypatch.setattr(synth, "_DRAWERS", (no_room,) * len(synth._DRAWERS))
    image, template, boxes, labels = generate_board_pair(160, 160, np.random.default_rng(0), n_defects=(4, 4))
    assert len(calls) == 2 * 4 * synth._TRIES_PER_DEFECT
    assert boxes.shape == (0, 4) and labels.shape == (0,) and np.array_equal(image, template)


@pytest.mark.parametrize("count", [1, 5])
def test_board_has_the_asked_number_of_defects_when_there_is_room(count: int) -> None:
    for seed in range(3):
        _, boxes, labels = generate_board(640, 640, np.random.default_rng(seed), n_defects=(count, count))
        assert len(labels) == count and boxes.shape == (count, 4)


def test_write_synthetic_dataset(tmp_path: Path) -> None:
    path = write_synthetic_dataset(tmp_path / "synth", n_images=3, height=120, width=160, seed=1)
    assert path == tmp_path / "synth" / "annotations.json"
    coco = json.loads(path.read_text())
    assert [c["name"] for c in coco["categories"]] == list(DEEPPCB_CLASSES)
    assert len(list((tmp_path / "synth" / "images").glob("*.png"))) == 3
    ds = CocoDetectionDataset(path, None, DEEPPCB_CLASSES, 160, on_bad="error")
    assert len(ds) == 3 and sum(len(ds[i][1]["labels"]) for i in range(3)) == len(coco["annotations"])
    again = write_synthetic_dataset(tmp_path / "again", n_images=3, height=120, width=160, seed=1)
    assert json.loads(again.read_text())["annotations"] == coco["annotations"]
