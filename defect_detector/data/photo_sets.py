"""Photograph-like datasets on disk: a COCO dataset's binarized pairs rendered in one look family, and defects painted
on golden images.

Both write ``out/boards/*.png``, ``out/golden/*.png`` and ``out/annotations.json`` (COCO, categories
``DEEPPCB_CLASSES`` with ids 1..6, each image entry with its golden ``reference``), in the boards' pixels. The golden
image of each pair is a *second capture*: besides :func:`~defect_detector.looks.render.capture`'s gain, noise, defocus
and JPEG it is moved by up to ``shift`` px and ``degrees`` (inspection registers it, as on the line). Everything is
a function of ``seed`` and the pair's position.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

from defect_detector.align.register import register
from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.core.io import atomic_write_bytes
from defect_detector.data.coco_json import box_annotations, read_json, resolve_images_root, write_generated
from defect_detector.data.images import image_files, load_image_gray
from defect_detector.looks.paint import paint_defects
from defect_detector.looks.render import capture, render_pair, sample_look

_Pair = tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def moved(image: np.ndarray, rng: np.random.Generator, shift: float, degrees: float) -> np.ndarray:
    """``image`` (uint8 ``[H, W]``) moved by a random rigid transform: up to ``shift`` px and ``degrees`` about its
    centre, borders replicated."""
    h, w = image.shape
    matrix = cv2.getRotationMatrix2D((w / 2, h / 2), float(rng.uniform(-degrees, degrees)), 1.0)
    matrix[:, 2] += rng.uniform(-shift, shift, size=2)
    return cv2.warpAffine(image, matrix, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def _layout_pairs(ann_file: Path, class_names: tuple[str, ...]) -> Iterator[_Pair]:
    """``(stem, board, golden, boxes xyxy float32 [N, 4], labels int64 [N])`` for each image of a COCO json with a
    ``reference``, labels by ``class_names``."""
    raw = read_json(ann_file)
    root = resolve_images_root(ann_file, raw, None)
    names = {c["id"]: c["name"] for c in raw["categories"]}
    by_image: dict[int, list[dict]] = {}
    for ann in raw["annotations"]:
        by_image.setdefault(ann["image_id"], []).append(ann)
    for img in raw["images"]:
        if "reference" not in img:
            continue
        anns = [a for a in by_image.get(img["id"], []) if names.get(a["category_id"]) in class_names]
        boxes = np.array([[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3]] for a in anns], np.float32)
        labels = np.array([class_names.index(names[a["category_id"]]) for a in anns], np.int64)
        board, golden = load_image_gray(root / img["file_name"]), load_image_gray(root / img["reference"])
        yield Path(img["file_name"]).stem, board, golden, boxes.reshape(-1, 4), labels


def _aligned(board: np.ndarray, golden: np.ndarray) -> np.ndarray:
    """The golden layout registered into the board's pixels (``align/register.py``), borders replicated, binarized
    again, so that the look's texture and light fall on the same places of both (DeepPCB's pairs are 2-7 px off)."""
    _, reg = register(golden, board)
    warped = reg.mapping.golden_into_frame(golden, board.shape, cv2.INTER_LINEAR, 0, cv2.BORDER_REPLICATE)
    return np.where(warped < 128, 0, 255).astype(np.uint8)


def _upscaled(layout: np.ndarray, scale: float) -> np.ndarray:
    if scale == 1.0:
        return layout
    big = cv2.resize(layout, None, fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR)
    return np.where(big < 128, 0, 255).astype(np.uint8)


def write_pairs(out: Path, items: Iterable[_Pair], description: str) -> Path:
    """Write ``(stem, board, golden, boxes xyxy [N, 4], labels [N])`` items as PNGs and a COCO json under ``out``
    (module docstring); returns the json's path."""
    images, annotations = [], []
    for stem, board, golden, boxes, labels in items:
        image_id = len(images) + 1
        for folder, pixels in (("boards", board), ("golden", golden)):
            ok, encoded = cv2.imencode(".png", pixels)
            if not ok:
                raise RuntimeError(f"PNG encoding failed for {stem}")
            atomic_write_bytes(out / folder / f"{stem}.png", encoded.tobytes())
        h, w = board.shape
        images.append({"id": image_id, "file_name": f"boards/{stem}.png", "reference": f"golden/{stem}.png", "width": w, "height": h})
        annotations += box_annotations(image_id, boxes, labels, len(annotations) + 1)
    return write_generated(out, images, annotations, {"images_root": ".", "description": description})


