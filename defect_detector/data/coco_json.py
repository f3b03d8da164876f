"""Reading a COCO annotation file: the json's top-level shape, where its images live, valid image and annotation
entries, and the pycocotools index over the entries :class:`~defect_detector.data.dataset.CocoDetectionDataset` kept;
and writing the ones this package generates (:func:`write_generated`)."""

from __future__ import annotations

import contextlib
import io
import math
import os
import stat
from pathlib import Path
from typing import Any

import torch
from pycocotools.coco import COCO
from torchvision.ops import box_convert

from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.core.errors import DatasetError
from defect_detector.core.io import atomic_write_json, read_json_file


def read_json(path: Path) -> dict[str, Any]:
    raw = read_json_file(path, "annotation", DatasetError)
    if not isinstance(raw, dict):
        raise DatasetError(f"{path}: malformed COCO file: top level must be an object")
    for key in ("images", "categories"):
        if not isinstance(raw.get(key), list):
            raise DatasetError(f"{path}: malformed COCO file: {key!r} must be a list")
    if not isinstance(raw.setdefault("annotations", []), list):
        raise DatasetError(f"{path}: malformed COCO file: 'annotations' must be a list")
    return raw


def resolve_images_root(ann_file: Path, raw: dict[str, Any], images_root: str | os.PathLike[str] | None) -> Path:
    if images_root is not None:
        return Path(images_root)
    info = raw.get("info")
    if isinstance(info, dict) and isinstance(info.get("images_root"), str):
        return ann_file.parent / info["images_root"]
    return ann_file.parent


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def valid_image_entry(img: Any) -> bool:
    return (
        isinstance(img, dict)
        and isinstance(img.get("id"), int)
        and isinstance(img.get("file_name"), str)
        and isinstance(img.get("width"), int)
        and isinstance(img.get("height"), int)
        and img["width"] > 0
        and img["height"] > 0
    )


def valid_annotation_entry(ann: Any) -> bool:
    return (
        isinstance(ann, dict)
        and all(isinstance(ann.get(k), int) for k in ("id", "image_id", "category_id"))
        and isinstance(ann.get("bbox"), (list, tuple))
        and len(ann["bbox"]) == 4
        and all(is_number(v) for v in ann["bbox"])
        and ann.get("iscrowd", 0) in (0, 1)
    )


def file_size(path: Path) -> int | None:
    """The size of the regular file at ``path``; None when there is none (missing, a folder, a name the OS rejects)."""
    try:
        info = path.stat()
    except (OSError, ValueError):  # ValueError: a NUL byte in the name
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def build_coco(info: Any, images: list[dict[str, Any]], anns: dict[int, list[dict[str, Any]]], categories: list[dict[str, Any]]) -> COCO:
    """A pycocotools index over the validated entries (its progress prints silenced)."""
    coco = COCO()
    coco.dataset = {
        "info": info,
        "images": sorted(images, key=lambda img: img["id"]),
        "annotations": [a for i in sorted(anns) for a in anns[i]],
        "categories": categories,
    }
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco



def box_annotations(image_id: int, boxes: Any, labels: Any, first_id: int) -> list[dict[str, Any]]:
    """COCO annotation entries of one image: xyxy pixel ``boxes`` ``[N, 4]``, ``labels`` ``[N]`` indexing
    ``DEEPPCB_CLASSES`` (category ids 1..6), ids from ``first_id``."""
    out = []
    xywh = box_convert(torch.as_tensor(boxes).reshape(-1, 4), "xyxy", "xywh")
    for k, (box, label) in enumerate(zip(xywh.tolist(), labels.tolist())):
        x, y, w, h = box
        entry = {"id": first_id + k, "image_id": image_id, "category_id": label + 1, "bbox": [x, y, w, h]}
        out.append(entry | {"area": w * h, "iscrowd": 0})
    return out


def write_generated(out: Path, images: list[dict[str, Any]], annotations: list[dict[str, Any]], info: dict[str, Any]) -> Path:
    """Write ``out/annotations.json`` (COCO, categories ``DEEPPCB_CLASSES`` with ids 1..6) atomically; returns its path."""
    coco = {
        "info": info,
        "images": images,
        "annotations": annotations,
        "categories": [{"id": i + 1, "name": name} for i, name in enumerate(DEEPPCB_CLASSES)],
    }
    path = out / "annotations.json"
    atomic_write_json(path, coco)
    return path
