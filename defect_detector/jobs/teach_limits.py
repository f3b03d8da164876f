"""The range of capture a design's good boards show, kept as the design's own limits (``teach --good``, issue 56).

The weights were validated at one set of limits (``core/limits.py``); a line's own boards may sit beyond one of them
while being good: a real board differs from its golden board more than a capture of the golden board does (solder,
component placement, silkscreen: the golden check's thick differences and slivers), it lies a little bowed
(the registration's residual), its light is set otherwise (the photometric fit). :func:`capture_limits` registers each
good board into the golden image with the golden check's and the residual's limits opened to :data:`CAPS`, reads
what it measures, and raises each of the design's limits the boards exceed to :data:`MARGIN` times the largest
reading, never past its cap and never below the weights' own. The photometric range is widened by one factor
(at most :data:`PHOTOMETRIC_CAP`) until every board's fit lies within it. A board beyond a cap stays refused: its
capture lies outside what any limit of the design should accept.

The design's frames are then judged by those limits (a taught entry's ``limits``: only the keys raised), and the good
boards, the painted defects on them and the design's point are read at them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from defect_detector.align.photometric import fit_photometric, is_binarized, photometric_reason
from defect_detector.align.register import register
from defect_detector.core.limits import Limits, PhotometricLimits

MARGIN = 1.25
"""A limit raised by the good boards is set to this many times their largest reading."""
CAPS = {"max_spread": 0.35, "max_tracks": 3.0, "max_slivers": 0.35, "max_missing": 4.0, "max_residual": 16.0}
"""The most each registration limit may be raised to: 1.67x, 2x, 1.75x and 2x the golden check's defaults, twice the
residual's 8 px. A design whose good boards open its golden check lets another board in its fixture pass the check
more easily (DeepPCB's wrong pairs measure a spread of 0.253 and up, ``core/config_register.py``); such a board is
then inspected against the wrong golden image and fails on its differences, where it would have been refused."""
READINGS = {"max_spread": "spread", "max_tracks": "tracks", "max_slivers": "slivers", "max_missing": "missing"}
"""Each golden-check limit and the :class:`~defect_detector.align.register.Registration` field it bounds."""
PHOTOMETRIC_CAP = 2.0
"""The photometric range (gain, gamma, offset, light field) is widened by at most this factor."""
_STEP = 0.05


@dataclass(frozen=True)
class CaptureRange:
    """What the good boards measured: ``readings`` per limit name (``register.max_spread``, ...) the largest reading
    over the boards that register within :data:`CAPS`, ``photometric``: the factor the photometric range needs (1.0:
    none; None: a board beyond :data:`PHOTOMETRIC_CAP`), ``beyond``: the boards that do not register even within the
    caps (name, why), ``weights``: the weights' limits, ``limits``: the design's."""

    readings: dict[str, float]
    photometric: float | None
    beyond: list[tuple[str, str]]
    weights: Limits
    limits: Limits

    @property
    def own(self) -> dict[str, dict[str, float]]:
        """The keys the design sets over the weights' limits (its taught entry's ``limits``; {} when none)."""
        return self.weights.changed(self.limits)

    def raised(self) -> dict[str, tuple[float, float]]:
        """``{limit: (the weights', the design's)}`` for each limit the good boards raised (``register.max_spread``,
        ``photometric.max_gain``, ...)."""
        return {
            f"{group}.{key}": (float(getattr(getattr(self.weights, group), key)), float(value))
            for group, keys in self.own.items()
            for key, value in keys.items()
        }


def capture_limits(golden: np.ndarray, boards: list[tuple[str, np.ndarray]], weights: Limits) -> CaptureRange:
    """The design's limits from its good ``boards`` (``(name, gray uint8 [H, W])``) against ``golden`` (uint8
    ``[H, W]``), over the ``weights``' limits (module docstring)."""
    opened = weights.register.model_copy(update={k: max(v, getattr(weights.register, k)) for k, v in CAPS.items()})
    readings: dict[str, list[float]] = {key: [] for key in CAPS}
    fits, beyond = [], []
    binarized = is_binarized(golden)
    for name, board in boards:
        warped, reg = register(golden, board, opened)
        if not reg.ok:
            beyond.append((name, reg.reason))
            continue
        for key, field in READINGS.items():
            readings[key].append(float(getattr(reg, field)))
        readings["max_residual"].append(float(reg.residual.determined))
        if not binarized:  # a binarized design's levels are not fitted (the prepare stage takes the identity)
            fits.append(fit_photometric(warped, board, reg.covered(board.shape)))
    register_own = {}
    for key, values in readings.items():
        largest, limit = max(values, default=0.0), float(getattr(weights.register, key))
        if largest > limit:
            register_own[key] = min(max(CAPS[key], limit), round(MARGIN * largest, 4))
    factor = _photometric_factor(fits, weights.photometric)
    own: dict[str, dict[str, float]] = {"register": register_own} if register_own else {}
    if factor is not None and factor > 1.0:
        own["photometric"] = {k: round(v * factor, 4) for k, v in weights.photometric.model_dump().items()}
    largest = {f"register.{key}": max(values, default=0.0) for key, values in readings.items()}
    return CaptureRange(largest, factor, beyond, weights, weights.for_design(own))


def _photometric_factor(fits: list, limits: PhotometricLimits) -> float | None:
    """The least factor (steps of 0.05 from 1.0) by which ``limits`` must be widened for every fit in ``fits`` to lie
    within them; None when even :data:`PHOTOMETRIC_CAP` is not enough for some fit."""
    factor = 1.0
    while factor <= PHOTOMETRIC_CAP + 1e-9:
        scaled = PhotometricLimits(**{k: v * factor for k, v in limits.model_dump().items()})
        if all(not photometric_reason(fit, scaled) for fit in fits):
            return factor
        factor = round(factor + _STEP, 4)
    return None


__all__ = ["CAPS", "MARGIN", "PHOTOMETRIC_CAP", "CaptureRange", "capture_limits"]