def rendered_pairs(  # noqa: PLR0913 - each a rendering option, named by callers
    ann_file: str | os.PathLike[str],
    family: str = "holdout",
    paint: int = 0,
    scale: float = 1.0,
    seed: int = 0,
    shift: float = 3.0,
    degrees: float = 0.3,
) -> Iterator[_Pair]:
    """Every (board, golden) pair of a DeepPCB-like COCO json (binarized, each image with a ``reference``) rendered as
    photographs of ``family`` looks, ``scale`` times larger, with ``paint`` more defects painted on each board in its
    rendered levels; the golden image a moved second capture (``(stem, board, golden, boxes xyxy, labels)``)."""
    for k, (stem, board, golden, boxes, labels) in enumerate(_layout_pairs(Path(ann_file), DEEPPCB_CLASSES)):
        rng = np.random.default_rng([seed, k])
        golden = _aligned(board, golden)
        board, golden = _upscaled(board, scale), _upscaled(golden, scale)
        boxes = boxes * scale
        photo, golden_photo = render_pair(board, golden, sample_look(rng, family), rng, scale=scale)
        if paint:
            photo, new_boxes, new_labels = paint_defects(photo, paint, rng, avoid=boxes, size=scale)
            boxes, labels = np.concatenate([boxes, new_boxes]), np.concatenate([labels, new_labels])
        yield stem, photo, moved(golden_photo, rng, shift * scale, degrees), boxes, labels


def write_rendered_set(  # noqa: PLR0913 - each a rendering option, named by callers
    ann_file: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    family: str = "holdout",
    paint: int = 0,
    scale: float = 1.0,
    seed: int = 0,
    shift: float = 3.0,
    degrees: float = 0.3,
) -> Path:
    """Write :func:`rendered_pairs` of ``ann_file`` under ``out_dir``. Returns the annotations path."""
    pairs = rendered_pairs(ann_file, family, paint, scale, seed, shift, degrees)
    description = f"{Path(ann_file).name} rendered: family {family}, scale {scale}, seed {seed}"
    return write_pairs(Path(out_dir), tqdm(pairs, desc=f"render {family}", unit="pair"), description)


def painted_pairs(golden: np.ndarray, stem: str, n: int, defects: int, rng: np.random.Generator) -> Iterator[_Pair]:
    """``n`` boards painted on one golden image (uint8 ``[H, W]``), each with up to ``defects`` defects and a second
    capture's differences; each pair's golden image is its own moved capture of ``golden``."""
    for k in range(n):
        board, boxes, labels = paint_defects(golden, defects, rng)
        board = capture(board.astype(np.float32), rng, strength=0.6)
        again = capture(golden.astype(np.float32), rng, strength=0.6)
        yield f"{stem}_{k:03d}", board, moved(again, rng, 3.0, 0.3), boxes, labels


def write_painted_set(
    golden_paths: list[Path], out_dir: str | os.PathLike[str], n: int = 8, defects: int = 4, seed: int = 0
) -> Path:
    """Paint ``n`` boards of up to ``defects`` defects on each golden image of ``golden_paths`` (see
    :func:`painted_pairs`). Returns the annotations path. Raises ValueError for a golden image with no copper."""
    out = Path(out_dir)

    def pairs() -> Iterator[_Pair]:
        for k, path in enumerate(golden_paths):
            golden = load_image_gray(path)
            yield from painted_pairs(golden, path.stem, n, defects, np.random.default_rng([seed, k]))

    total = n * len(golden_paths)
    description = f"defects painted on {len(golden_paths)} golden images, seed {seed}"
    return write_pairs(out, tqdm(pairs(), total=total, desc="paint", unit="board"), description)


def golden_files(where: str | os.PathLike[str]) -> list[Path]:
    """The image files of a folder (``data/images.py`` ``image_files``), or the one image file given. Raises ValueError
    when there is none."""
    path = Path(where)
    files = image_files(path) if path.is_dir() else [path]
    if not files or not all(p.is_file() for p in files):
        raise ValueError(f"{where}: no golden image there (png, jpg, bmp, tif or another image file)")
    return files

