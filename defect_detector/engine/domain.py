"""Fit the design domain (``monitor/domain.py``) a model's weights carry: from the golden images of its training set.

``strip WEIGHTS --domain SOURCE [--domain SOURCE2 ...] --out W2`` calls :func:`fit_domain` on the :func:`golden_paths`
of every ``SOURCE`` together (a COCO json's ``reference`` entries, a folder of golden images, an image) and stores
the result in the checkpoint (entry ``domain``), from which every export carries it in ``meta.json``. :func:`fit_domain`
takes any iterable of gray golden images, so a training set of rendered looks (no files) is fitted the same way. The
domain carries the scale the weights were validated at (``monitor/scale.py`` ``ScaleRange``, key ``scale_range``), read
from the same golden images.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from defect_detector.core.errors import DatasetError
from defect_detector.data.coco_json import read_json, resolve_images_root
from defect_detector.data.images import image_files, load_image_gray
from defect_detector.monitor.domain import DomainModel, design_stats
from defect_detector.monitor.scale import ScaleRange, image_scale

log = logging.getLogger("defect_detector.engine")


def golden_paths(source: str | os.PathLike[str], images_root: str | os.PathLike[str] | None = None) -> list[Path]:
    """The golden images of ``source``: a COCO json's distinct ``reference`` entries (in order of first use, under its
    images root), or the image files of a folder (sorted), or one image. ``DatasetError`` naming ``source`` when
    there are none, ``FileNotFoundError`` when it does not exist."""
    path = Path(source)
    if path.is_dir():
        found = image_files(path, recursive=True)
    elif path.suffix.lower() == ".json":
        raw = read_json(path)
        root = resolve_images_root(path, raw, images_root)
        names = [img.get("reference") for img in raw["images"] if isinstance(img, dict)]
        found = [root / name for name in dict.fromkeys(n for n in names if isinstance(n, str) and n)]
    elif path.is_file():
        found = [path]
    else:
        raise FileNotFoundError(f"{path}: golden images not found (a COCO json with reference entries, a folder or an image)")
    if not found:
        raise DatasetError(f"{path}: no golden images (a COCO json needs 'reference' entries; a folder, image files)")
    return found


def read_gray(path: str | os.PathLike[str]) -> np.ndarray:
    """uint8 ``[H, W]`` of the image at ``path`` (``DatasetError`` naming it when unreadable)."""
    return load_image_gray(path)


def fit_domain(images: Iterable[np.ndarray]) -> DomainModel:
    """A :class:`DomainModel` of gray uint8 ``[H, W]`` golden images (any iterable: files read lazily, or rendered looks),
    with the :class:`ScaleRange` of the same images. ``ValueError`` when fewer than 2 have two grey-level phases."""
    stats, scales = [], []
    for image in images:
        stats.append(design_stats(image))
        scales.append(image_scale(image))
    model = DomainModel.fit(stats)
    model.scale_range = ScaleRange.fit(scales)
    return model


def fit_domain_files(sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> DomainModel:
    """One :func:`fit_domain` on the :func:`golden_paths` of every source of ``sources`` (one source, or several fitted
    together; a golden image two sources name is counted once); an unreadable golden image is skipped, counted and
    logged (all unreadable: ``DatasetError``). ``FileNotFoundError`` / ``DatasetError`` naming a source without any."""
    return _fitted_files(sources, fit_domain, "design domain")


def fit_scale_files(sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> ScaleRange:
    """The :class:`ScaleRange` of the golden images of ``sources`` alone (as :func:`fit_domain_files` reads them): the
    scale weights were validated at, when their look domain was fitted on other images too (``strip --scale``: a model
    trained on zoomed renders is validated down to its finest training scale). ``DatasetError`` when fewer than 2 have
    two grey-level phases."""
    fitted = _fitted_files(sources, lambda images: ScaleRange.fit(image_scale(image) for image in images), "scale range")
    if fitted is None:
        named = ", ".join(map(str, [sources] if isinstance(sources, (str, os.PathLike)) else sources))
        raise DatasetError(f"{named}: fewer than 2 golden images with two grey levels to read a scale range on")
    return fitted


def _fitted_files(sources: Any, fit: Any, what: str) -> Any:
    """``fit`` of the readable golden images of ``sources`` (read lazily; the unreadable skipped, counted and logged)."""
    sources = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    paths = list(dict.fromkeys(p for source in sources for p in golden_paths(source)))
    skipped: list[str] = []

    def readable() -> Iterable[np.ndarray]:
        for p in paths:
            try:
                yield read_gray(p)
            except DatasetError as exc:
                skipped.append(str(exc))

    fitted = fit(readable())
    if skipped:
        log.warning("%s: %d of %d golden images unreadable and skipped (first: %s)", what, len(skipped), len(paths), skipped[0])
    return fitted


def extend_domain(domain: dict[str, Any] | None, images: Iterable[np.ndarray]) -> dict[str, Any] | None:
    """A checkpoint's ``domain`` entry (``DomainModel.to_dict()`` form, None: the weights carry none) with the looks of
    the taught golden images ``images`` (gray uint8 ``[H, W]``) added as references (:meth:`DomainModel.extend`), for
    ``teach`` to store in the weights it writes: those designs are then known, and validated at their scale (the
    domain's ``scale_range`` widened). None stays None (no domain, no warning)."""
    if domain is None:
        return None
    model = DomainModel.from_dict(domain, where="domain")
    images = list(images)
    model.extend([design_stats(image) for image in images])
    if model.scale_range is not None:
        model.scale_range = model.scale_range.widen([image_scale(image) for image in images])
    return model.to_dict()
