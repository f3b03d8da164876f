"""Panels: a frame that holds several boards of one design, and a verdict for each board.

The design's board outlines are named rectangles in its golden image's pixels (a single-image model: the frame's),
given with ``predict --boards FILE`` (``Inspector.load(boards=...)``): a JSON or YAML mapping of board name to
``[x1, y1, x2, y2]``::

    A: [0, 0, 320, 240]
    B: [320, 0, 640, 240]

Each call belongs to the board whose outline holds its centre (:func:`boards_holding`; outlines may not overlap, so
there is at most one), mapped into the outlines' pixels with the frame's registration (:func:`to_outline_pixels`, the
one place that maps frame -> golden pixels, through the registration's general mapping). A call outside every outline
belongs to no board: it still fails the frame. Each board's verdict (:func:`board_verdicts`) is the frame's rule on its
own calls: ``not_inspected`` when the frame was not inspected, ``fail`` with a call of its own, else ``pass``
(``pass_suspect`` when the frame is suspect).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from defect_detector.align.register import Registration
from defect_detector.core.boxes import box_centres
from defect_detector.core.typed_yaml import read_yaml_mapping
from defect_detector.core.verdict import verdict_of

MAX_BOARDS = 256
"""Most boards one outline file may name."""
MAX_NAME = 64
"""Longest board name."""


@dataclass(frozen=True)
class BoardOutline:
    """One board of a panel: ``name`` and ``box`` ``(x1, y1, x2, y2)`` in the golden image's pixels."""

    name: str
    box: tuple[float, float, float, float]


@dataclass(frozen=True)
class BoardVerdict:
    """One board's outcome in a frame: its ``name``, ``verdict`` (a :class:`Verdict` value) and ``calls`` (how many of
    the frame's calls lie on it)."""

    name: str
    verdict: str
    calls: int

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "verdict": self.verdict, "calls": self.calls}


def load_outlines(path: str | Path) -> tuple[BoardOutline, ...]:
    """The board outlines a ``--boards`` file holds (module docstring); ``ValueError`` in one line naming the file for
    a missing or malformed file, a name or box that is not one, or two outlines that overlap."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"--boards {path}: file not found") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"--boards {path}: not a JSON file ({exc})") from None
    else:
        raw = read_yaml_mapping(path, "--boards")
    return outlines_of(raw, f"--boards {path}")


def outlines_of(raw: Any, what: str = "boards") -> tuple[BoardOutline, ...]:
    """``raw`` (``{name: [x1, y1, x2, y2]}``) as checked outlines; ``ValueError`` in one line starting with ``what``."""
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError(f"{what}: expected a mapping of board name to [x1, y1, x2, y2], got {type(raw).__name__}")
    if len(raw) > MAX_BOARDS:
        raise ValueError(f"{what}: {len(raw)} boards; at most {MAX_BOARDS}")
    outlines = tuple(_outline(name, box, what) for name, box in raw.items())
    for i, a in enumerate(outlines):
        for b in outlines[i + 1 :]:
            if min(a.box[2], b.box[2]) > max(a.box[0], b.box[0]) and min(a.box[3], b.box[3]) > max(a.box[1], b.box[1]):
                raise ValueError(f"{what}: boards {a.name} and {b.name} overlap; each call must lie on one board")
    return outlines


def _outline(name: Any, box: Any, what: str) -> BoardOutline:
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME or not name.isprintable():
        raise ValueError(f"{what}: board name {name!r} must be one printable line of 1 to {MAX_NAME} characters")
    numbers = isinstance(box, Sequence) and len(box) == 4 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in box)
    if not numbers or not all(math.isfinite(v) for v in box):
        raise ValueError(f"{what}: board {name}: expected [x1, y1, x2, y2] (4 finite numbers), got {box!r}")
    x1, y1, x2, y2 = (float(v) for v in box)
    if x1 < 0 or y1 < 0 or x2 <= x1 or y2 <= y1:
        raise ValueError(f"{what}: board {name}: [x1, y1, x2, y2] needs 0 <= x1 < x2 and 0 <= y1 < y2, got {list(box)}")
    return BoardOutline(name.strip(), (x1, y1, x2, y2))


def check_inside(outlines: Sequence[BoardOutline], shape: tuple[int, int], what: str) -> None:
    """``ValueError`` in one line when an outline reaches outside an image of ``shape`` ``(H, W)`` (``what`` names it)."""
    height, width = shape
    for outline in outlines:
        x1, y1, x2, y2 = outline.box
        if x2 > width or y2 > height:
            raise ValueError(f"--boards: board {outline.name} {list(outline.box)} reaches outside {what} ({width}x{height} px)")


def to_outline_pixels(boxes: np.ndarray, registration: Registration | None) -> np.ndarray:
    """float64 ``[N, 4]`` xyxy boxes in frame pixels -> the same boxes' centre points in the outlines' pixels, float64
    ``[N, 2]``: through the registration's mapping (``align/mapping.py`` ``Mapping.to_golden``: its homography, lens
    term and local grid inverted) when there is one, else as they are (a single-image model's outlines are in frame
    pixels). The one place a call is mapped frame -> golden."""
    xs, ys = box_centres(boxes).T
    if registration is not None and len(xs):
        xs, ys = registration.mapping.to_golden(xs, ys)
    return np.stack([xs, ys], 1).astype(np.float64).reshape(-1, 2)


def boards_holding(points: np.ndarray, outlines: Sequence[BoardOutline]) -> list[str | None]:
    """For each point of float ``[N, 2]`` ``(x, y)`` (the outlines' pixels), the name of the outline that holds it
    (edges included), else None."""
    out: list[str | None] = []
    for x, y in np.asarray(points, np.float64).reshape(-1, 2):
        out.append(next((o.name for o in outlines if o.box[0] <= x <= o.box[2] and o.box[1] <= y <= o.box[3]), None))
    return out


def board_verdicts(
    inspected: bool, suspect: bool, call_boards: Sequence[str | None], outlines: Sequence[BoardOutline]
) -> tuple[BoardVerdict, ...]:
    """Each outline's :class:`BoardVerdict` in a frame (``inspected``: the model saw it; ``suspect``: a critical drift
    alert or an untaught look) whose calls lie on ``call_boards`` (:func:`boards_holding`), by the frame's own rule
    (:func:`~defect_detector.core.verdict.verdict_of`) on each board's calls: ``not_inspected`` for every board of a
    frame not inspected, ``fail`` for a board with a call, else ``pass`` or ``pass_suspect``."""
    out = []
    for outline in outlines:
        calls = sum(name == outline.name for name in call_boards)
        out.append(BoardVerdict(outline.name, verdict_of(inspected, calls, suspect).value, calls))
    return tuple(out)
