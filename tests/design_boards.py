"""Test helper: a COCO json of tiny synthetic boards grouped in design folders, each board with its golden image."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from defect_detector.data.synth import generate_board_pair

CATEGORIES = [{"id": i + 1, "name": n} for i, n in enumerate(["open", "short", "mousebite", "spur", "copper", "pin-hole"])]


def write_design_json(
    root: Path, name: str, designs: list[str], per_design: int, seed: int, size: int = 96, self_pairs: bool = False
) -> Path:
    """``root/name``: ``per_design`` boards (``size`` px square, seeded by ``seed``, design and board) per design folder
    of ``designs``, written as ``<design>/<k>_test.png`` with its golden image ``<design>/<k>_temp.png`` as
    ``reference``; with ``self_pairs``, each golden image also listed as an image of its own paired with itself (as
    DeepPCB's training json lists them). No annotations; ``images_root`` is ``root``."""
    images = []
    for d, design in enumerate(designs):
        (root / design).mkdir(parents=True, exist_ok=True)
        for k in range(per_design):
            board, golden = generate_board_pair(size, size, np.random.default_rng(seed + 100 * d + k), (1, 2))[:2]
            cv2.imwrite(str(root / design / f"{k:03d}_test.png"), board)
            cv2.imwrite(str(root / design / f"{k:03d}_temp.png"), golden)
            reference = f"{design}/{k:03d}_temp.png"
            for file in (f"{design}/{k:03d}_test.png", reference) if self_pairs else (f"{design}/{k:03d}_test.png",):
                images.append({"id": len(images) + 1, "file_name": file, "width": size, "height": size, "reference": reference})
    path = root / name
    path.write_text(json.dumps({"images": images, "annotations": [], "categories": CATEGORIES, "info": {"images_root": "."}}))
    return path


def write_sample_pairs(folder: Path, count: int = 2) -> Path:
    """``folder/pairs.json``: the first ``count`` held-out DeepPCB sample boards (``data/samples``), copied into
    ``folder`` with their golden images as ``reference`` entries and their annotations."""
    import shutil

    samples = Path(__file__).resolve().parents[1] / "data" / "samples"
    raw = json.loads((samples / "deeppcb" / "annotations.json").read_text())
    for entry in raw["images"][:count]:
        name = Path(entry["file_name"]).name
        shutil.copy(samples / "deeppcb" / name, folder / name)
        shutil.copy(samples / "golden" / name, folder / f"golden_{name}")
        entry.update(file_name=name, reference=f"golden_{name}")
    ids = {e["id"] for e in raw["images"][:count]}
    raw.update(images=raw["images"][:count], annotations=[a for a in raw["annotations"] if a["image_id"] in ids])
    path = folder / "pairs.json"
    path.write_text(json.dumps(raw))
    return path
