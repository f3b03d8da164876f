"""The boards ``teach`` makes from a design's golden image, each set written as PNG pairs and a COCO json.

Every board is a *line capture*: the golden image as a line's day delivers it, every factor of the capture model
(``core/capture.py``: moved by up to 25 px and 1.5 degrees, scaled within 0.5%, perspective, lens distortion, a bowed
board, gain, gamma, offset, a light gradient, defocus, noise and JPEG) together, and for a binarized line's design
(:data:`BINARIZED`) thresholded as that line thresholds its frames; its ``reference`` is the golden image as given.
Sets, under ``<out>_teach/``:

- ``clean/``: defect-free captures (every call on them is a false call): the design's operating point and, for
  weights without one, the drift baseline;
- ``held/``: captures with 1-4 defects painted first (``looks/paint.py``), never trained on: painted recall;
- for a fine-tune only: ``train/`` (clean captures that training paints on, plus the rehearsal boards), ``select/``
  (painted captures that choose ``best.pt``) and ``rehearsal/`` (real DeepPCB defects rendered as photographs,
  ``data/rehearsal/``, scored before and after).

A golden image is read once (:func:`read_designs`); one larger than :data:`VIEW_SIDE` by half is taught on up to
:data:`MAX_VIEWS` crops of that side (the busiest of a grid over it), so a 9000x9000 golden image costs what a
1024x1024 one does. Each board's file stem starts ``d<design index>_`` (``jobs/teach_point.py`` ``design_index``).
Writers stop at a deadline (:func:`until`), keeping what they wrote.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import cv2
import numpy as np

from defect_detector.core.capture import CAPTURE, Capture, CaptureModel, draw_capture
from defect_detector.data.images import load_image_gray, pixel_fingerprint
from defect_detector.data.photo_sets import moved, rendered_pairs, write_pairs
from defect_detector.looks.paint import paint_defects
from defect_detector.looks.render import capture
from defect_detector.monitor.domain import DesignStats, design_stats

BINARIZED = 0.98
"""Share of a golden image's pixels at its two levels (``monitor/domain.py`` ``DesignStats.binary``) from which it is a
binarized line's design (DeepPCB's templates: 1.0; photographs: 0.1-0.6)."""
MIN_SIDE = 128
"""The smallest golden image side ``teach`` takes (px): a painted defect's box is 26 px or more, and a capture moves
up to 25 px."""
VIEW_SIDE = 1024
MAX_VIEWS = 4
REHEARSAL = Path(__file__).resolve().parent.parent / "data" / "rehearsal" / "annotations.json"
REHEARSED = 24
"""Rehearsal boards a fine-tune trains on; the rest of ``data/rehearsal/`` (8) are scored before and after."""

_Pair = tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
_NONE = (np.zeros((0, 4), np.float32), np.zeros(0, np.int64))


@dataclass(frozen=True)
class TeachDesign:
    """One golden image: ``index`` (its boards' ``d<index>_`` prefix), ``name`` (file name), ``key`` (fingerprint of
    its gray pixels, what ``predict`` knows it by), ``image`` uint8 ``[H, W]``, ``views``: uint8 ``[h, w]`` crops of it
    (or the whole image) that its boards are made from; ``look``: its golden image's look (``monitor/domain.py``
    ``design_stats``), read once."""

    index: int
    name: str
    key: str
    image: np.ndarray = field(repr=False)
    views: tuple[np.ndarray, ...] = field(repr=False)
    look: DesignStats = field(repr=False)

    @property
    def binarized(self) -> bool:
        """A binarized line's design (its golden image :data:`BINARIZED` at two levels): its captures are thresholded
        as that line thresholds its frames."""
        return self.look.binary >= BINARIZED

    @property
    def area_factor(self) -> float:
        """Whole-image area over a view's mean area: false calls per view times this are false calls per board."""
        return self.image.size / float(np.mean([v.size for v in self.views]))


def design_views(image: np.ndarray, side: int = VIEW_SIDE, most: int = MAX_VIEWS) -> tuple[np.ndarray, ...]:
    """``image`` (uint8 ``[H, W]``) itself when no side exceeds 1.5 ``side``, else the ``most`` crops of a
    ``side``-square grid over it with the most grey-level spread (tracks and pads, not a bare pour)."""
    h, w = image.shape
    if max(h, w) <= side * 1.5:
        return (image,)
    sh, sw = min(h, side), min(w, side)
    ys = np.linspace(0, h - sh, math.ceil(h / side)).round().astype(int)
    xs = np.linspace(0, w - sw, math.ceil(w / side)).round().astype(int)
    crops = [image[y : y + sh, x : x + sw] for y in ys for x in xs]
    spread = [float(c[::4, ::4].std()) for c in crops]
    return tuple(crops[i] for i in sorted(np.argsort(spread)[::-1][:most]))


