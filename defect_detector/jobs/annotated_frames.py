"""Frames of a COCO json, read ahead in a thread: what ``val`` and ``calibrate`` feed the frame pipeline.

Each frame is decoded as ``predict`` decodes a file (``data/images.py``, the one conversion to 8-bit gray) with its
golden image file decoded beside it; registration is the frame path's registration stage (``align/register.py``:
the design's ``Registrar``), as in ``predict``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from defect_detector.core.errors import DatasetError
from defect_detector.data.images import ConversionNotice, gray_from_file, read_image

log = logging.getLogger("defect_detector.inspect")

READ_AHEAD = 4
"""Frames decoded ahead of the model by the reading thread."""


@dataclass
class AnnotatedFrame:
    """One image of the json. ``image``: uint8 ``[H, W]`` (None when unreadable, ``error`` says why); ``golden``: its
    golden image as decoded, gray uint8 (None without one, or unreadable: ``error``)."""

    image_id: int
    name: str
    image: np.ndarray | None
    golden: np.ndarray | None = None
    error: str | None = None


def _decode(path: str, notice: ConversionNotice) -> np.ndarray:
    """The gray frame of the file at ``path``, decoded as ``predict``'s sources decode a file (``data/images.py``)."""
    raw = read_image(path)
    gray, kinds = gray_from_file(path, raw)
    notice.note(raw, kinds, Path(path).name)
    return gray


def _read(entry: tuple[int, str, str | None], root: Path, notice: ConversionNotice) -> AnnotatedFrame:
    image_id, path, golden = entry
    name = str(Path(path).relative_to(root)) if Path(path).is_relative_to(root) else Path(path).name
    try:
        image = _decode(path, notice)
    except DatasetError as exc:
        return AnnotatedFrame(image_id, name, None, error=str(exc))
    try:
        reference = _decode(golden, notice) if golden is not None else None
    except DatasetError as exc:
        return AnnotatedFrame(image_id, name, image, error=f"golden image: {exc}")
    return AnnotatedFrame(image_id, name, image, reference)


def annotated_frames(files: Sequence[tuple[int, str, str | None]], images_root: Path, source: str) -> Iterator[AnnotatedFrame]:
    """The frames of ``files`` (``CocoDetectionDataset.files()`` entries), in order, decoded by one thread up to
    :data:`READ_AHEAD` frames ahead; colour / 16-bit conversions are logged once for ``source``."""
    notice = ConversionNotice(source)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="read") as pool:
        pending = [pool.submit(_read, entry, images_root, notice) for entry in files[:READ_AHEAD]]
        for i in range(len(files)):
            frame = pending[i].result()
            if i + READ_AHEAD < len(files):
                pending.append(pool.submit(_read, files[i + READ_AHEAD], images_root, notice))
            yield frame
