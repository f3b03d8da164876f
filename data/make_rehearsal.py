"""Build ``defect_detector/data/rehearsal/``: the real DeepPCB defects ``teach`` rehearses when it fine-tunes.

32 boards of DeepPCB's training split (board groups other than the held-out 50600 and 92000, spread evenly over
``deeppcb_train.json``), each with its template, binarized again and stored as PNG (about 3 KB each), with a COCO
json whose ``reference`` entries name the templates. ``teach`` renders them in photograph looks
(``data/photo_sets.py`` ``write_rendered_set``), trains on the first 24 among its own painted boards and scores the
last 8 before and after (``jobs/teach_tune.py``). DeepPCB is MIT-licensed (``data/samples/deeppcb/LICENSE``)::

    python data/make_rehearsal.py --data data/deeppcb/deeppcb_train.json --out defect_detector/data/rehearsal
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import cv2
import numpy as np

from defect_detector.data.coco_json import read_json, resolve_images_root
from defect_detector.data.dataset import evenly_spaced

BOARDS = 32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    raw = read_json(args.data)
    root = resolve_images_root(args.data, raw, None)
    boxed = {a["image_id"] for a in raw["annotations"]}
    images = [i for i in raw["images"] if i["id"] in boxed and not i["file_name"].startswith(("group50600", "group92000"))]
    chosen = [images[k] for k in evenly_spaced(len(images), BOARDS)]
    shutil.rmtree(args.out, ignore_errors=True)
    out_images, out_annotations = [], []
    for new_id, img in enumerate(chosen, 1):
        stem = Path(img["file_name"]).stem.removesuffix("_test")
        for folder, name in (("boards", img["file_name"]), ("golden", img["reference"])):
            gray = cv2.imread(str(root / name), cv2.IMREAD_GRAYSCALE)
            (args.out / folder).mkdir(parents=True, exist_ok=True)
            binary = np.where(gray < 128, 0, 255).astype(np.uint8)
            cv2.imwrite(str(args.out / folder / f"{stem}.png"), binary, [cv2.IMWRITE_PNG_COMPRESSION, 9])
        size = {"width": img["width"], "height": img["height"]}
        out_images.append({"id": new_id, "file_name": f"boards/{stem}.png", "reference": f"golden/{stem}.png", **size})
        for a in raw["annotations"]:
            if a["image_id"] == img["id"]:
                out_annotations.append({**a, "id": len(out_annotations) + 1, "image_id": new_id})
    info = {"images_root": ".", "description": f"{BOARDS} DeepPCB training-split boards for teach's rehearsal (data/make_rehearsal.py)"}
    coco = {"info": info, "images": out_images, "annotations": out_annotations, "categories": raw["categories"]}
    (args.out / "annotations.json").write_text(json.dumps(coco, indent=1))
    print(f"{args.out}: {len(out_images)} boards, {len(out_annotations)} defects")


if __name__ == "__main__":
    main()
