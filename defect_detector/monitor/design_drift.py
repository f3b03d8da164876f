"""A design's own drift level, learnt from its good boards (``teach --good``; issue 56: "the drift baseline of the
design").

With a golden-template (relative) baseline the detector scores each frame's layer statistics against its golden
image's (``monitor/drift.py``), so that a board design cancels out. It cancels out on the looks the baseline was
calibrated on (renders of DeepPCB boards), not wholly on a real photographed design: the line captures of the
real photographs in ``../shared/datasets/photos`` (a line's normal day, no camera fault) read 5-6% below the
calibration's mean activation in the stem and backbone, and 2 of 5 designs raised a critical "contrast loss" alert
from the first judged frame, so half of their good boards came out ``pass_suspect``.

``teach --good`` therefore reads the design's good boards as the line captures them and stores the mean of what the
detector scores for them (:meth:`Baseline.scored <defect_detector.monitor.baseline.Baseline.scored>`), with what it
was read in: the baseline's layers, space and the digest of its weights. The detector reads each frame of that design
against this level instead of the calibration's mean (:meth:`DesignDrift.expected`); the calibration's spread and
correlations, and the line reference, stay as they are. Read with another baseline (other layers, space or weights:
a recalibration, a fine-tune), the level is not used, and the calibration's mean applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from defect_detector.monitor.baseline import Baseline


def baseline_weights(baseline: Baseline) -> str:
    """The digest of the weights ``baseline`` was measured with (``model["weights_sha256"]``; "" when not recorded)."""
    return str(baseline.model.get("weights_sha256") or "")


@dataclass(frozen=True)
class DesignDrift:
    """A design's own level (module docstring): ``mean`` float64 ``[L, 2]``, the mean over ``boards`` good boards of
    the scored quantity (``Baseline.scored``), in the space ``space`` over the baseline's ``layers``, measured with
    weights of digest ``weights`` ("" when the baseline records none)."""

    mean: np.ndarray
    layers: tuple[str, ...]
    space: str
    weights: str
    boards: int

    @classmethod
    def learn(cls, baseline: Baseline, frames: Sequence[np.ndarray], goldens: Sequence[np.ndarray | None]) -> DesignDrift:
        """The level of the good boards whose statistics are ``frames`` (float ``[L, 2]`` each) against their golden
        image's ``goldens`` (``[L, 2]`` each; None for a single-image baseline). ``ValueError`` when none is given."""
        if not len(frames):
            raise ValueError("a design's drift level needs at least one good board")
        scored = np.stack([baseline.scored(np.asarray(f, np.float64), g) for f, g in zip(frames, goldens)])
        return cls(scored.mean(axis=0), tuple(baseline.layer_names), baseline.space, baseline_weights(baseline), len(frames))

    def fits(self, baseline: Baseline) -> bool:
        """Whether this level was read with ``baseline``'s layers, space and weights (an unknown digest on either side
        is not a mismatch)."""
        mine, theirs = self.weights, baseline_weights(baseline)
        same_weights = not mine or not theirs or mine == theirs
        return tuple(baseline.layer_names) == self.layers and baseline.space == self.space and same_weights

    def expected(self, baseline: Baseline) -> np.ndarray | None:
        """The level the detector reads this design's frames against with ``baseline`` (float64 ``[L, 2]``), or None
        when it was read with another baseline (:meth:`fits`)."""
        return self.mean if self.fits(baseline) else None

    def to_entry(self) -> dict[str, Any]:
        """The taught entry's ``drift`` (``core/taught.py``), JSON-able."""
        mean = [[float(v) for v in row] for row in self.mean]
        return {"drift": {"mean": mean, "layers": list(self.layers), "space": self.space, "weights": self.weights, "boards": self.boards}}

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> DesignDrift | None:
        """The level a taught entry carries (checked by ``core/taught.py``), or None."""
        raw = entry.get("drift")
        if raw is None:
            return None
        mean = np.asarray(raw["mean"], np.float64).reshape(len(raw["layers"]), 2)
        return cls(mean, tuple(raw["layers"]), raw["space"], raw["weights"], int(raw["boards"]))


__all__ = ["DesignDrift", "baseline_weights"]
