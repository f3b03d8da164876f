"""``benchmarks/grey_frames.py``: DeepPCB boards placed on grey 2048x1536 frames, their boxes moved with them."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from benchmarks.grey_frames import FRAME, GREY, MOVE, main

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples" / "deeppcb" / "annotations.json"


def test_each_board_lies_on_a_grey_frame_with_its_boxes_and_a_golden_image_moved_a_little(tmp_path: Path) -> None:
    assert main(["--data", str(SAMPLES), "--out", str(tmp_path), "--reference", "moved"]) == 0
    source, built = json.loads(SAMPLES.read_text()), json.loads((tmp_path / "annotations.json").read_text())
    assert len(built["images"]) == len(source["images"]) and len(built["annotations"]) == len(source["annotations"])
    first = built["images"][0]
    frame = cv2.imread(str(tmp_path / first["file_name"]), cv2.IMREAD_GRAYSCALE)
    golden = cv2.imread(str(tmp_path / first["reference"]), cv2.IMREAD_GRAYSCALE)
    assert frame.shape == golden.shape == FRAME and (first["width"], first["height"]) == (FRAME[1], FRAME[0])
    board = cv2.imread(str(SAMPLES.parent / source["images"][0]["file_name"]), cv2.IMREAD_GRAYSCALE)
    ys, xs = np.nonzero(frame != GREY)
    x, y = int(xs.min()), int(ys.min())
    assert np.array_equal(frame[y : y + 640, x : x + 640], board)  # the board itself, unchanged
    gy, gx = (int(v.min()) for v in np.nonzero(golden != GREY))
    assert max(abs(gx - x), abs(gy - y)) <= MOVE
    moved = [a["bbox"] for a in built["annotations"] if a["image_id"] == first["id"]]
    given = [a["bbox"] for a in source["annotations"] if a["image_id"] == source["images"][0]["id"]]
    assert moved == [[bx + x, by + y, bw, bh] for bx, by, bw, bh in given]


def test_a_json_without_golden_images_is_one_line(tmp_path: Path, capsys) -> None:
    plain = tmp_path / "plain.json"
    raw = json.loads(SAMPLES.read_text())
    plain.write_text(json.dumps({**raw, "images": [{k: v for k, v in e.items() if k != "reference"} for e in raw["images"]]}))
    assert main(["--data", str(plain), "--out", str(tmp_path / "out")]) == 2
    assert "no image has a reference" in capsys.readouterr().err


def test_a_panel_holds_six_boards_apart_with_their_golden_images_composed_alike(tmp_path: Path) -> None:
    assert main(["--data", str(SAMPLES), "--out", str(tmp_path), "--reference", "template", "--panel"]) == 0
    source, built = json.loads(SAMPLES.read_text()), json.loads((tmp_path / "annotations.json").read_text())
    assert len(built["images"]) == 2 and len(built["annotations"]) == len(source["annotations"])  # 8 boards: 6 + 2
    first = built["images"][0]
    frame = cv2.imread(str(tmp_path / first["file_name"]), cv2.IMREAD_GRAYSCALE)
    golden = cv2.imread(str(tmp_path / first["reference"]), cv2.IMREAD_GRAYSCALE)
    grey = (frame == GREY).all(axis=0)  # columns of background only: the gaps between the three columns of boards
    edges = np.flatnonzero(np.diff(grey.astype(int)))
    assert len(edges) == 6 and (frame == GREY).mean() > 0.15
    assert np.array_equal((golden == GREY).all(axis=0), grey) and np.array_equal((golden == GREY).all(axis=1), (frame == GREY).all(axis=1))