def read_designs(goldens: list[Path]) -> list[TeachDesign]:
    """Each golden image read once, checked before any work: ``ValueError`` naming a file that cannot be read (in
    one line) or is under :data:`MIN_SIDE` px a side, with its size."""
    designs = []
    for index, path in enumerate(goldens):
        try:
            image = load_image_gray(path)
        except ValueError as exc:
            raise ValueError(f"{path}: cannot teach it: {exc}") from exc
        h, w = image.shape
        if min(h, w) < MIN_SIDE:
            raise ValueError(f"{path}: a {w}x{h} px golden image is too small to teach (needs at least {MIN_SIDE} px a side)")
        designs.append(TeachDesign(index, path.name, pixel_fingerprint(image), image, design_views(image), design_stats(image)))
    return designs


def _capture(shape: tuple[int, int], rng: np.random.Generator, model: CaptureModel, binarized: bool) -> Capture:
    """A capture of ``model`` for a view of ``shape``, its moves at most 1.5% of the shorter side (a small golden image
    is a crop of a larger frame, moved by as many of its own pixels); ``binarized``: thresholded as a binarized line's."""
    reach = min(max(abs(v) for v in model.shift), 0.015 * min(shape))
    capture = draw_capture(shape, rng, replace(model, shift=(-reach, reach)))
    return replace(capture, light=replace(capture.light, threshold=True)) if binarized else capture


def until(items: Iterable[_Pair], deadline: float, least: int) -> Iterator[_Pair]:
    """``items`` while ``time.perf_counter()`` is before ``deadline``, and at least the first ``least`` of them."""
    for n, item in enumerate(items):
        if n >= least and time.perf_counter() > deadline:
            return
        yield item


def clean_pairs(
    designs: list[TeachDesign], per_design: int, rng: np.random.Generator, tag: str = "clean", model: CaptureModel = CAPTURE
) -> Iterator[_Pair]:
    """``per_design`` defect-free line captures of each design, round-robin over designs (a deadline cuts evenly)."""
    for n in range(per_design):
        for d in designs:
            view = d.views[n % len(d.views)]
            yield f"d{d.index:02d}_{tag}{n:03d}", _capture(view.shape, rng, model, d.binarized).apply(view), view, *_NONE


def painted_pairs(
    designs: list[TeachDesign], per_design: int, rng: np.random.Generator, tag: str, model: CaptureModel = CAPTURE
) -> Iterator[_Pair]:
    """``per_design`` line captures of each design with 1-4 defects painted first, their boxes moved with the board."""
    for n in range(per_design):
        for d in designs:
            view = d.views[n % len(d.views)]
            board, boxes, labels = paint_defects(view, int(rng.integers(1, 5)), rng)
            capture = _capture(view.shape, rng, model, d.binarized)
            moved, keep = capture.geometry.boxes(boxes)
            yield f"d{d.index:02d}_{tag}{n:03d}", capture.apply(board), view, moved[keep].astype(np.float32), labels[keep]


def training_pairs(designs: list[TeachDesign], total: int, rng: np.random.Generator) -> Iterator[_Pair]:
    """``total`` clean second captures (spread over the designs' views) that training paints defects on."""
    for n in range(total):
        d = designs[n % len(designs)]
        view = d.views[(n // len(designs)) % len(d.views)]
        board = moved(capture(view.astype(np.float32), rng, strength=0.6), rng, 3.0, 0.3)
        if d.binarized:
            board = cv2.threshold(board, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)[1]
        yield f"d{d.index:02d}_train{n:03d}", board, view, *_NONE


def rehearsal_json(work: Path, part: str) -> Path:
    """A COCO json under ``work`` of the rehearsal boards trained on (``part`` "train": the first :data:`REHEARSED`)
    or scored ("score": the rest), read from the package's ``data/rehearsal/``."""
    raw = json.loads(REHEARSAL.read_text())
    images = raw["images"][:REHEARSED] if part == "train" else raw["images"][REHEARSED:]
    ids = {i["id"] for i in images}
    info = {**raw.get("info", {}), "images_root": str(REHEARSAL.parent)}
    out = work / f"rehearsal_{part}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    subset = {**raw, "info": info, "images": images, "annotations": [a for a in raw["annotations"] if a["image_id"] in ids]}
    out.write_text(json.dumps(subset))
    return out


def rehearsal_pairs(work: Path, part: str, seed: int) -> Iterator[_Pair]:
    """The rehearsal boards of ``part`` (:func:`rehearsal_json`) rendered as photographs of training looks."""
    return rendered_pairs(rehearsal_json(work, part), family="train", seed=seed)


def write_set(out: Path, pairs: Iterable[_Pair], deadline: float, least: int, what: str) -> Path:
    """Write ``pairs`` (at least ``least``, more while before ``deadline``) under ``out``; returns the json's path."""
    return write_pairs(out, until(pairs, deadline, least), what)


def set_size(path: Path) -> int:
    """Images in the COCO json at ``path``."""
    return len(json.loads(path.read_text())["images"])


def spread(total: int, designs: int, least: int, most: int) -> int:
    """Boards per design for about ``total`` over ``designs``, within ``[least, most]``."""
    return int(np.clip(math.ceil(total / designs), least, most))
