"""Photograph-like datasets on disk (data/photo_sets.py) and `synth --render / --golden`."""

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from defect_detector.cli.main import main
from defect_detector.data.photo_sets import golden_files, write_painted_set
from defect_detector.data.synth import generate_board_pair


def _deeppcb_like(root: Path, n: int = 3) -> Path:
    """A DeepPCB-like json: binarized boards, each with its template as ``reference``."""
    images, annotations = [], []
    for i in range(n):
        board, golden, boxes, labels = generate_board_pair(256, 256, np.random.default_rng(i))
        cv2.imwrite(str(root / f"b{i}.png"), board)
        cv2.imwrite(str(root / f"g{i}.png"), golden)
        images.append({"id": i + 1, "file_name": f"b{i}.png", "reference": f"g{i}.png", "width": 256, "height": 256})
        for box, label in zip(boxes.tolist(), labels.tolist()):
            bbox = [box[0], box[1], box[2] - box[0], box[3] - box[1]]
            entry = {"id": len(annotations) + 1, "image_id": i + 1, "category_id": label + 1, "bbox": bbox}
            annotations.append(entry | {"area": 1, "iscrowd": 0})
    categories = [{"id": k + 1, "name": name} for k, name in enumerate(["open", "short", "mousebite", "spur", "copper", "pin-hole"])]
    path = root / "pairs.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


def test_synth_render_writes_photograph_pairs_with_the_boxes_scaled(tmp_path: Path) -> None:
    src = _deeppcb_like(tmp_path)
    out = tmp_path / "photo"
    assert main(["synth", "--render", str(src), "--family", "holdout", "--paint", "2", "--scale", "2", "--out", str(out)]) == 0
    coco = json.loads((out / "annotations.json").read_text())
    original = json.loads(src.read_text())
    assert len(coco["images"]) == 3 and len(coco["annotations"]) > len(original["annotations"])
    first = coco["images"][0]
    board = cv2.imread(str(out / first["file_name"]), cv2.IMREAD_GRAYSCALE)
    golden = cv2.imread(str(out / first["reference"]), cv2.IMREAD_GRAYSCALE)
    assert board.shape == golden.shape == (512, 512) and first["width"] == 512
    assert len(np.unique(board)) > 20
    before = [a["bbox"] for a in original["annotations"] if a["image_id"] == 1]
    after = [a["bbox"] for a in coco["annotations"] if a["image_id"] == 1][: len(before)]
    assert np.allclose(np.array(after), 2 * np.array(before))


def test_synth_golden_paints_boards_on_each_golden_image(tmp_path: Path) -> None:
    folder = tmp_path / "golden"
    folder.mkdir()
    for i in range(2):
        cv2.imwrite(str(folder / f"design{i}.png"), generate_board_pair(256, 256, np.random.default_rng(10 + i))[1])
    out = tmp_path / "painted"
    assert main(["synth", "--golden", str(folder), "--n", "3", "--defects", "2", "--out", str(out)]) == 0
    coco = json.loads((out / "annotations.json").read_text())
    assert len(coco["images"]) == 6 and all(img["reference"].startswith("golden/") for img in coco["images"])
    assert 6 <= len(coco["annotations"]) <= 12


def test_bad_golden_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["synth", "--golden", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "no golden image there" in capsys.readouterr().err
    flat = tmp_path / "flat.png"
    cv2.imwrite(str(flat), np.full((64, 64), 80, np.uint8))
    assert main(["synth", "--golden", str(flat), "--out", str(tmp_path / "o")]) == 2
    assert "flat grey level" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no golden image"):
        write_painted_set(golden_files(tmp_path / "empty"), tmp_path / "o")
