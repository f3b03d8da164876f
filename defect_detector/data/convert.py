"""Convert DeepPCB, Pascal VOC and YOLO annotations to COCO dicts.

Every converter returns ``{"info": {"images_root", "description"}, "images", "annotations",
"categories"}`` with ``file_name`` relative to ``info.images_root`` (an absolute path), COCO
``bbox = [x, y, w, h]`` in pixels, category ids ``1..C`` and image ids ``1..N`` in file order.
Write the result with :func:`defect_detector.core.io.atomic_write_json`.
"""

from __future__ import annotations

import copy
import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.core.errors import DatasetError
from defect_detector.data.images import image_files, read_image


def _image_size(path: Path) -> tuple[int, int]:
    """``(width, height)`` of an image file, decoding it (OpenCV has no header-only reader)."""
    try:
        found = path.is_file()
    except (OSError, ValueError):  # ValueError: a name the OS cannot take (a NUL byte)
        found = False
    if not found:
        raise DatasetError(f"{path}: missing image")
    image = read_image(path)  # the one decoder: a truncated, corrupt or too large file is one line naming why
    return int(image.shape[1]), int(image.shape[0])


def _read_text(path: Path, what: str) -> str:
    """The UTF-8 text of ``path``; :class:`DatasetError` naming it when it cannot be read or is not UTF-8 text."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise DatasetError(f"{path}: cannot read {what}: {exc}") from exc


def _finite(where: str, values: Sequence[float]) -> None:
    """:class:`DatasetError` at ``where`` unless every coordinate is finite (NaN and inf boxes are no boxes)."""
    if not all(math.isfinite(v) for v in values):
        raise DatasetError(f"{where}: non-finite box coordinate in {list(values)}")


def _coco(
    images: list[dict[str, Any]], annotations: list[dict[str, Any]], class_names: Sequence[str], root: Path, description: str
) -> dict[str, Any]:
    return {
        "info": {"images_root": str(root.resolve()), "description": description},
        "images": images,
        "annotations": annotations,
        "categories": [{"id": i + 1, "name": name} for i, name in enumerate(class_names)],
    }


def _annotation(ann_id: int, image_id: int, category_id: int, x1: float, y1: float, x2: float, y2: float) -> dict[str, Any]:
    w, h = x2 - x1, y2 - y1
    return {"id": ann_id, "image_id": image_id, "category_id": category_id, "bbox": [x1, y1, w, h], "area": w * h, "iscrowd": 0}


TEMPLATE_SUFFIX = "_temp.jpg"


def deeppcb_to_coco(src_dir: str | os.PathLike[str], split_file: str | os.PathLike[str], templates: bool = False) -> dict[str, Any]:
    """COCO dict for the DeepPCB pairs listed in ``split_file``.

    Each split line is ``groupX/X/<id>.jpg groupX/X_not/<id>.txt`` (relative to ``src_dir``); the
    inspected image is ``groupX/X/<id>_test.jpg``. Annotation lines are ``x1 y1 x2 y2 type``
    (pixels, type 1..6 = category id, see ``DEEPPCB_CLASSES``). A malformed line raises
    :class:`DatasetError` naming the file and line number. Each inspected image's ``reference`` is its
    defect-free template ``groupX/X/<id>_temp.jpg`` (golden-template inspection). With ``templates``,
    each template also follows its inspected image as an image without annotations (hard negatives:
    the same pads, holes and tracks, none of them a defect), with itself as its reference (a pair with
    no difference and no defect).
    """
    src = Path(src_dir)
    split = Path(split_file)
    lines = _read_text(split, "split file").splitlines()
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    seen: set[str] = set()
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2:
            raise DatasetError(f"{split}:{line_no}: expected 'IMAGE.jpg ANNOTATION.txt', got {line!r}")
        image_rel, txt_rel = fields
        stem, _ = os.path.splitext(image_rel)
        file_name = f"{stem}_test.jpg"
        if file_name in seen:
            raise DatasetError(f"{split}:{line_no}: {image_rel} is listed twice")
        seen.add(file_name)
        width, height = _image_size(src / file_name)
        template = stem + TEMPLATE_SUFFIX
        if not (src / template).is_file():
            raise DatasetError(f"{src / template}: missing template (the reference of {file_name})")
        image_id = len(images) + 1
        images.append({"id": image_id, "file_name": file_name, "width": width, "height": height, "reference": template})
        for x1, y1, x2, y2, category_id in _read_deeppcb_txt(src / txt_rel):
            annotations.append(_annotation(len(annotations) + 1, image_id, category_id, x1, y1, x2, y2))
        if templates:
            width, height = _image_size(src / template)
            images.append({"id": len(images) + 1, "file_name": template, "width": width, "height": height, "reference": template})
    return _coco(images, annotations, DEEPPCB_CLASSES, src, f"DeepPCB split {split.name}")


def _read_deeppcb_txt(path: Path) -> list[tuple[float, float, float, float, int]]:
    lines = _read_text(path, "annotation file").splitlines()
    out = []
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        fields = line.replace(",", " ").split()
        if len(fields) != 5:
            raise DatasetError(f"{path}:{line_no}: expected 'x1 y1 x2 y2 type', got {line!r}")
        try:
            x1, y1, x2, y2 = (float(v) for v in fields[:4])
            kind = int(fields[4])
        except ValueError as exc:
            raise DatasetError(f"{path}:{line_no}: non-numeric field in {line!r}") from exc
        _finite(f"{path}:{line_no}", (x1, y1, x2, y2))
        if not 1 <= kind <= len(DEEPPCB_CLASSES):
            raise DatasetError(f"{path}:{line_no}: unknown defect type {kind} (expected 1..{len(DEEPPCB_CLASSES)})")
        out.append((x1, y1, x2, y2, kind))
    return out


def voc_to_coco(
    xml_dir: str | os.PathLike[str], images_dir: str | os.PathLike[str], class_names: Sequence[str] | None = None
) -> dict[str, Any]:
    """COCO dict from Pascal VOC xml files (``*.xml`` in ``xml_dir``, sorted by name).

    ``<filename>`` is taken relative to ``images_dir``; box corners ``xmin ymin xmax ymax`` are used
    as pixel xyxy unchanged. ``class_names`` fixes the category order; None collects the names found,
    sorted. An object whose name is not in ``class_names`` raises :class:`DatasetError`.
    """
    root = Path(images_dir)
    parsed = [_parse_voc(path) for path in sorted(Path(xml_dir).glob("*.xml"))]
    names = tuple(class_names) if class_names is not None else tuple(sorted({obj[0] for _, _, _, objs, _ in parsed for obj in objs}))
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for file_name, width, height, objects, xml_path in parsed:
        if width <= 0 or height <= 0:
            width, height = _image_size(root / file_name)
        image_id = len(images) + 1
        images.append({"id": image_id, "file_name": file_name, "width": width, "height": height})
        for name, x1, y1, x2, y2 in objects:
            if name not in names:
                raise DatasetError(f"{xml_path}: unknown class {name!r} (known: {', '.join(names)})")
            annotations.append(_annotation(len(annotations) + 1, image_id, names.index(name) + 1, x1, y1, x2, y2))
    return _coco(images, annotations, names, root, f"converted from Pascal VOC {xml_dir}")


def _parse_voc(path: Path) -> tuple[str, int, int, list[tuple[str, float, float, float, float]], Path]:
    """``(filename, width, height, [(name, x1, y1, x2, y2)], path)``; width/height 0 when absent."""
    try:
        tree = ET.parse(path)
    except (ET.ParseError, ValueError, LookupError) as exc:  # LookupError: an unknown declared encoding
        raise DatasetError(f"{path}: malformed XML: {exc}") from exc
    node = tree.getroot()
    file_name = (node.findtext("filename") or "").strip()
    if not file_name:
        raise DatasetError(f"{path}: missing <filename>")
    try:
        width = int(float(node.findtext("size/width") or 0))
        height = int(float(node.findtext("size/height") or 0))
        objects = []
        for obj in node.iter("object"):
            name = (obj.findtext("name") or "").strip()
            box = obj.find("bndbox")
            if not name or box is None:
                raise DatasetError(f"{path}: <object> needs <name> and <bndbox>")
            coords = [float(box.findtext(tag) or "nan") for tag in ("xmin", "ymin", "xmax", "ymax")]
            _finite(f"{path}: object {name!r}", coords)
            objects.append((name, *coords))
    except (ValueError, OverflowError) as exc:  # OverflowError: int(float("inf"))
        raise DatasetError(f"{path}: non-numeric size or box: {exc}") from exc
    return file_name, width, height, objects, path


def yolo_to_coco(labels_dir: str | os.PathLike[str], images_dir: str | os.PathLike[str], class_names: Sequence[str]) -> dict[str, Any]:
    """COCO dict from YOLO labels: one ``<stem>.txt`` per image with lines ``class cx cy w h``
    (class index into ``class_names``, centre and size normalised to [0, 1]).

    Every image in ``images_dir`` (``data/images.py`` ``image_files``: sorted, any of its image suffixes) becomes an
    image entry; a missing label file means no objects. Image sizes are read from the files.
    """
    root = Path(images_dir)
    labels = Path(labels_dir)
    names = tuple(class_names)
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for path in image_files(root):
        width, height = _image_size(path)
        image_id = len(images) + 1
        images.append({"id": image_id, "file_name": path.name, "width": width, "height": height})
        txt = labels / f"{path.stem}.txt"
        if not txt.exists():
            continue
        for line_no, line in enumerate(_read_text(txt, "label file").splitlines(), start=1):
            if not line.strip():
                continue
            fields = line.split()
            if len(fields) != 5:
                raise DatasetError(f"{txt}:{line_no}: expected 'class cx cy w h', got {line!r}")
            try:
                cls = int(fields[0])
                cx, cy, bw, bh = (float(v) for v in fields[1:])
            except ValueError as exc:
                raise DatasetError(f"{txt}:{line_no}: non-numeric field in {line!r}") from exc
            if not 0 <= cls < len(names):
                raise DatasetError(f"{txt}:{line_no}: class {cls} out of range 0..{len(names) - 1}")
            _finite(f"{txt}:{line_no}", (cx, cy, bw, bh))
            x1, y1 = (cx - bw / 2) * width, (cy - bh / 2) * height
            x2, y2 = (cx + bw / 2) * width, (cy + bh / 2) * height
            annotations.append(_annotation(len(annotations) + 1, image_id, cls + 1, x1, y1, x2, y2))
    return _coco(images, annotations, names, root, f"converted from YOLO {labels_dir}")


def attach_references(coco: dict[str, Any], references_dir: str | os.PathLike[str]) -> list[str]:
    """Give each image entry of ``coco`` its golden ``reference``: the file in ``references_dir`` with the
    image's relative path, else the first with its file name (searched recursively). ``reference`` is
    written relative to ``info.images_root``. Returns the ``file_name`` of the images left without one
    (the dataset then counts them as bad inputs for a reference model). Modifies ``coco`` in place.
    """
    refs = Path(references_dir)
    if not refs.is_dir():
        raise DatasetError(f"{refs}: references folder not found")
    root = Path(coco["info"]["images_root"]).resolve()
    by_name: dict[str, Path] = {}
    for path in image_files(refs, recursive=True):
        by_name.setdefault(path.name, path)
    missing = []
    for img in coco["images"]:
        candidate = refs / img["file_name"]
        found = candidate if candidate.is_file() else by_name.get(Path(img["file_name"]).name)
        if found is None:
            missing.append(img["file_name"])
            continue
        img["reference"] = os.path.relpath(found.resolve(), root)
    return missing


def _group(file_name: str) -> str:
    return file_name.replace("\\", "/").split("/", 1)[0]


def split_deeppcb_by_group(coco: dict[str, Any], val_groups: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a DeepPCB COCO dict by board group (the ``groupNNNNN`` folder of ``file_name``).

    ``val_groups`` accepts ``"group20085"`` or ``"20085"``. Returns ``(train, val)`` dicts that keep
    image/annotation ids, categories and info. Templates (``*_temp.jpg``) of held-out groups are left
    out of both: validation scores inspected images only, as DeepPCB's protocol does. An unknown group
    raises :class:`DatasetError`.
    """
    wanted = {g if g.startswith("group") else f"group{g}" for g in val_groups}
    present = {_group(img["file_name"]) for img in coco["images"]}
    missing = sorted(wanted - present)
    if missing:
        raise DatasetError(f"unknown DeepPCB group(s) {', '.join(missing)} (present: {', '.join(sorted(present))})")
    parts = []
    for in_val in (False, True):
        images = [
            img
            for img in coco["images"]
            if (_group(img["file_name"]) in wanted) == in_val and not (in_val and img["file_name"].endswith(TEMPLATE_SUFFIX))
        ]
        ids = {img["id"] for img in images}
        part = {k: copy.deepcopy(v) for k, v in coco.items() if k not in ("images", "annotations")}
        part["images"] = copy.deepcopy(images)
        part["annotations"] = [copy.deepcopy(a) for a in coco["annotations"] if a["image_id"] in ids]
        parts.append(part)
    return parts[0], parts[1]
