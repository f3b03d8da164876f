"""A design's tolerance map: the places of its golden image where good boards draw calls, and the score a call there
must beat (issue 56).

False calls recur at the same places of a design (glints on tinned pads, silkscreen, via fields). ``teach --good``
inspects good boards of the design at :data:`GOOD_FLOOR`, maps each call's box centre into the golden image's pixels
through that board's registration (``align/mapping.py`` ``Mapping.to_golden``) and merges them into places
(:func:`learn_places`): golden-image ``(x, y)`` and the best good-board score there.

``predict`` then applies it to that design's frames only (:func:`tolerated`, :func:`apply_tolerance`): a call whose
box centre, mapped into golden-image pixels through the frame's registration, lies within ``radius`` of a place must
score above that place's score + ``margin`` to count; a call scoring :data:`TOLERANCE_CAP` or more is always a call.
The calls dropped are counted (``Detections.tolerated``), never silently lost.

Operators' verdicts add to it (``teach --station``, ``jobs/rejections.py``): each call an operator rejected at
the station as a false call is a place of its own (golden-image ``(x, y)`` and its score), tolerated within the
smaller :data:`REJECTED_RADIUS` at the same margin and under the same cap, so a rejection quietens the spot it was
given on and never a whole region.

Stored in the design's ``taught`` entry of the weights (``model/checkpoint.py``): ``"tolerance": [[x, y, score],
...]``, ``"tolerance_radius"``, ``"tolerance_margin"``, and the operators' ``"rejected": [[x, y, score], ...]`` with
``"rejected_radius"``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from defect_detector.align.mapping import Mapping
from defect_detector.core.boxes import box_centres
from defect_detector.core.types import Detections

TOLERANCE_RADIUS = 60.0
"""Golden-image pixels around a place within which a call must beat the place's score. Measured in issue 56 on real
photographs: radius 60-100 px with margin 0.03 took held-out defect-free captures from 5.1 to 1.1 false calls per board
(a DSLR panel: 32.6 to 0.92 at 60 px, 0.33 at 100 px) and lost 2 of 110 defects."""
TOLERANCE_MARGIN = 0.03
"""Score a call at a place must beat the best good-board score there by (measured with :data:`TOLERANCE_RADIUS`)."""
TOLERANCE_CAP = 0.9
"""A call scoring this or more is always a call, whatever the tolerance there: no place silences a clear defect."""
GOOD_FLOOR = 0.05
"""Score floor good boards are inspected at to learn the places (calls below any design's point included)."""
MIN_GOOD = 5
"""Fewest good boards ``teach --good`` learns a tolerance map from."""
REJECTED_RADIUS = 20.0
"""Golden-image pixels around a call an operator rejected within which a call must beat its score: about a call's own
size, so a rejection quietens its spot and never a region (a good-board place, read over several boards, takes
:data:`TOLERANCE_RADIUS`)."""


def _rows(places: np.ndarray) -> list[list[float]]:
    return [[round(float(x), 2), round(float(y), 2), round(float(s), 5)] for x, y, s in places]


@dataclass(frozen=True)
class Tolerance:
    """A design's tolerance map: ``places`` float64 ``[P, 3]`` rows ``(x, y, score)``, ``x, y`` in golden-image pixels,
    ``score`` the best good-board score there; ``radius`` (golden-image px), ``margin`` (score) and ``cap`` (score);
    ``rejected`` float64 ``[R, 3]`` the calls operators rejected (same rows), each tolerated within
    ``rejected_radius``."""

    places: np.ndarray = field(repr=False)
    radius: float = TOLERANCE_RADIUS
    margin: float = TOLERANCE_MARGIN
    cap: float = TOLERANCE_CAP
    rejected: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)), repr=False)
    rejected_radius: float = REJECTED_RADIUS

    def __post_init__(self) -> None:
        for name in ("places", "rejected"):
            rows = np.asarray(getattr(self, name), np.float64).reshape(-1, 3)
            rows.setflags(write=False)
            object.__setattr__(self, name, rows)

    def to_entry(self) -> dict[str, Any]:
        """The keys of a ``taught`` entry (plain floats, what ``torch.save`` and ``meta.json`` hold); the operators'
        rejections only when there are some."""
        entry = {"tolerance": _rows(self.places), "tolerance_radius": float(self.radius), "tolerance_margin": float(self.margin)}
        if len(self.rejected):
            entry |= {"rejected": _rows(self.rejected), "rejected_radius": float(self.rejected_radius)}
        return entry

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> Tolerance | None:
        """The tolerance of a checked ``taught`` entry (``model/checkpoint.py``), None when it carries none."""
        if entry.get("tolerance") is None and entry.get("rejected") is None:
            return None
        return cls(
            np.asarray(entry.get("tolerance", []), np.float64),
            float(entry.get("tolerance_radius", TOLERANCE_RADIUS)),
            float(entry.get("tolerance_margin", TOLERANCE_MARGIN)),
            rejected=np.asarray(entry.get("rejected", []), np.float64),
            rejected_radius=float(entry.get("rejected_radius", REJECTED_RADIUS)),
        )


