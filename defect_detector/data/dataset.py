"""COCO-annotated grayscale detection dataset.

Annotations are validated once at construction (no image decoding); only file paths and
per-image box arrays stay in memory. Each sample is read, converted to single-channel uint8,
augmented in its original frame, then letterboxed to ``imgsz``.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import albumentations as A
import numpy as np
import torch

from defect_detector.align.register import check_pair
from defect_detector.align.register import register as register_reference
from defect_detector.core.boxes import boxes_to_letterbox
from defect_detector.core.errors import DatasetError
from defect_detector.data.coco_json import (
    build_coco,
    file_size,
    is_number,
    read_json,
    resolve_images_root,
    valid_annotation_entry,
    valid_image_entry,
)
from defect_detector.data.images import decode_gray
from defect_detector.data.letterbox import letterbox
from defect_detector.data.transforms import PairTransform, apply_pair_transforms, apply_transforms

logger = logging.getLogger("defect_detector.data")

_BOX_SLOP = 1.0
_MAX_WARNINGS_PER_REASON = 10
_UNREADABLE = "unreadable image"
_UNREADABLE_REFERENCE = "unreadable reference"
_MISREGISTERED = "reference does not match its image"
_LOAD_FAILURES = (_UNREADABLE, _UNREADABLE_REFERENCE, _MISREGISTERED)  # codes 1, 2, 3 in the shared flags
_MAX_READ_ATTEMPTS = 16


def evenly_spaced(n: int, k: int | None) -> list[int]:
    """``k`` indices spread evenly over ``range(n)`` (all of them when ``k`` is None or >= n).

    Annotation files and folders list images group by group, so the first ``k`` would cover one board design only.
    """
    if k is None or k >= n:
        return list(range(n))
    if k < 1:
        raise ValueError(f"need at least one image, got max_images={k}")
    return sorted({int(i) for i in np.linspace(0, n - 1, k).round()})


class SampleError(DatasetError):
    """A sample that cannot be loaded; ``reason`` is one of the load-failure reasons counted in ``skipped``."""

    def __init__(self, message: str, reason: str = _UNREADABLE) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class _Record:
    """One image: its file, COCO id, annotated size, boxes (float32 [N, 4] xyxy) with labels (int64 [N]),
    and its reference file (reference datasets only); ``index`` its position in the dataset."""

    path: str
    image_id: int
    width: int
    height: int
    boxes: np.ndarray
    labels: np.ndarray
    reference: str | None = None
    index: int = 0


class CocoDetectionDataset(torch.utils.data.Dataset):
    """Grayscale detection samples from a COCO json.

    Args:
        ann_file: COCO json with ``images``, ``annotations``, ``categories``.
        images_root: folder that ``file_name`` is relative to; default: the json's ``info.images_root``
            (relative to the json's folder), else the json's folder.
        class_names: model class order. Categories are matched to them by name (label = the index of the
            category's name; ids may be anything): a class with no category of its name is absent
            (``absent_classes``; the evaluator leaves it unscored), and a category whose name is no class
            (``unknown_categories``) is logged once, its annotations skipped and counted as "unknown category"
            (in "error" mode: a :class:`DatasetError`).
        imgsz: letterbox size.
        transform: augmentation from :func:`defect_detector.data.transforms.build_transforms` (original frame).
        on_bad: ``"error"`` raises :class:`DatasetError` on the first bad input; ``"skip"`` drops it,
            logs a warning on logger ``defect_detector.data`` and counts it in ``self.skipped``.
        reference: pair each image with its golden reference (the image entry's ``reference`` file,
            relative to ``images_root``); samples become ``[2, imgsz, imgsz]`` (image, reference) and
            ``transform`` must come from :func:`~defect_detector.data.transforms.build_pair_transforms`.
            An entry without a reference, or whose reference file is missing, is a bad input.
        register: align each reference to its image (:func:`defect_detector.align.register.register`)
            before augmentation; a pair that does not register is a bad input, never used misaligned.

    ``self.coco`` indexes the validated annotations (clipped boxes, skipped entries removed), so an
    evaluator sees exactly the ground truth the samples carry. A sample is
    ``(image float32 [C, imgsz, imgsz] in [0, 1], target)`` (C = 1, or 2 with ``reference``: image, reference)
    with ``target = {"boxes": float32 [N, 4]
    xyxy in the letterboxed frame, "labels": int64 [N], "image_id": int, "letterbox": LetterboxMeta}``.
    Crowd annotations (``iscrowd: 1``) stay in ``self.coco`` but are not training targets.
    In "skip" mode an unreadable image is replaced by the next readable one. Which images proved
    unreadable is kept in shared memory, so ``skipped`` and ``report()`` in the main process include
    those found inside DataLoader workers.
    """

    def __init__(  # noqa: PLR0913 - one argument per dataset option; callers name them
        self,
        ann_file: str | os.PathLike[str],
        images_root: str | os.PathLike[str] | None,
        class_names: Sequence[str],
        imgsz: int,
        transform: A.Compose | PairTransform | None = None,
        on_bad: str = "skip",
        reference: bool = False,
        register: bool = False,
        max_images: int | None = None,
    ) -> None:
        if on_bad not in ("skip", "error"):
            raise ValueError(f"on_bad must be 'skip' or 'error', got {on_bad!r}")
        self.ann_file = Path(ann_file)
        self.class_names = tuple(class_names)
        self.imgsz = imgsz
        self.transform = transform
        self.on_bad = on_bad
        self.reference = reference
        self.register = register
        self._found: Counter[str] = Counter()
        self._warned: set[str] = set()

        raw = read_json(self.ann_file)
        self.images_root = resolve_images_root(self.ann_file, raw, images_root)
        self.label_to_cat_id, cat_names = self._categories(raw["categories"])
        cat_to_label = {cat_id: label for label, cat_id in self.label_to_cat_id.items()}
        self.absent_classes = [name for label, name in enumerate(self.class_names) if label not in self.label_to_cat_id]
        self.unknown_categories = sorted({name for name in cat_names.values() if name not in self.class_names})
        if self.unknown_categories:
            logger.warning(
                "%s: categories %s are not classes of the model (%s); their annotations are skipped",
                self.ann_file,
                ", ".join(map(repr, self.unknown_categories)),
                ", ".join(self.class_names),
            )
        if reference and raw["images"] and not any(isinstance(img, dict) and "reference" in img for img in raw["images"]):
            raise DatasetError(
                f"{self.ann_file}: no image entry has a 'reference'; a reference model needs each image's golden board "
                "(convert deeppcb writes them; convert voc|yolo --references DIR)"
            )
        images, dropped_ids = self._images(raw["images"])
        if max_images is not None:  # a subset spread over the file (annotation files list images group by group)
            ids = sorted(images)
            chosen = {ids[i] for i in evenly_spaced(len(ids), max_images)}
            dropped_ids |= set(ids) - chosen
            images = {i: images[i] for i in ids if i in chosen}
        kept_anns = self._annotations(raw["annotations"], images, dropped_ids, cat_to_label, cat_names)

        categories = [c for c in raw["categories"] if c["id"] in cat_to_label]
        self.coco = build_coco(raw.get("info", {}), list(images.values()), kept_anns, categories)
        self.image_ids: list[int] = sorted(images)
        self._records = [self._record(images[i], kept_anns.get(i, []), cat_to_label, k) for k, i in enumerate(self.image_ids)]
        self._failed = torch.zeros(len(self._records), dtype=torch.int8).share_memory_()  # [N] load-failure code, any worker
        self._verified = torch.zeros(len(self._records), dtype=torch.int8).share_memory_()  # [N] 1: its pair passed the golden check
        if sum(self.skipped.values()):
            logger.warning("%s", self.report())

    def _bad(self, reason: str, where: str, detail: str = "") -> None:
        """Raise (on_bad='error') or count under ``reason`` and log one bad input found at ``where``."""
        message = f"{where}: {reason}" + (f" ({detail})" if detail else "")
        if self.on_bad == "error":
            raise DatasetError(message)
        self._found[reason] += 1
        if self._found[reason] <= _MAX_WARNINGS_PER_REASON:
            logger.warning("skipping %s", message)

    @property
    def skipped(self) -> Counter[str]:
        """Bad inputs skipped so far, by reason: those found while reading the annotations, plus the images
        found unreadable when loaded, by this process or any DataLoader worker (``_found`` counts those of
        this process only, so their count comes from the shared flags)."""
        counts = Counter(self._found)
        for code, reason in enumerate(_LOAD_FAILURES, start=1):
            del counts[reason]
            found = int((self._failed == code).sum())
            if found:
                counts[reason] = found
        return counts

    def _categories(self, categories: list[Any]) -> tuple[dict[int, int], dict[int, str]]:
        """``label -> category id`` for the class names present (matched by name), and ``category id -> name`` for all."""
        label_to_cat: dict[int, int] = {}
        names: dict[int, str] = {}
        for cat in categories:
            if not isinstance(cat, dict) or not isinstance(cat.get("id"), int) or not isinstance(cat.get("name"), str):
                raise DatasetError(f"{self.ann_file}: malformed category entry {cat!r}")
            if cat["id"] in names:
                raise DatasetError(f"{self.ann_file}: category id {cat['id']} appears twice")
            names[cat["id"]] = cat["name"]
            if cat["name"] in self.class_names:
                label = self.class_names.index(cat["name"])
                if label in label_to_cat:
                    raise DatasetError(f"{self.ann_file}: category name {cat['name']!r} appears twice")
                label_to_cat[label] = cat["id"]
        return label_to_cat, names

    def _images(self, entries: list[Any]) -> tuple[dict[int, dict[str, Any]], set[int]]:
        """Images whose file exists and is non-empty, by id; and the ids of the dropped ones."""
        images: dict[int, dict[str, Any]] = {}
        dropped: set[int] = set()
        for img in entries:
            if not valid_image_entry(img):
                self._bad("malformed image entry", f"{self.ann_file}: {img!r}", "needs int id, file_name, positive int width and height")
                continue
            where = f"{self.ann_file}: image id {img['id']}"
            if img["id"] in images:
                self._bad("duplicate image id", where)
                continue
            path = self.images_root / img["file_name"]
            size = file_size(path)
            if size is None:
                self._bad("missing image file", str(path))
                dropped.add(img["id"])
                continue
            if size == 0:
                self._bad("zero-byte image file", str(path))
                dropped.add(img["id"])
                continue
            if self.reference and not self._reference_ok(img, where):
                dropped.add(img["id"])
                continue
            images[img["id"]] = img
        return images, dropped

    def _reference_ok(self, img: dict[str, Any], where: str) -> bool:
        """Whether an image entry names a reference file that exists and is non-empty (else counted as bad)."""
        name = img.get("reference")
        if not isinstance(name, str) or not name:
            self._bad("image has no reference", where, "a reference model needs each image entry's 'reference' file")
            return False
        path = self.images_root / name
        size = file_size(path)
        if size is None:
            self._bad("missing reference file", str(path), f"reference of {img['file_name']}")
            return False
        if size == 0:
            self._bad("zero-byte reference file", str(path))
            return False
        return True

    def _annotations(
        self,
        entries: list[Any],
        images: dict[int, dict[str, Any]],
        dropped_ids: set[int],
        cat_to_label: dict[int, int],
        cat_names: dict[int, str],
    ) -> dict[int, list[dict[str, Any]]]:
        """Validate annotations; returns the kept ones (boxes clipped within the slop) per image id.

        Annotations of images dropped for a bad file go with their image without being counted again.
        """
        kept: dict[int, list[dict[str, Any]]] = {}
        seen: set[int] = set()
        for ann in entries:
            if not valid_annotation_entry(ann):
                needs = "needs int id, image_id, category_id, a bbox of 4 numbers, iscrowd 0 or 1"
                self._bad("malformed annotation", f"{self.ann_file}: {ann!r}", needs)
                continue
            where = f"{self.ann_file}: annotation id {ann['id']}"
            if ann["id"] in seen:  # the first one with this id is kept; a second would count a box twice
                self._bad("duplicate annotation id", where, "an earlier annotation has this id")
                continue
            seen.add(ann["id"])
            if ann["image_id"] not in images:
                if ann["image_id"] not in dropped_ids:
                    self._bad("annotation references a missing image id", where, f"image_id {ann['image_id']}")
                continue
            if ann["category_id"] not in cat_to_label:
                name = cat_names.get(ann["category_id"])
                what = (
                    f"category {name!r} not in class_names" if name is not None else f"category id {ann['category_id']} not in categories"
                )
                self._bad("unknown category", where, what)
                continue
            img = images[ann["image_id"]]
            x, y, w, h = (float(v) for v in ann["bbox"])
            if w <= 0 or h <= 0:
                self._bad("degenerate box", where, f"width {w:g}, height {h:g}")
                continue
            x1, y1, x2, y2 = x, y, x + w, y + h
            if x1 < -_BOX_SLOP or y1 < -_BOX_SLOP or x2 > img["width"] + _BOX_SLOP or y2 > img["height"] + _BOX_SLOP:
                self._bad(
                    "box outside image", where, f"xyxy {[x1, y1, x2, y2]} in the {img['width']}x{img['height']} image {img['file_name']}"
                )
                continue
            x1, x2 = min(max(x1, 0.0), img["width"]), min(max(x2, 0.0), img["width"])
            y1, y2 = min(max(y1, 0.0), img["height"]), min(max(y2, 0.0), img["height"])
            if x2 <= x1 or y2 <= y1:
                self._bad("box outside image", where, "no area inside the image")
                continue
            area = ann.get("area") if is_number(ann.get("area")) and ann["area"] >= 0 else (x2 - x1) * (y2 - y1)
            clean = dict(ann, bbox=[x1, y1, x2 - x1, y2 - y1], area=float(area), iscrowd=int(ann.get("iscrowd", 0)))
            kept.setdefault(ann["image_id"], []).append(clean)
        return kept

    def _record(self, img: dict[str, Any], anns: list[dict[str, Any]], cat_to_label: dict[int, int], index: int) -> _Record:
        anns = [a for a in anns if not a.get("iscrowd", 0)]
        boxes = np.array(
            [[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3]] for a in anns], dtype=np.float32
        )
        labels = np.array([cat_to_label[a["category_id"]] for a in anns], dtype=np.int64)
        return _Record(
            path=str(self.images_root / img["file_name"]),
            image_id=int(img["id"]),
            width=int(img["width"]),
            height=int(img["height"]),
            boxes=boxes.reshape(-1, 4),
            labels=labels,
            reference=str(self.images_root / img["reference"]) if self.reference else None,
            index=index,
        )

    def files(self) -> list[tuple[int, str, str | None]]:
        """``(image_id, image path, golden image path or None)`` of every image, in order: what the inspection
        commands (``val``, ``calibrate``) read through the frame pipeline instead of :meth:`__getitem__`."""
        return [(rec.image_id, rec.path, rec.reference) for rec in self._records]

    def report(self) -> str:
        """A one-line summary, e.g. ``'ann.json: 98 images, 640 boxes; skipped: degenerate box x1; missing image file x2'``."""
        head = f"{self.ann_file}: {len(self._records)} images, {sum(len(r.labels) for r in self._records)} boxes"
        if not self.skipped:
            return f"{head}; nothing skipped"
        parts = [f"{reason} x{count}" for reason, count in sorted(self.skipped.items())]
        return f"{head}; skipped: " + "; ".join(parts)

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, dict[str, Any]]:
        n = len(self._records)
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for {n} images")
        for attempt in range(min(n, _MAX_READ_ATTEMPTS)):
            j = (index + attempt) % n
            if self._failed[j]:
                continue
            try:
                return self._load(self._records[j])
            except DatasetError as exc:
                if self.on_bad == "error":
                    raise
                reason = exc.reason if isinstance(exc, SampleError) else _UNREADABLE
                self._failed[j] = _LOAD_FAILURES.index(reason) + 1
                self._bad(reason, str(exc))
        raise DatasetError(f"{self.ann_file}: no readable image within {_MAX_READ_ATTEMPTS} samples of index {index}")

    def load_pair(self, image_id: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The original image of ``image_id`` as uint8 ``[H, W]`` and, for a reference dataset, its reference as the
        samples see it (registered into the image's frame when ``register``), else None; no augmentation, no
        letterbox. Raises :class:`DatasetError` for an unknown id or an unreadable or unregistrable pair
        (the error gallery's ``load_pair``, ``engine/gallery.py``)."""
        rec = next((r for r in self._records if r.image_id == image_id), None)
        if rec is None:
            raise DatasetError(f"{self.ann_file}: no image with id {image_id}")
        image = self._read(rec.path, _UNREADABLE)
        return image, self._aligned_reference(rec, image) if self.reference else None

    def _read(self, path: str, reason: str) -> np.ndarray:
        """Decode ``path`` as uint8 ``[H, W]`` (warning once per conversion kind); :class:`SampleError` with ``reason``."""
        try:
            image, kinds = decode_gray(path)
        except DatasetError as exc:
            raise SampleError(str(exc), reason) from exc
        for kind in kinds:
            if kind not in self._warned:
                self._warned.add(kind)
                logger.warning("%s: converting %s images to 8-bit grayscale (first: %s)", self.ann_file, kind, path)
        return image

    def _aligned_reference(self, rec: _Record, image: np.ndarray) -> np.ndarray:
        """The record's reference as uint8 ``[H, W]`` in the image's frame: registered when ``self.register``, else used as
        given; either way it must pass the golden check (``align/golden_check.py``: the same design, aligned), once per
        image (the result is shared with the loader's workers), or the sample is a counted skip."""
        assert rec.reference is not None
        reference = self._read(rec.reference, _UNREADABLE_REFERENCE)
        if self.register:
            reference, result = register_reference(reference, image)
        elif self._verified[rec.index]:
            return reference
        else:
            result = check_pair(reference, image)
        if not result.ok:
            raise SampleError(f"{rec.reference}: does not match {rec.path} ({result.reason})", _MISREGISTERED)
        self._verified[rec.index] = 1
        return reference

    def _load(self, rec: _Record) -> tuple[torch.Tensor, dict[str, Any]]:
        image = self._read(rec.path, _UNREADABLE)
        if image.shape != (rec.height, rec.width):
            raise DatasetError(f"{rec.path}: image is {image.shape[1]}x{image.shape[0]}, annotations say {rec.width}x{rec.height}")
        boxes, labels = rec.boxes, rec.labels
        if self.reference:
            reference = self._aligned_reference(rec, image)
            image, reference, boxes, labels = apply_pair_transforms(self.transform, image, reference, boxes, labels)
            canvas, meta = letterbox(image, self.imgsz)
            channels = np.stack([canvas, letterbox(reference, self.imgsz)[0]])
        else:
            if self.transform is not None:
                image, boxes, labels = apply_transforms(self.transform, image, boxes, labels)
            canvas, meta = letterbox(image, self.imgsz)
            channels = canvas[None]
        tensor = torch.from_numpy(channels).float().div_(255.0)
        target = {
            "boxes": boxes_to_letterbox(torch.from_numpy(boxes.astype(np.float32)).reshape(-1, 4), meta),
            "labels": torch.from_numpy(labels.astype(np.int64)),
            "image_id": rec.image_id,
            "letterbox": meta,
        }
        return tensor, target
