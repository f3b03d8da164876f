"""The error-analysis gallery (engine/gallery.py): which boxes it shows, in what order, and that each crop holds its box."""

import contextlib
import io
import json
import re
from pathlib import Path

import cv2
import numpy as np
import torch
from pycocotools.coco import COCO

from defect_detector.engine import gallery
from defect_detector.engine.gallery import crop_window, write_gallery

NAMES = ("open", "short", "mousebite", "spur", "copper", "pin-hole")
H, W = 240, 320
GT = {  # image_id -> [(xyxy, label)]
    1: [((20, 30, 40, 44), 0), ((200, 100, 260, 130), 1)],
    2: [((300, 220, 318, 238), 3)],  # touching the image corner
}


def _coco() -> COCO:
    images = [{"id": i, "file_name": f"group1/{i:05d}_test.jpg", "width": W, "height": H} for i in GT]
    anns, k = [], 1
    for image_id, boxes in GT.items():
        for (x1, y1, x2, y2), label in boxes:
            anns.append(
                {"id": k, "image_id": image_id, "category_id": label + 1, "bbox": [x1, y1, x2 - x1, y2 - y1], "area": 1, "iscrowd": 0}
            )
            k += 1
    coco = COCO()
    coco.dataset = {"images": images, "annotations": anns, "categories": [{"id": i + 1, "name": n} for i, n in enumerate(NAMES)]}
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco


def _pred(rows: list[tuple[tuple[float, ...], float, int]]) -> dict[str, torch.Tensor]:
    return {
        "boxes": torch.tensor([r[0] for r in rows], dtype=torch.float32).reshape(-1, 4),
        "scores": torch.tensor([r[1] for r in rows], dtype=torch.float32),
        "labels": torch.tensor([r[2] for r in rows], dtype=torch.int64),
    }


PREDICTIONS = {
    # open caught at 0.9; short caught only at 0.2 (under the operating point), as another class; a false call at 0.8
    1: _pred([((21, 31, 41, 45), 0.9, 0), ((202, 101, 258, 131), 0.2, 4), ((100, 150, 120, 170), 0.8, 1)]),
    2: _pred([((10, 10, 30, 30), 0.05, 5)]),  # the spur is never detected; a low false call elsewhere
}


def _load_pair(image_id: int) -> tuple[np.ndarray, np.ndarray]:
    board = np.full((H, W), 255, np.uint8)
    for (x1, y1, x2, y2), _ in GT[image_id]:
        board[y1:y2, x1:x2] = 0
    return board, np.full((H, W), 255, np.uint8)


def test_order_kinds_and_scores(tmp_path: Path) -> None:
    entries = write_gallery(tmp_path, _coco(), PREDICTIONS, {i: i + 1 for i in range(6)}, NAMES, 0.4, _load_pair, n=8)
    misses = [(e.class_name, e.score, e.missed, e.detected_as) for e in entries["miss"]]
    assert misses == [("spur", None, True, None), ("short", misses[1][1], True, "copper"), ("open", misses[2][1], False, "open")]
    assert abs(misses[1][1] - 0.2) < 1e-6 and abs(misses[2][1] - 0.9) < 1e-6
    assert [(e.class_name, round(e.score, 2)) for e in entries["false_call"]] == [("short", 0.8), ("pin-hole", 0.05)]
    assert (
        write_gallery(tmp_path / "one", _coco(), PREDICTIONS, {i: i + 1 for i in range(6)}, NAMES, 0.4, _load_pair, n=1)["miss"][0].score
        is None
    )


def test_crops_hold_the_boxes_they_name(tmp_path: Path) -> None:
    entries = write_gallery(tmp_path, _coco(), PREDICTIONS, {i: i + 1 for i in range(6)}, NAMES, 0.4, _load_pair, n=8)
    for entry in entries["miss"] + entries["false_call"]:
        x0, y0, x1, y1 = entry.crop
        bx1, by1, bx2, by2 = entry.box
        assert x0 <= bx1 and y0 <= by1 and bx2 <= x1 and by2 <= y1, entry
        image = cv2.imread(str(tmp_path / entry.path))
        assert image.shape == (gallery.TILE + gallery.CAPTION_H, 2 * gallery.TILE + gallery.GAP, 3)
        colour = gallery.TRUE_BGR if entry.kind == "miss" else gallery.FALSE_BGR
        scale = gallery.TILE / max(x1 - x0, y1 - y0)
        for panel in (image[: gallery.TILE, : gallery.TILE], image[: gallery.TILE, gallery.TILE + gallery.GAP :]):
            ys, xs = np.nonzero(np.all(panel == colour, axis=2))
            drawn = np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]) / scale + np.array([x0, y0, x0, y0])
            np.testing.assert_allclose(drawn, entry.box, atol=1.0 + 1.0 / scale)
        if entry.kind == "miss" and entry.score is None:
            # the board crop shows the defect itself: the dark square lies where the box is drawn
            board = image[: gallery.TILE, : gallery.TILE]
            ys, xs = np.nonzero(np.all(board == 0, axis=2))
            seen = np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]) / scale + np.array([x0, y0, x0, y0])
            np.testing.assert_allclose(seen, entry.box, atol=1.0 + 1.0 / scale)


def test_index_sheets_and_json(tmp_path: Path) -> None:
    write_gallery(tmp_path, _coco(), PREDICTIONS, {i: i + 1 for i in range(6)}, NAMES, 0.4, _load_pair, n=8)
    page = (tmp_path / "index.html").read_text()
    links = re.findall(r"(?:src|href)='([^']+)'", page)
    assert links and all((tmp_path / link).is_file() for link in links)
    assert "http" not in page and "<script" not in page
    assert "00002_test.jpg" in page
    for sheet in ("misses.png", "false_calls.png"):
        assert cv2.imread(str(tmp_path / sheet)) is not None
    data = json.loads((tmp_path / "gallery.json").read_text())
    assert len(data["miss"]) == 3 and data["miss"][0]["file_name"] == "group1/00002_test.jpg"


def test_crop_window_stays_inside_the_image() -> None:
    assert crop_window((300, 220, 318, 238), H, W) == (W - 64, H - 64, W, H)
    assert crop_window((0, 0, 300, 200), H, W) == (0, 0, W, H)  # larger than the image: clipped
    x0, y0, x1, y1 = crop_window((100, 100, 110, 104), H, W)
    assert (x1 - x0, y1 - y0) == (64, 64) and x0 <= 100 and x1 >= 110
