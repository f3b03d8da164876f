"""Hidden area: could the camera see every part of the board? Glare, a shadow or a hand, read at the scale of a defect.

The frame is cut into square cells of about a twentieth of its shorter side (:func:`cell_size`: 32 px at 640, at
least 16), about the size of a defect at the weights' working scale (a last partial row or column of cells is not
judged). Each cell is compared with the same cell of the registered golden image at the frame's levels (the
photometric registration's ``matched`` image, so a gain, tone or light gradient change is not hidden area) or, for a
single-image model, with the calibration frames' pixel levels. A pixel is *off* when it differs from the golden
image by more than ``shift``, :data:`LEVEL_SHIFT` of the golden image's contrast (its 5th to 95th percentile) or
:data:`NOISE_SHIFT` times the board's noise against it, whichever is larger (and from the golden image as captured
too: a light field the fit made up on a binarized pair whose whites clip is no hidden area), and lies in a solid
area of such pixels (an opening by a disk of a quarter cell: a track drawn thicker in the golden image, or a line it
lacks, is slivers).

- **glare**: over :data:`SATURATED_SHARE` of the cell saturated (``SATURATED``) beyond the golden image's share, on a golden
  image whose 99th percentile stays under :data:`NEVER_BRIGHT` (no defect can saturate a board whose golden image
  nowhere does); on a golden image that saturates (a binarized board: missing copper is substrate, 255), saturation
  says nothing, and glare is read as unlike cells;
- **unlike**: over :data:`UNLIKE` of the cell off, or the cell flat (:data:`FLAT`) at a level ``shift`` away from the
  golden cell's mean and from both the darkest and the brightest level the golden image shows in the cells around it:
  a hand, a cloth or a shadow at a level the board does not have there. A defect leaves a cell at one of the board's
  own levels (missing copper shows substrate), and a thin line missing from a cell leaves it mostly as it was;
- **dark**: an unlike cell whose mean lies ``shift`` below the golden image's (a hand, a shadow);
- single-image models: over :data:`UNLIKE` of a cell, in solid areas, at grey levels the calibration frames (almost)
  never show (``Baseline.pixel_levels``): a hand, a shadow or a glare's rim on a binarized board; and glare where the
  calibration frames never saturate. A glare's saturated core on a board whose substrate is white is not found.

Dark and unlike cells that touch (8-connected, after a closing that fills a one-cell gap) form a region; a glare
region of :data:`MIN_GLARE_CELLS` cells or more, or a region larger than the weights' limit
(``eval.hidden_max_area``, a share of the frame; its ROC: ``benchmarks/hidden_roc.py``), makes the frame
``not_inspected``, saying where: "glare over 3.1% of the board at x 1210, y 400". A defect changes a cell or two; a
glare spot or a hand over a defect covers it whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import cv2
import numpy as np

from defect_detector.core.constants import SATURATED
from defect_detector.core.frame_record import Prepared, StageContext
from defect_detector.core.refusal import Refusal, RefusalKind

SATURATED_SHARE = 0.3
"""Least share of a cell saturated beyond the golden image's for glare."""
NEVER_BRIGHT = 240
"""A golden image whose 99th percentile stays below this level cannot show a saturating defect."""
LEVEL_SHIFT = 0.1
"""Level difference, as a share of the golden image's contrast, that counts a pixel as off (module docstring)."""
NOISE_SHIFT = 4.0
"""Level difference, in units of the board's noise against the golden image, that counts a pixel as off."""
UNLIKE = 0.5
"""Least share of a cell's pixels off for an unlike cell."""
FLAT = 0.04
"""A cell is flat when its standard deviation is under this share of the golden image's contrast, or under
:data:`FLAT_NOISE` times the board's noise."""
FLAT_NOISE = 2.5
LEVEL_BINS = 32
"""Bins of the calibration frames' pixel levels (8 grey levels each)."""
RARE_LEVEL = 1e-3
"""Single-image models: a grey level is rare when its bin and its two neighbours held under this share of the
calibration frames' pixels (DeepPCB's binarized boards: levels 32-223)."""
MIN_GLARE_CELLS = 2
"""A glare region of fewer cells is a glint (a tinned pad's highlight at a little more gain), not hidden area."""
MIN_COVERED = 0.9
"""Cells the registered golden image covers less than this share of are not judged."""
WORK_CELL = 16
"""Cells are read at most this many pixels a side: larger frames are area-averaged first (a defect-sized cell keeps its
mean and its solid areas; it costs a quarter at 640)."""


