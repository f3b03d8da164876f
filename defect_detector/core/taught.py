"""A design ``teach`` taught the weights: the one typed model of a ``taught`` entry, checked wherever weights are read
(a checkpoint, ``model/checkpoint.py``; an artifact's ``meta.json``, ``export/meta.py``).

Each entry: the golden image's file ``name`` and pixel fingerprint ``key``; ``conf``, the score threshold ``teach``
calibrated for it (absent before v0.16: the weights' own operating point); when taught from good boards its tolerance
map (``inspect/tolerance.py``: ``tolerance`` rows ``[x, y, score]`` in golden-image pixels, ``tolerance_radius``,
``tolerance_margin``; absent before v0.18); the calls operators rejected (``teach --station``: ``rejected`` rows of the
same form, ``rejected_radius``; absent before v0.19); and its inspection area (``align/inspection_area.py``: ``area``
polygons of golden-image ``[x, y]``, ``area_shape`` ``[height, width]``; absent before v0.19); and its own limits
(``core/limits.py``: ``limits``, only the keys ``teach`` set from its good boards, over the weights'; absent before
v0.19); and its own drift level (``monitor/design_drift.py``: ``drift``, the mean of what the drift detector scores
over its good boards, ``[L, 2]`` over the baseline's ``layers``, in its ``space``, with the digest of the ``weights``
it was read with and the number of ``boards``; absent before v0.19).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, model_validator

from defect_detector.core.limits import Limits
from defect_detector.core.typed_yaml import Str, check

Unit = Annotated[float, Strict(), Field(ge=0, le=1, allow_inf_nan=False)]
"""A number in [0, 1], never a bool, an integer or NaN (a score, a threshold, a margin)."""
_Coordinate = Annotated[float, Field(allow_inf_nan=False)]
_Radius = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]
_Rows = list[tuple[_Coordinate, _Coordinate, Unit]]

MAP_KEYS = ("tolerance", "tolerance_radius", "tolerance_margin", "rejected", "rejected_radius")
"""The keys of the tolerance map and of the operators' rejections."""
AREA_KEYS = ("area", "area_shape")
"""The keys of the inspection area."""
TAUGHT_KEYS = ("name", "key", "conf", *MAP_KEYS, *AREA_KEYS, "limits", "drift")
"""Every key of an entry."""


class DriftEntry(BaseModel):
    """A taught design's own drift level (``monitor/design_drift.py``): ``mean`` one ``[mean, std]`` row per layer of
    ``layers``, read in ``space`` with the weights of digest ``weights`` ("" unknown) over ``boards`` good boards."""

    model_config = ConfigDict(extra="forbid")

    mean: list[tuple[_Coordinate, _Coordinate]]
    layers: Annotated[list[Str], Field(min_length=1)]
    space: Literal["linear", "log"]
    weights: str
    boards: Annotated[int, Strict(), Field(ge=1)]

    @model_validator(mode="after")
    def _rows(self) -> DriftEntry:
        check(len(self.mean) == len(self.layers), "drift", "one mean row per layer", [len(self.mean), len(self.layers)])
        return self


class TaughtEntry(BaseModel):
    """One ``taught`` entry (module docstring); unknown keys are refused, and each group is given whole or not at all."""

    model_config = ConfigDict(extra="forbid")

    name: Str
    key: Str
    conf: Unit | None = None
    tolerance: _Rows | None = None
    tolerance_radius: _Radius | None = None
    tolerance_margin: Unit | None = None
    rejected: _Rows | None = None
    rejected_radius: _Radius | None = None
    area: Annotated[list[Annotated[list[tuple[_Coordinate, _Coordinate]], Field(min_length=3)]], Field(min_length=1)] | None = None
    area_shape: tuple[Annotated[int, Strict(), Field(gt=0)], Annotated[int, Strict(), Field(gt=0)]] | None = None
    limits: dict[str, Any] | None = None
    drift: DriftEntry | None = None

    @model_validator(mode="after")
    def _limits(self) -> TaughtEntry:
        Limits().for_design(self.limits)  # a bad key or value: one line naming limits.<key>
        return self

    @model_validator(mode="after")
    def _whole(self) -> TaughtEntry:
        given = [v is not None for v in (self.tolerance, self.tolerance_radius, self.tolerance_margin)]
        check(all(given) or not any(given), "tolerance", "tolerance, tolerance_radius and tolerance_margin given together", given)
        rejected = [v is not None for v in (self.rejected, self.rejected_radius)]
        check(all(rejected) or not any(rejected), "rejected", "rejected and rejected_radius given together", rejected)
        area = [v is not None for v in (self.area, self.area_shape)]
        check(all(area) or not any(area), "area", "area and area_shape given together", area)
        return self


def entry_problem(entry: Any) -> str | None:
    """What is wrong with one raw ``taught`` entry: ``"entry"`` (not a mapping, or its name, key or point, or an
    unknown key), ``"map"`` (its tolerance map or rejections), ``"area"`` (its inspection area), ``"limits"`` (its
    limits), ``"drift"`` (its drift level), or None when it is whole."""
    if not isinstance(entry, dict):
        return "entry"
    try:
        TaughtEntry.model_validate(entry)
    except ValidationError as exc:
        places = {str(e["loc"][0]) if e["loc"] else "" for e in exc.errors()}
        text = str(exc)
        if "limits" in places or "limits." in text or "limits:" in text:
            return "limits"
        if "drift" in places:
            return "drift"
        if places & set(AREA_KEYS) or "area and area_shape" in text:
            return "area"
        if places & set(MAP_KEYS) or "given together" in text:
            return "map"
        return "entry"
    return None


__all__ = ["AREA_KEYS", "DriftEntry", "MAP_KEYS", "TAUGHT_KEYS", "TaughtEntry", "Unit", "entry_problem"]
