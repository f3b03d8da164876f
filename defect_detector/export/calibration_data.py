"""Model inputs for int8 calibration from a COCO json of training images: gray, golden image registered, letterboxed.

The frames are prepared as the frame pipeline prepares a frame it letterboxes whole (``inspect/pipeline.py``): read as
8-bit gray, for a golden-template model the json's ``reference`` registered into the image (``align/register.py``;
a pair that does not register is left out, as ``predict`` skips it), letterboxed to ``imgsz``. Frames are spread
evenly over the json (it lists images group by group), so a few hundred cover every board design.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from defect_detector.align.register import register
from defect_detector.core.types import LetterboxMeta
from defect_detector.data.coco_json import read_json, resolve_images_root
from defect_detector.data.dataset import evenly_spaced
from defect_detector.data.images import load_image_gray
from defect_detector.data.letterbox import letterbox

log = logging.getLogger("defect_detector.export")

CALIBRATION_IMAGES = 100
"""Training frames an int8 export calibrates on by default. MinMax ranges only widen with more frames, and wider ranges
cost resolution: on the bundled single-image model (held-out mAP@0.5 0.922 in float32), 100 frames spread over the
training groups gave 0.920 in int8, 300 frames 0.906 (``export/int8.py``)."""


@dataclass(frozen=True)
class HeldBack:
    """Images of the calibration json held back to check the int8 model on: uint8 ``frames`` ``[M, C, S, S]``
    (letterboxed as the calibration's), each one's letterbox ``metas``, and its ground truth from the json: ``boxes``
    float32 ``[K, 4]`` xyxy in the image's own pixels and ``names`` (``K`` category names), one pair per frame."""

    frames: np.ndarray
    metas: list[LetterboxMeta] = field(default_factory=list)
    boxes: list[np.ndarray] = field(default_factory=list)
    names: list[list[str]] = field(default_factory=list)

    @property
    def defects(self) -> int:
        """Ground-truth boxes over the held-back frames."""
        return sum(len(b) for b in self.boxes)


def calibration_sets(
    data: str | os.PathLike[str],
    imgsz: int,
    channels: int,
    max_images: int = CALIBRATION_IMAGES,
    images_root: str | None = None,
    held_back: int = 0,
) -> tuple[np.ndarray, HeldBack]:
    """uint8 ``[N, channels, imgsz, imgsz]`` letterboxed frames (channel 1: the registered golden image) of up to
    ``max_images`` images of the COCO json ``data``, spread evenly over it, and ``[M, channels, imgsz, imgsz]`` frames of
    up to ``held_back`` other images, spread evenly over those the calibration does not use (none when ``data`` has
    no more images than ``max_images``): ``(calibration frames, HeldBack)``, the held-back images with their ground
    truth.

    ``ValueError`` naming ``data`` when it lists no image, when a golden-template model (``channels`` 2) gets a json
    without ``reference`` entries, or when no frame could be read (and registered)."""
    path = Path(data)
    raw = read_json(path)
    root = resolve_images_root(path, raw, images_root)
    entries = [e for e in raw.get("images", []) if isinstance(e, dict) and isinstance(e.get("file_name"), str)]
    if channels == 2:
        entries = [e for e in entries if isinstance(e.get("reference"), str)]
    if not entries:
        what = "images with a 'reference' (golden image) entry" if channels == 2 else "images"
        raise ValueError(f"{path}: no {what} to calibrate on")
    chosen = evenly_spaced(len(entries), max_images)
    taken = set(chosen)
    rest = [i for i in range(len(entries)) if i not in taken]
    calibration = _frames(path, root, [entries[i] for i in chosen], imgsz, channels)
    if not calibration:
        raise ValueError(f"{path}: none of its images could be read for calibration ({len(chosen)} left out)")
    held = _frames(path, root, [entries[rest[j]] for j in evenly_spaced(len(rest), held_back)] if held_back else [], imgsz, channels)
    frames = np.stack([c for c, _, _ in calibration])
    if not held:
        return frames, HeldBack(frames[:0])
    truth = _truth(raw, [e for _, _, e in held])
    return frames, HeldBack(np.stack([c for c, _, _ in held]), [m for _, m, _ in held], [b for b, _ in truth], [n for _, n in truth])


def _truth(raw: dict, entries: list[dict]) -> list[tuple[np.ndarray, list[str]]]:
    """Each entry's annotations in the COCO json ``raw``: float32 ``[K, 4]`` xyxy boxes (its pixels) and category names."""
    names = {c.get("id"): str(c.get("name")) for c in raw.get("categories", []) if isinstance(c, dict)}
    by_image: dict[object, list[dict]] = {}
    for ann in raw.get("annotations", []):
        if isinstance(ann, dict) and isinstance(ann.get("bbox"), list) and len(ann["bbox"]) == 4 and ann.get("category_id") in names:
            by_image.setdefault(ann.get("image_id"), []).append(ann)
    out = []
    for entry in entries:
        anns = by_image.get(entry.get("id"), [])
        xywh = np.asarray([a["bbox"] for a in anns], np.float32).reshape(-1, 4)
        out.append((np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1), [names[a["category_id"]] for a in anns]))
    return out


def _frames(path: Path, root: Path, entries: list[dict], imgsz: int, channels: int) -> list[tuple[np.ndarray, LetterboxMeta, dict]]:
    """``(letterboxed frame, its letterbox meta, its entry)`` of each of ``entries`` that could be read (see
    :func:`calibration_sets`)."""
    out, skipped = [], 0
    for entry in entries:
        try:
            image = load_image_gray(root / entry["file_name"])
            planes = [image]
            if channels == 2:
                warped, result = register(load_image_gray(root / entry["reference"]), image)
                if not result.ok:
                    raise ValueError(f"{entry['file_name']}: golden image refused ({result.reason})")
                planes.append(warped)
        except (OSError, ValueError) as exc:
            skipped += 1
            log.warning("int8 calibration: left out %s", exc)
            continue
        boxed = [letterbox(plane, imgsz) for plane in planes]
        out.append((np.stack([canvas for canvas, _ in boxed]), boxed[0][1], entry))
    if skipped:
        log.warning("int8 calibration: %d of %d frames of %s left out", skipped, len(entries), path.name)
    return out