class HiddenKind(StrEnum):
    """What a hidden region is: its words in the refusal. Cells are coded 0 (glare), 1 (dark) and 2 (unlike) by
    :func:`golden_cells` and :func:`level_cells`; -1 is a cell not judged."""

    GLARE = "glare"
    DARK = "dark occluder or shadow"
    UNLIKE = "unlike the golden image"
    UNLIKE_CALIBRATION = "unlike the calibration frames"


EXPLAINED = 0.1
"""The largest hidden region (a share of the frame) taken to explain a golden image the golden check called another
design: more is a board unlike its golden image all over, not a spot over it."""
LIGHT_CHANGE = 0.1
"""A single-image model's frame refused for grey levels the calibration frames never show whose bright level lies this
share or more off theirs is refused for the light (underexposed or overexposed), not as hidden area."""


def cell_size(shape: tuple[int, ...]) -> int:
    """The cell side, px, for a frame of ``shape`` ``(H, W)``: a twentieth of the shorter side, at least 16."""
    return max(16, int(round(min(shape[:2]) / 20)))


@dataclass(frozen=True)
class HiddenArea:
    """The largest hidden region of a frame: ``kind`` (:class:`HiddenKind`),
    ``share`` of the frame it covers, ``x``, ``y`` its centre in frame pixels, ``cells`` its cell count, ``box`` the
    ``(x1, y1, x2, y2)`` frame pixels its cells span (None when not known), for drawing where it is."""

    kind: HiddenKind
    share: float
    x: int
    y: int
    cells: int
    box: tuple[int, int, int, int] | None = None

    def words(self) -> str:
        """ "glare over 3% of the board at x 1210, y 400"."""
        return f"{self.kind} over {self.share:.1%} of the board at x {self.x}, y {self.y}"

    def refused(self, max_area: float | None) -> bool:
        """Whether the frame is not inspected: glare of :data:`MIN_GLARE_CELLS` cells or more, whatever its share (a
        board cannot show it), or a region over ``max_area`` of the frame (None: only glare)."""
        glare = self.kind == HiddenKind.GLARE and self.cells >= MIN_GLARE_CELLS
        return glare or (max_area is not None and self.share > max_area)