def learn_places(centres: Sequence[np.ndarray], scores: Sequence[np.ndarray], radius: float = TOLERANCE_RADIUS) -> np.ndarray:
    """The places of good boards' calls: ``centres`` per board float ``[K, 2]`` call box centres in golden-image pixels,
    ``scores`` per board float ``[K]``. Calls are taken best first; one within ``radius`` of a place already made is
    merged into it (the place keeps its position and its better score), else it makes a new place. Returns float64
    ``[P, 3]`` rows ``(x, y, best score)``, best first; every call given lies within ``radius`` of a place scoring at
    least its own."""
    xy = np.concatenate([np.asarray(c, np.float64).reshape(-1, 2) for c in centres]) if centres else np.zeros((0, 2))
    score = np.concatenate([np.asarray(s, np.float64).reshape(-1) for s in scores]) if scores else np.zeros(0)
    places: list[tuple[float, float, float]] = []
    for i in np.argsort(-score, kind="stable"):
        x, y = xy[i]
        if not any(math.hypot(x - px, y - py) <= radius for px, py, _ in places):
            places.append((float(x), float(y), float(score[i])))
    return np.asarray(places, np.float64).reshape(-1, 3)


def _needed(xy: np.ndarray, places: np.ndarray, radius: float, margin: float) -> np.ndarray:
    """float64 ``[K]``: the score each call at ``xy`` ``[K, 2]`` must beat for ``places`` ``[P, 3]`` within ``radius``
    (their best score + ``margin``; -inf where none lies that near)."""
    if len(places) == 0:
        return np.full(len(xy), -np.inf)
    near = np.hypot(xy[:, None, 0] - places[None, :, 0], xy[:, None, 1] - places[None, :, 1]) <= radius  # [K, P]
    return np.where(near, places[None, :, 2] + margin, -np.inf).max(axis=1)


def tolerated(centres: np.ndarray, scores: np.ndarray, tolerance: Tolerance) -> np.ndarray:
    """Which calls the tolerance drops: ``centres`` float ``[K, 2]`` call box centres in golden-image pixels, ``scores``
    float ``[K]``. A call is dropped when some place lies within ``radius`` of it (a rejected call within
    ``rejected_radius``) and it scores at most that place's score + ``margin``, unless it scores ``cap`` or more.
    Returns bool ``[K]`` (True: dropped)."""
    xy = np.asarray(centres, np.float64).reshape(-1, 2)
    score = np.asarray(scores, np.float64).reshape(-1)
    if len(xy) == 0:
        return np.zeros(0, bool)
    needed = np.maximum(
        _needed(xy, tolerance.places, tolerance.radius, tolerance.margin),
        _needed(xy, tolerance.rejected, tolerance.rejected_radius, tolerance.margin),
    )
    return (score <= needed) & (score < tolerance.cap)


def in_golden(boxes: torch.Tensor, mapping: Mapping) -> np.ndarray:
    """float64 ``[K, 2]``: the centres of xyxy ``boxes`` ``[K, 4]`` in frame pixels, in golden-image pixels through the
    frame's registration ``mapping`` (golden px -> frame px; ``Mapping.to_golden`` inverts it)."""
    centres = box_centres(boxes)
    gx, gy = mapping.to_golden(centres[:, 0], centres[:, 1])
    return np.stack([gx, gy], axis=1).reshape(-1, 2)


def apply_tolerance(detections: Detections, mapping: Mapping, tolerance: Tolerance) -> Detections:
    """``detections`` (boxes in frame pixels) without the calls ``tolerance`` drops (:func:`tolerated`, their centres
    mapped into golden-image pixels through ``mapping``), the number dropped added to ``Detections.tolerated``."""
    if len(detections) == 0:
        return detections
    dropped = tolerated(in_golden(detections.boxes, mapping), detections.scores.detach().cpu().numpy(), tolerance)
    if not dropped.any():
        return detections
    kept = detections.keep(torch.from_numpy(~dropped))
    return dataclasses.replace(kept, tolerated=detections.tolerated + int(dropped.sum()))


def held_out(
    centres: Sequence[np.ndarray], scores: Sequence[np.ndarray], radius: float = TOLERANCE_RADIUS, margin: float = TOLERANCE_MARGIN
) -> list[Tolerance]:
    """Leave-one-out: per good board (``centres`` float ``[K, 2]`` golden px and ``scores`` ``[K]`` of its calls), the
    tolerance learnt on the OTHER boards (what that board meets when it is held out of the fit)."""
    out = []
    for i in range(len(centres)):
        others = [c for j, c in enumerate(centres) if j != i], [s for j, s in enumerate(scores) if j != i]
        out.append(Tolerance(learn_places(*others, radius=radius), radius, margin))
    return out


def left_out_scores(
    centres: Sequence[np.ndarray],
    scores: Sequence[np.ndarray],
    radius: float = TOLERANCE_RADIUS,
    margin: float = TOLERANCE_MARGIN,
) -> list[np.ndarray]:
    """Per good board, the float64 scores of its calls that the tolerance learnt on the OTHER boards (:func:`held_out`)
    does not drop: the false calls a held-out good board still draws, at any threshold."""
    out = []
    for centre, score, tolerance in zip(centres, scores, held_out(centres, scores, radius, margin)):
        score = np.asarray(score, np.float64).reshape(-1)
        out.append(score[~tolerated(np.asarray(centre).reshape(-1, 2), score, tolerance)])
    return out


__all__ = [
    "GOOD_FLOOR",
    "MIN_GOOD",
    "REJECTED_RADIUS",
    "TOLERANCE_CAP",
    "TOLERANCE_MARGIN",
    "TOLERANCE_RADIUS",
    "Tolerance",
    "apply_tolerance",
    "held_out",
    "in_golden",
    "learn_places",
    "left_out_scores",
    "tolerated",
]
