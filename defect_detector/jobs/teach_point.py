"""A taught design's operating point: the score threshold its own defect-free captures allow.

``teach`` inspects defect-free line captures of each golden image (every call on them is a false call) and boards
with defects painted on it (``looks/paint.py``). :func:`design_point` then sets the design's threshold:

- the lowest score at which the defect-free captures give at most :data:`MAX_FALSE_CALLS` false calls per board
  (per whole board: a large golden image is taught on crops, and its calls per crop are scaled by its area);
- never below the weights' own point unless painted recall needs it: below it only down to the lowest painted
  defect that the weights' point would miss and the lower threshold still allows;
- with good boards of the design (``teach --good``), :func:`held_out_point` raises it until good boards held out from
  the tolerance map's fit draw at most :data:`MAX_FALSE_CALLS` false calls per board (cross-validated).

:func:`scores_by_design` reads what ``validate`` returned into per-design score arrays. Pure functions of arrays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pycocotools.coco import COCO

from defect_detector.data.evaluate import Predictions, ranked_hits

MAX_FALSE_CALLS = 0.1
"""False calls per defect-free board a design's threshold allows."""


@dataclass(frozen=True)
class DesignScores:
    """One design's calls on ``teach``'s boards: ``clean`` float64 ``[C]`` the scores of every call on its ``boards``
    defect-free captures; ``painted`` float64 ``[P]`` the scores of the calls on its painted boards (descending) with
    ``hits`` bool ``[P]`` (the call caught a painted defect, ``data/evaluate.py`` matching), of ``defects``."""

    clean: np.ndarray
    boards: int
    painted: np.ndarray
    hits: np.ndarray
    defects: int

    def caught(self, conf: float) -> float:
        """Share of the painted defects caught at score threshold ``conf``."""
        return float((self.hits & (self.painted >= conf)).sum() / self.defects) if self.defects else 0.0

    def false_calls(self, conf: float, area_factor: float = 1.0) -> float:
        """False calls per defect-free board at ``conf`` (per view times ``area_factor``: per whole board)."""
        return float((self.clean >= conf).sum() / self.boards * area_factor) if self.boards else 0.0


@dataclass(frozen=True)
class DesignPoint:
    """A design's threshold ``conf`` and what it gives on ``teach``'s boards: ``caught`` (share of the painted
    defects), ``false_calls`` (per defect-free board); ``scores``: the calls it was read from (None: given)."""

    conf: float
    caught: float
    false_calls: float
    scores: DesignScores | None = field(default=None, repr=False, compare=False)
    area_factor: float = field(default=1.0, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: round(getattr(self, k), 4) for k in ("conf", "caught", "false_calls")}

    def at(self, conf: float) -> DesignPoint:
        """The same design's boards read at another threshold ``conf`` (``ValueError`` without its scores)."""
        if conf == self.conf:
            return self
        if self.scores is None:
            raise ValueError("this design point carries no scores to read another threshold from")
        return DesignPoint(conf, self.scores.caught(conf), self.scores.false_calls(conf, self.area_factor), self.scores, self.area_factor)


def design_point(scores: DesignScores, own: float, area_factor: float = 1.0, most: float = MAX_FALSE_CALLS) -> DesignPoint:
    """The threshold of one design (module docstring): at most ``most`` false calls per board on ``scores.clean``
    (times ``area_factor``), at the weights' ``own`` point or above, lower only to catch what ``own`` misses."""
    allowed = int(np.floor(most * scores.boards / area_factor + 1e-9))
    clean = np.sort(scores.clean)[::-1]
    lowest = float(np.nextafter(clean[allowed], np.inf)) if len(clean) > allowed else 0.0
    conf = max(lowest, own)
    if lowest < own:
        needed = scores.painted[scores.hits & (scores.painted >= lowest) & (scores.painted < own)]
        if len(needed):
            conf = float(needed.min())
    conf = min(conf, 1.0)
    return DesignPoint(conf, scores.caught(conf), scores.false_calls(conf, area_factor), scores, area_factor)


def held_out_point(left_out: Sequence[np.ndarray], conf: float, most: float = MAX_FALSE_CALLS) -> float:
    """The lowest threshold, ``conf`` or above, at which good boards held out from the fit draw at most ``most`` false
    calls per board: ``left_out`` per good board float ``[K]`` the scores of its calls that a tolerance learnt on the
    OTHER good boards keeps (``inspect/tolerance.py`` :func:`left_out_scores`), so one board's noise cannot set it."""
    allowed = int(np.floor(most * len(left_out) + 1e-9))
    pooled = np.concatenate([np.asarray(s, np.float64).reshape(-1) for s in left_out]) if len(left_out) else np.zeros(0)
    above = np.sort(pooled[pooled >= conf])[::-1]
    if len(above) <= allowed:
        return float(conf)
    return float(min(np.nextafter(above[allowed], np.inf), 1.0))


def design_index(file_name: str) -> int:
    """The design a ``teach`` board belongs to: its file stem starts ``d<index>_`` (``jobs/teach_sets.py``)."""
    return int(Path(file_name).stem.split("_", 1)[0][1:])


def scores_by_design(
    clean: tuple[COCO, Predictions], painted: tuple[COCO, Predictions], cat_map: Mapping[int, int], designs: int
) -> list[DesignScores]:
    """Per design (``0 .. designs - 1``), its :class:`DesignScores` from the ``(ground truth, predictions)`` of the
    defect-free set ``clean`` and of the painted set ``painted`` (``jobs/validate.py`` ``Validation``; ``cat_map``
    its category id -> label)."""
    out = []
    for k in range(designs):
        own_clean = {i: p for i, p in clean[1].items() if design_index(clean[0].imgs[i]["file_name"]) == k}
        own_painted = {i: p for i, p in painted[1].items() if design_index(painted[0].imgs[i]["file_name"]) == k}
        calls = [p["scores"].double().numpy().reshape(-1) for p in own_clean.values()]
        score, hit, defects = ranked_hits(painted[0], own_painted, cat_map, 0.33)
        out.append(DesignScores(np.concatenate(calls) if calls else np.zeros(0), len(own_clean), score, hit, defects))
    return out
