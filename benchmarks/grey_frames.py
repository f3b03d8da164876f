"""DeepPCB boards on mid-grey 2048x1536 frames, against board-by-board inspection (issue 56's target: within 0.003 mAP@0.5).

A line camera frames more than the board: the board lies somewhere in a larger frame, on a plain background. ``build``
takes a COCO json of (board, golden image) pairs (``defect-detector convert deeppcb ... --templates``'s validation
json) and writes each board at a seeded place on a grey (level 128) 2048x1536 frame, its boxes moved with it. Each
image's ``reference`` is, by ``--reference``:

- ``template``: its golden image as it is (640x640), which registration must find inside the frame;
- ``moved``: its golden image on its own grey 2048x1536 frame, placed up to 12 px away from where the board lies
  (a golden image captured by the same camera on another day).

``--panel`` places six boards per frame instead, on a 3x2 grid with seeded gaps (a panel, or a tray of boards), and
composes their golden images the same way into one golden image per frame (``moved``: that whole golden panel up to
12 px away).

Score both sets, and the json itself, with ``val``: every image through the prepare stage as ``predict`` runs it::

    python -m benchmarks.grey_frames --data data/deeppcb/deeppcb_tpl_val.json --out /tmp/grey --reference moved [--panel]
    defect-detector val --data /tmp/grey/annotations.json

Bad input (a missing or malformed json, no pair in it) is one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from tqdm import tqdm

from defect_detector.core.io import atomic_write_json
from defect_detector.data.coco_json import read_json, resolve_images_root
from defect_detector.data.images import load_image_gray

FRAME = (1536, 2048)
"""The frame's ``(height, width)``."""
GREY = 128
MOVE = 12
"""The most a ``moved`` golden image lies from its board, in pixels along each axis."""


def _placed(images: list[np.ndarray], places: list[tuple[int, int]]) -> np.ndarray:
    """``images`` (uint8 ``[h, w]``) on a grey :data:`FRAME`, each with its top-left corner at its ``(x, y)``."""
    frame = np.full(FRAME, GREY, np.uint8)
    for image, (x, y) in zip(images, places):
        frame[y : y + image.shape[0], x : x + image.shape[1]] = image
    return frame


def _places(rng: np.random.Generator, count: int, side: int) -> list[tuple[int, int]]:
    """Top-left corners of ``count`` boards ``side`` px square: one anywhere at least :data:`MOVE` px inside the frame,
    or six on a 3x2 grid, the space left shared among the gaps at random (each edge gap at least :data:`MOVE`)."""
    if count == 1:
        return [(int(rng.integers(MOVE, FRAME[1] - side - MOVE)), int(rng.integers(MOVE, FRAME[0] - side - MOVE)))]
    corners = []
    for n, free in ((3, FRAME[1] - 3 * side), (2, FRAME[0] - 2 * side)):
        if free < 2 * MOVE:
            raise ValueError(f"{n} boards of {side} px do not fit a {FRAME[1]}x{FRAME[0]} frame")
        gaps = MOVE + rng.dirichlet(np.ones(n + 1)) * (free - (n + 1) * MOVE)
        corners.append([int(sum(gaps[: i + 1]) + i * side) for i in range(n)])
    return [(x, y) for y in corners[1] for x in corners[0]]


def build(data: Path, out: Path, reference: str, seed: int = 0, panel: bool = False) -> Path:
    """Write the grey-frame set (module docstring) to ``out``: ``boards/``, ``golden/`` (``moved`` or ``panel``) and
    ``annotations.json``."""
    raw = read_json(data)
    root = resolve_images_root(data, raw, None)
    pairs = [e for e in raw["images"] if e.get("reference")]
    if not pairs:
        raise ValueError(f"{data}: no image has a reference (golden image); convert with --templates")
    boxes: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for a in raw["annotations"]:
        boxes[a["image_id"]].append(a)
    rng = np.random.default_rng(seed)
    for folder in ("boards", "golden"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    count = 6 if panel else 1
    for start in tqdm(range(0, len(pairs), count), desc="grey frames"):
        entries = pairs[start : start + count]
        boards = [load_image_gray(root / e["file_name"]) for e in entries]
        goldens = [load_image_gray(root / e["reference"]) for e in entries]
        if any(b.shape != boards[0].shape or b.shape[0] != b.shape[1] for b in boards + goldens):
            raise ValueError(f"{data}: the boards and golden images must be square and of one size")
        places = _places(rng, count, boards[0].shape[0])[: len(entries)]  # the last frame of a panel set may hold fewer
        stem = Path(entries[0]["file_name"]).stem
        cv2.imwrite(str(out / "boards" / f"{stem}.png"), _placed(boards, places))
        if reference == "moved" or panel:
            dx, dy = (int(v) for v in rng.integers(-MOVE, MOVE + 1, 2)) if reference == "moved" else (0, 0)
            cv2.imwrite(str(out / "golden" / f"{stem}.png"), _placed(goldens, [(x + dx, y + dy) for x, y in places]))
            ref = f"golden/{stem}.png"
        else:
            ref = str(Path(root / entries[0]["reference"]).resolve())
        image_id = len(images) + 1
        images.append({"id": image_id, "file_name": f"boards/{stem}.png", "width": FRAME[1], "height": FRAME[0], "reference": ref})
        for entry, (x, y) in zip(entries, places):
            for a in boxes[entry["id"]]:
                bx, by, bw, bh = a["bbox"]
                annotations.append({**a, "id": len(annotations) + 1, "image_id": image_id, "bbox": [bx + x, by + y, bw, bh]})
    path = out / "annotations.json"
    what = "six" if panel else "one"
    info = {"description": f"{data}'s boards, {what} per grey {FRAME[1]}x{FRAME[0]} frame, reference {reference} (seed {seed})"}
    atomic_write_json(path, {"images": images, "annotations": annotations, "categories": raw["categories"], "info": info})
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="COCO json of boards with reference entries")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reference", choices=("template", "moved"), default="moved", help="each frame's golden image (docstring)")
    parser.add_argument("--panel", action="store_true", help="six boards per frame on a 3x2 grid (docstring)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        print(f"wrote {build(args.data, args.out, args.reference, args.seed, args.panel)}")
    except (ValueError, FileNotFoundError) as exc:
        print(f"grey_frames: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