def _grid(shape: tuple[int, ...]) -> tuple[int, tuple[int, int]]:
    """The cell side and the ``(gh, gw)`` count of whole cells of a frame of ``shape``."""
    cell = cell_size(shape)
    return cell, (max(1, shape[0] // cell), max(1, shape[1] // cell))


def _reduced(images: list[np.ndarray], cell: int, grid: tuple[int, int]) -> tuple[list[np.ndarray], int]:
    """``images`` (uint8 ``[H, W]`` each) cut to the whole cells and area-averaged to cells of at most
    :data:`WORK_CELL` px, and that cell side."""
    side = min(cell, WORK_CELL)
    size = (grid[1] * side, grid[0] * side)
    crops = [image[: grid[0] * cell, : grid[1] * cell] for image in images]
    if side == cell:
        return crops, cell
    return [cv2.resize(c, size, interpolation=cv2.INTER_AREA) for c in crops], side


def _means(image: np.ndarray, cell: int, grid: tuple[int, int]) -> np.ndarray:
    """float32 ``[gh, gw]``: the mean of ``image`` (uint8 or float32, whole cells of ``cell`` px) over each cell."""
    return cv2.resize(image[: grid[0] * cell, : grid[1] * cell], (grid[1], grid[0]), interpolation=cv2.INTER_AREA).astype(np.float32)


def _share(mask: np.ndarray, cell: int, grid: tuple[int, int]) -> np.ndarray:
    """float32 ``[gh, gw]``: the share of each cell where bool ``mask`` is set."""
    return _means(mask.view(np.uint8) * np.uint8(255), cell, grid) / 255.0


def _extremes(image: np.ndarray, cell: int, grid: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """uint8 ``[gh, gw]`` each: the darkest and brightest level of uint8 ``image`` in each whole cell."""
    x = image[: grid[0] * cell, : grid[1] * cell].reshape(grid[0], cell, grid[1], cell)
    return x.min(axis=(1, 3)), x.max(axis=(1, 3))


def _levels(board: np.ndarray, matched: np.ndarray, golden: np.ndarray, inside: np.ndarray) -> tuple[float, float, float]:
    """From about 20,000 covered pixels: the matched golden image's contrast (5th to 95th percentile, at least 10), the
    99th percentile of the golden image as captured and as matched (the larger), and the board's noise against the
    matched one (1.4826 x the median absolute difference, at least 1.5 levels)."""
    step = max(1, int(np.count_nonzero(inside)) // 20000)
    reference, frame = matched[inside][::step], board[inside][::step]
    if reference.size == 0:
        return 10.0, 255.0, 1.5
    low, high, top = _percentiles(reference, (5, 95, 99))
    top = max(top, _percentiles(golden[inside][::step], (99,))[0]) if golden is not matched else top
    noise = max(1.4826 * _percentiles(cv2.absdiff(frame, reference), (50,))[0], 1.5)
    return max(high - low, 10.0), top, noise


def _percentiles(values: np.ndarray, quantiles: tuple[float, ...]) -> list[float]:
    """The ``quantiles`` (percent) of uint8 ``values`` from their 256-bin histogram (the lowest level reaching each)."""
    cumulative = np.cumsum(np.bincount(values.ravel(), minlength=256)) / max(values.size, 1)
    return [float(np.searchsorted(cumulative, q / 100.0)) for q in quantiles]


def _solid(mask: np.ndarray, cell: int) -> np.ndarray:
    """bool ``mask`` ``[H, W]`` opened by a disk of a quarter cell: slivers along edges (a track drawn thicker in the
    golden image, a line it lacks, a registration residual) go, solid areas (glare, a hand, a shadow) stay."""
    side = max(3, cell // 4 | 1)
    disk = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (side, side))
    return cv2.morphologyEx(mask.view(np.uint8), cv2.MORPH_OPEN, disk).view(bool)


def golden_cells(
    board: np.ndarray, matched: np.ndarray, covered: np.ndarray | None = None, golden: np.ndarray | None = None
) -> np.ndarray:
    """int8 ``[gh, gw]`` per cell of uint8 ``board`` ``[H, W]`` against ``matched`` (its registered golden image at its
    levels, uint8 ``[H, W]``; ``covered`` bool ``[H, W]`` where that has data): -1 clear, else the index of its kind
    as :class:`HiddenKind` codes (module docstring). ``golden``: the registered golden image as captured (None: ``matched``),
    whose own saturation says where glare is no sign: a golden image clipped at 255 may hide levels a board at a
    lower gain still clips."""
    cell, grid = _grid(board.shape)
    golden = matched if golden is None else golden
    covered = np.full(board.shape, 255, np.uint8) if covered is None else covered.view(np.uint8) * np.uint8(255)
    (board, matched, golden, covered), cell = _reduced([board, matched, golden, covered], cell, grid)
    inside = covered > 127
    contrast, top, noise = _levels(board, matched, golden, inside)
    shift = max(LEVEL_SHIFT * contrast, NOISE_SHIFT * noise)
    x = board.astype(np.float32)
    mean_b, mean_g = _means(x, cell, grid), _means(matched, cell, grid)
    std_b = np.sqrt(np.maximum(_means(x * x, cell, grid) - mean_b * mean_b, 0.0))
    off_pixels = cv2.absdiff(board, matched) > shift
    if golden is not matched:  # off against the golden image as captured too: a fit's stray light field is no hidden area
        off_pixels &= cv2.absdiff(board, golden) > shift
    off = _share(_solid(off_pixels, cell), cell, grid)
    low, high = _extremes(cv2.blur(matched, (3, 3)), cell, grid)
    kernel = np.ones((3, 3), np.uint8)
    low, high = cv2.erode(low, kernel).astype(np.float32), cv2.dilate(high, kernel).astype(np.float32)
    flat = std_b < max(FLAT_NOISE * noise, FLAT * contrast)
    foreign = flat & (np.abs(mean_b - mean_g) > shift) & (np.abs(mean_b - low) > shift) & (np.abs(mean_b - high) > shift)
    if golden is not matched:
        foreign &= np.abs(mean_b - _means(golden, cell, grid)) > shift
    unlike = (off > UNLIKE) | foreign
    kinds = np.full(grid, -1, np.int8)
    kinds[unlike] = 2
    kinds[unlike & (mean_b < mean_g - shift)] = 1
    if top < NEVER_BRIGHT:
        kinds[(_share(board >= SATURATED, cell, grid) - _share(golden >= SATURATED, cell, grid)) > SATURATED_SHARE] = 0
    kinds[_means(covered, cell, grid) < MIN_COVERED * 255] = -1
    return kinds


def level_histogram(image: np.ndarray) -> np.ndarray:
    """float64 ``[LEVEL_BINS]`` pixel counts of uint8 ``image`` by grey level (calibration frames: what a single-image
    model's hidden-area screen accepts)."""
    return np.bincount((image // (256 // LEVEL_BINS)).ravel(), minlength=LEVEL_BINS).astype(np.float64)


def level_cells(board: np.ndarray, pixel_levels: np.ndarray, bright: float) -> np.ndarray:
    """int8 ``[gh, gw]`` per cell of uint8 ``board`` ``[H, W]`` for a single-image model: -1 clear, 0 glare (saturated
    where the calibration frames' bright level is under :data:`NEVER_BRIGHT`), 2 over :data:`UNLIKE` of the cell, in
    solid areas, at grey levels whose bin and its two neighbours held under :data:`RARE_LEVEL` of the calibration
    frames' pixels (``pixel_levels``: their share per bin): a hand, a shadow or a glare's rim on a binarized board."""
    cell, grid = _grid(board.shape)
    support = np.convolve(np.asarray(pixel_levels, np.float64), np.ones(3), mode="same")
    rare = (support < RARE_LEVEL)[board // (256 // len(support))]  # a baseline's bins divide 256 (monitor/baseline.py)
    kinds = np.full(grid, -1, np.int8)
    kinds[_share(_solid(rare, cell), cell, grid) > UNLIKE] = 2
    if bright < NEVER_BRIGHT:
        kinds[_share(board >= SATURATED, cell, grid) > SATURATED_SHARE] = 0
    return kinds


def largest_region(kinds: np.ndarray, shape: tuple[int, ...], unlike: HiddenKind = HiddenKind.UNLIKE) -> HiddenArea | None:
    """The hidden region of ``kinds`` (:func:`golden_cells` or :func:`level_cells`) that says most about a frame of
    ``shape`` ``(H, W)``: the largest glare region when it has :data:`MIN_GLARE_CELLS` cells or more (refused whatever
    its share), else the largest region of dark and unlike cells, named by the kind most of its cells have, else a
    glint; None when no cell is hidden. ``unlike``: the kind of code 2 (a single-image model:
    ``HiddenKind.UNLIKE_CALIBRATION``)."""
    glare = _region(kinds, kinds == 0, shape, lambda _: HiddenKind.GLARE)
    if glare is not None and glare.cells >= MIN_GLARE_CELLS:
        return glare
    other = _region(kinds, kinds >= 1, shape, lambda inside: HiddenKind.DARK if (inside == 1).sum() > (inside == 2).sum() else unlike)
    return other if other is not None else glare


def _region(kinds: np.ndarray, hidden: np.ndarray, shape: tuple[int, ...], name: Callable[[np.ndarray], str]) -> HiddenArea | None:
    """The largest 8-connected region of bool cells ``hidden`` (a one-cell gap closed, judged cells only), named by
    ``name(kinds of its cells)``; None when no cell is hidden."""
    if not hidden.any():
        return None
    cell, _ = _grid(shape)
    grid = cv2.morphologyEx(hidden.astype(np.uint8), cv2.MORPH_CLOSE, np.ones((3, 3), np.uint8)) & (kinds >= 0).astype(np.uint8)
    count, labels, stats, centres = cv2.connectedComponentsWithStats(grid, connectivity=8)
    if count < 2:
        return None
    label = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    cells = int(stats[label, cv2.CC_STAT_AREA])
    x, y = (int(c * cell + cell / 2) for c in centres[label])
    spans = (cv2.CC_STAT_LEFT, cv2.CC_STAT_TOP, cv2.CC_STAT_WIDTH, cv2.CC_STAT_HEIGHT)
    left, top, width, height = (int(stats[label, k]) * cell for k in spans)
    box = (left, top, min(left + width, int(shape[1])), min(top + height, int(shape[0])))
    return HiddenArea(name(kinds[labels == label]), cells * cell * cell / float(shape[0] * shape[1]), x, y, cells, box)


def hidden_area(context: StageContext, record: Prepared) -> Prepared:
    """The hidden-area stage: ``record`` with its largest hidden region, refused (``hidden``) when it hides too much:
    against the matched golden image (``record.captured``: the registered golden image before matching), or for a
    single-image model against the calibration frames' pixel levels (not screened when the baseline records none).

    It also decides a golden check refusal that registration left pending (``record.mismatch``): the frame is refused
    for its hidden area when that explains the refusal (glare anywhere, or a region of at most :data:`EXPLAINED` of the
    frame: a glare spot's saturation reads as differences spread over the board), else for the golden image, its
    registration dropped: an occluder the golden check names keeps its words, and a golden image of another design,
    unlike the board all over, stays "reference does not match"."""
    record = _screened(context, record)
    if record.mismatch is None:
        return record
    if record.refused and (record.hidden.kind == HiddenKind.GLARE or record.hidden.share <= EXPLAINED):
        return dataclasses.replace(record, mismatch=None)
    unregistered = dict(registration=None, golden=None, covered=None, area=None, hidden=None)
    return dataclasses.replace(record, refusal=record.mismatch, mismatch=None, **unregistered)


def _screened(context: StageContext, record: Prepared) -> Prepared:
    image = record.frame.image
    calibration = context.calibration
    if record.golden is not None:
        kinds, unlike = golden_cells(image, record.golden, record.covered, record.captured), HiddenKind.UNLIKE
    elif calibration is not None and calibration.get("pixel_levels") is not None:
        kinds, unlike = level_cells(image, calibration["pixel_levels"], calibration["bright"]), HiddenKind.UNLIKE_CALIBRATION
    else:
        return record
    hidden = largest_region(kinds, image.shape, unlike)
    record = dataclasses.replace(record, hidden=hidden)
    if not context.screen_hidden or hidden is None or not hidden.refused(context.limits_for(record.golden_key).hidden_max_area):
        return record
    light = _light(record, hidden, calibration)
    if light is not None:
        return dataclasses.replace(record, refusal=light)
    message = f"{hidden.words()}: a defect there cannot be seen ({hidden_cause(hidden)})"
    return record.refuse(RefusalKind.HIDDEN, message, {"share": hidden.share, "cells": hidden.cells})


def _light(record: Prepared, hidden: HiddenArea, calibration: dict | None) -> Refusal | None:
    """A single-image model's frame whose grey levels the calibration frames never show, read as the light it
    measures: its bright level :data:`LIGHT_CHANGE` or more off the calibration frames' is underexposed (darker) or
    overexposed (brighter), a camera refusal that raises a drift alert at once (``RefusalKind.camera``); else None
    (the hidden area's own words)."""
    if record.golden is not None or hidden.kind == HiddenKind.GLARE or record.levels is None:
        return None
    reference = float(calibration["bright"])
    light = float(record.levels[2]) / max(reference, 1.0)
    if abs(light - 1.0) < LIGHT_CHANGE:
        return None
    darker = light < 1.0
    message = (
        f"image {abs(light - 1.0):.0%} {'darker' if darker else 'brighter'} than the calibration frames (bright level "
        f"{record.levels[2]:.0f} against {reference:.0f}), {hidden.share:.1%} of the board at grey levels they never "
        "show: check the light and the camera's exposure"
    )
    kind = RefusalKind.UNDEREXPOSED if darker else RefusalKind.OVEREXPOSED
    return Refusal(kind, message, {"light": light, "share": hidden.share})


def hidden_cause(hidden: HiddenArea) -> str:
    """What a hidden region's kind and size say to do: the light only for glare; a region unlike the
    golden image over more than :data:`EXPLAINED` of the frame is another design more likely than an object over it."""
    if hidden.kind == HiddenKind.GLARE:
        return "glare: shade the light or move it off the camera's axis"
    if hidden.kind == HiddenKind.DARK:
        return "a hand, a cover or a shadow: clear the camera's view"
    if hidden.kind == HiddenKind.UNLIKE and hidden.share > EXPLAINED:
        return "another design, or a golden image that does not match this board: check the golden image"
    if hidden.kind == HiddenKind.UNLIKE:
        return "an object over the board: clear the camera's view"
    return "an object over the board, or a board unlike the calibration frames: clear the camera's view"
