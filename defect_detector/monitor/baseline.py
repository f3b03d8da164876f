"""Drift baseline: how each monitored layer statistic is distributed over clean calibration frames.

:func:`calibrate` builds a :class:`Baseline` from per-frame statistics (``jobs/calibrate.py`` runs the model
over clean frames through the frame pipeline to get them). ``defect-detector calibrate`` writes one as JSON;
``strip --baseline`` and ``export --baseline`` carry it inside the weights, so ``predict`` monitors drift without
extra files.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Annotated, Any

import numpy as np
import torch
from pydantic import BaseModel, BeforeValidator, ConfigDict, StrictFloat, ValidationError, model_validator

from defect_detector.core.constants import LEVELS
from defect_detector.core.io import atomic_write_json, read_json_file
from defect_detector.core.typed_yaml import Bool, Int, Invalid, Str, check, error_parts

logger = logging.getLogger("defect_detector.monitor")

STATISTICS = ("mean", "std")
QUANTILE_LEVELS = (0.01, 0.05, 0.5, 0.95, 0.99)
BASELINE_VERSION = 5
"""5: golden-template baselines describe each frame relative to its golden image (``relative``), and every baseline
records the frames' raw ``level`` and their gray ``image_levels``; 4: with the statistics of simulated camera faults
(``faults``); 3: without (alerts then name no cause); statistics read on every ``ceil(H / 40)``-th row of tall layers
(2: every ``ceil(H / 80)``-th; 1: no covariance)."""
READABLE_VERSIONS = (3, 4, 5)
FAULT_FRAMES = 64
"""Calibration frames that ``calibrate`` also runs with each simulated fault (``monitor/faults.py``)."""
_EPS = 1e-6
_MIN_FRAMES = 2
_FEW_FRAMES = 30


class BaselineError(ValueError):
    """A baseline file or dict is missing, unreadable or malformed; the message says where and what."""


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Baseline:
    """Reference distribution of each monitored layer statistic over clean frames.

    Arrays are float64: ``mean``, ``std`` (sample std over frames), ``min``, ``max`` are ``[L, 2]``;
    ``quantiles`` is ``[L, 2, Q]`` at ``quantile_levels``; ``covariance`` is ``[2L, 2L]``, the sample
    covariance over frames of the statistics flattened layer-major (entry ``2 * l + s``). The last axis of size 2 follows
    ``statistics`` = ``("mean", "std")``. ``count`` is the number of frames. ``model`` is free-form
    information about the model that produced the statistics (weights path, class names, ...).
    ``faults`` (or None): float64 ``[N, L, 2]`` statistics of N calibration frames under each simulated
    fault of ``monitor/faults.py`` (by name), and of the same frames clean (``"clean"``); the drift
    detector names an alert's likely cause from them (``monitor/explain.py``).

    ``space``: the statistics are described as they are (``"linear"``) or as their logarithms (``"log"``, chosen by
    :func:`calibrate` when every statistic is positive: content scales activations, and a log turns that into a shift
    the covariance removes). ``relative`` (golden-template models): the distribution is that of ``frame - golden`` in
    that space (a log-ratio), each frame's statistics against those of its golden image paired with itself
    (``monitor/drift.py``), so the board design cancels out.
    ``level`` float64 ``[L, 2]``: the mean of the frames' own statistics (equal to ``mean`` unless ``relative``;
    the unit of ``rel_floor`` and of the percentages alerts quote). ``image_levels`` float64 ``[4]`` or None: the
    median gray levels of the calibration frames (``screens/blank.py`` ``LEVELS``), which alerts compare with.
    ``pixel_levels`` float64 ``[B]`` or None: the share of the calibration frames' pixels at each of B grey-level bins
    (``screens/hidden.py`` ``level_histogram``): a single-image model's hidden-area screen reads it.
    """

    layer_names: list[str]
    mean: np.ndarray
    std: np.ndarray
    quantiles: np.ndarray
    min: np.ndarray
    max: np.ndarray
    covariance: np.ndarray
    count: int
    imgsz: int | None = None
    model: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    created: str = field(default_factory=utc_now)
    statistics: tuple[str, ...] = STATISTICS
    quantile_levels: tuple[float, ...] = QUANTILE_LEVELS
    faults: dict[str, np.ndarray] | None = None
    relative: bool = False
    space: str = "linear"
    level: np.ndarray | None = None
    image_levels: np.ndarray | None = None
    pixel_levels: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.level is None:
            self.level = self.mean

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (nested lists of floats), the inverse of :meth:`from_dict`."""
        return {
            "version": BASELINE_VERSION,
            "layer_names": list(self.layer_names),
            "statistics": list(self.statistics),
            "quantile_levels": list(self.quantile_levels),
            "count": int(self.count),
            "imgsz": self.imgsz,
            "model": self.model,
            "source": self.source,
            "created": self.created,
            "mean": self.mean.tolist(),
            "std": self.std.tolist(),
            "quantiles": self.quantiles.tolist(),
            "min": self.min.tolist(),
            "max": self.max.tolist(),
            "covariance": self.covariance.tolist(),
            "faults": {k: v.tolist() for k, v in self.faults.items()} if self.faults else None,
            "relative": self.relative,
            "space": self.space,
            "level": self.level.tolist(),
            "image_levels": self.image_levels.tolist() if self.image_levels is not None else None,
            "pixel_levels": self.pixel_levels.tolist() if self.pixel_levels is not None else None,
        }

    @classmethod
    def from_dict(cls, raw: Any, where: str = "baseline") -> Baseline:
        """Validate (:class:`BaselineFile`) and build a baseline; :class:`BaselineError`, one line naming ``where``, the
        bad key and what is wrong with it."""
        try:
            parsed = BaselineFile.model_validate(raw)
        except ValidationError as exc:
            key, text = error_parts(exc, BaselineFile)
            raise BaselineError(f"{where}: {key}: {text}" if key else f"{where}: {text}") from None
        return cls(**{name: getattr(parsed, name) for name in BaselineFile.model_fields if name != "version"})

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the baseline as JSON atomically (temp file + rename)."""
        atomic_write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Baseline:
        """Read a baseline JSON file; :class:`BaselineError` for a missing, unreadable or malformed file."""
        return cls.from_dict(read_json_file(path, "baseline", BaselineError), where=str(path))

    def scale(self, rel_floor: float) -> np.ndarray:
        """float64 ``[L, 2]``: ``max(std, eps, rel_floor * |level|)`` (``"log"`` space: ``max(std, eps, rel_floor)``, the
        same relative floor), the unit of every z-score."""
        floor = rel_floor if self.space == "log" else rel_floor * np.abs(self.level)
        return np.maximum(np.maximum(self.std, _EPS), floor)

    def transform(self, stats: np.ndarray) -> np.ndarray:
        """Statistics ``[..., L, 2]`` in the baseline's space (``log``: logarithms, non-positive values clamped)."""
        return to_space(stats, self.space)

    def scored(self, stats: np.ndarray, golden: np.ndarray | None = None) -> np.ndarray:
        """What the drift detector scores of a frame's statistics ``stats`` float ``[L, 2]``: in this space, less its
        golden image's ``golden`` (``[L, 2]``, required) with a relative baseline (``monitor/drift.py``)."""
        if not self.relative:
            return self.transform(stats)
        if golden is None:
            raise ValueError("this baseline reads each frame against its golden image: pass the golden image's statistics")
        return self.transform(stats) - self.transform(golden)


SPACES = ("linear", "log")
_LOG_FLOOR = 1e-6


def to_space(stats: np.ndarray, space: str) -> np.ndarray:
    """``stats`` as they are (``"linear"``) or their logarithms (``"log"``; values clamped at 1e-6)."""
    return np.log(np.maximum(stats, _LOG_FLOOR)) if space == "log" else stats


def _float64(value: Any) -> np.ndarray:
    """Nested lists of finite numbers as a float64 array; :class:`Invalid` for anything else."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise Invalid("", "must be nested lists of numbers") from exc
    if not np.isfinite(array).all():
        raise Invalid("", "must contain only finite numbers")
    return array


Array = Annotated[Any, BeforeValidator(_float64)]
"""A float64 array of finite numbers read from nested lists (its shape is checked against ``layer_names``)."""


def _shape(array: np.ndarray, shape: tuple[int, ...], key: str) -> None:
    if array.shape != shape:
        raise Invalid(key, f"must have shape {list(shape)}, got {list(array.shape)}")


class BaselineFile(BaseModel):
    """The JSON form of a :class:`Baseline` (:meth:`Baseline.to_dict`), checked key by key (unknown keys refused):
    a readable ``version``, unique ``layer_names`` (L of them), arrays of the shapes :class:`Baseline` gives,
    ``faults`` None or ``{"clean": [N, L, 2], <fault>: [N, L, 2], ...}`` with one N >= 2."""

    model_config = ConfigDict(extra="forbid")

    version: Int
    layer_names: list[Str]
    mean: Array
    std: Array
    quantiles: Array
    min: Array
    max: Array
    covariance: Array
    count: Int
    statistics: tuple[Str, ...] = STATISTICS
    quantile_levels: tuple[StrictFloat, ...] = QUANTILE_LEVELS
    imgsz: Int | None = None
    model: dict[str, Any] = {}
    source: Str = ""
    created: Str = ""
    relative: Bool = False
    space: Str = "linear"
    level: Array | None = None
    image_levels: Array | None = None
    pixel_levels: Array | None = None
    faults: dict[str, Array] | None = None

    @model_validator(mode="before")
    @classmethod
    def _readable(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            raise Invalid("", f"must be a JSON object, got {type(raw).__name__}")
        if "version" not in raw:
            raise Invalid("", "missing keys ['version']")
        if raw["version"] not in READABLE_VERSIONS:
            expected = f"(expected {BASELINE_VERSION}); run `defect-detector calibrate` again to rebuild it"
            raise Invalid("version", f"unsupported baseline version {raw['version']!r} {expected}")
        return raw

    @model_validator(mode="after")
    def _check_header(self) -> BaselineFile:
        names, levels = self.layer_names, self.quantile_levels
        unique = bool(names) and all(names) and len(set(names)) == len(names)
        check(unique, "layer_names", "must be a non-empty list of unique layer names", names)
        check(self.statistics == STATISTICS, "statistics", f"must be {list(STATISTICS)}", list(self.statistics))
        ok = bool(levels) and all(math.isfinite(q) and 0 <= q <= 1 for q in levels)
        check(ok, "quantile_levels", "must be a non-empty list of numbers in [0, 1]", list(levels))
        check(self.count >= _MIN_FRAMES, "count", f"must be an integer >= {_MIN_FRAMES}", self.count)
        check(self.imgsz is None or self.imgsz > 0, "imgsz", "must be a positive integer or null", self.imgsz)
        check(self.space in SPACES, "space", f"must be one of {list(SPACES)}", self.space)
        return self

    @model_validator(mode="after")
    def _check_arrays(self) -> BaselineFile:
        shape = (len(self.layer_names), len(STATISTICS))
        for key in ("mean", "std", "min", "max"):
            _shape(getattr(self, key), shape, key)
        _shape(self.quantiles, (*shape, len(self.quantile_levels)), "quantiles")
        _shape(self.covariance, (2 * shape[0], 2 * shape[0]), "covariance")
        if not np.allclose(self.covariance, self.covariance.T) or (np.diag(self.covariance) < 0).any():
            raise Invalid("covariance", "must be symmetric with a non-negative diagonal")
        if (self.std < 0).any():
            raise Invalid("std", "must be >= 0")
        if self.level is not None:
            _shape(self.level, shape, "level")
        elif self.relative:
            raise Invalid("level", "a relative (golden-template) baseline needs the frames' level")
        if self.image_levels is not None:
            _shape(self.image_levels, (len(LEVELS),), "image_levels")
        levels = self.pixel_levels
        if levels is not None and (levels.ndim != 1 or len(levels) not in (8, 16, 32, 64, 128, 256) or (levels < 0).any()):
            raise Invalid("pixel_levels", "must be a list of 8, 16, 32, 64, 128 or 256 shares >= 0 (grey-level bins)")
        if self.faults is not None:
            if "clean" not in self.faults or len(self.faults) < 2:
                raise Invalid("faults", "must map 'clean' and fault names to per-frame statistics")
            frames = len(self.faults["clean"])
            if frames < _MIN_FRAMES:
                raise Invalid("faults", f"need at least {_MIN_FRAMES} frames per fault, got {frames}")
            for name, array in self.faults.items():
                _shape(array, (frames, *shape), f"faults.{name}")
        return self


def as_frames(stats: torch.Tensor | np.ndarray, num_layers: int) -> np.ndarray:
    """``[L, 2]`` or ``[B, L, 2]`` tensor/array -> float64 ``[B, L, 2]`` on the host (one copy)."""
    if isinstance(stats, torch.Tensor):
        stats = stats.detach().to("cpu", torch.float64).numpy()
    array = np.asarray(stats, dtype=np.float64)
    if array.ndim == 2:
        array = array[None]
    if array.ndim != 3 or array.shape[1:] != (num_layers, len(STATISTICS)):
        raise ValueError(f"layer statistics must have shape [L, 2] or [B, L, 2] with L = {num_layers}, got {list(array.shape)}")
    return array


def calibrate(  # noqa: PLR0913 - one keyword per Baseline field it records (imgsz, model, source, faults, image_levels, space)
    stats_iter: Iterable[torch.Tensor | np.ndarray],
    layer_names: Sequence[str],
    imgsz: int | None = None,
    model_info: dict[str, Any] | None = None,
    source: str = "",
    faults: dict[str, np.ndarray] | None = None,
    golden: Iterable[torch.Tensor | np.ndarray] | None = None,
    image_levels: np.ndarray | None = None,
    space: str | None = None,
    pixel_levels: np.ndarray | None = None,
) -> Baseline:
    """Build a :class:`Baseline` from per-frame layer statistics of clean reference frames.

    ``stats_iter`` yields float ``[B, L, 2]`` (or ``[L, 2]``) tensors or arrays, layers in
    ``layer_names`` order. ``golden`` (golden-template models): the statistics of each frame's golden image
    paired with itself, in the same batches; the baseline is then ``relative`` (frame minus golden).
    Frames with a non-finite value are left out (and counted in a warning).
    ``faults``: see :class:`Baseline` (from ``jobs/calibrate.py``'s ``fault_statistics``). ``image_levels``:
    float ``[N, 4]`` gray levels of the frames (``screens/blank.py``), stored as their median. ``pixel_levels``: float
    ``[B]`` counts of the frames' pixels per grey-level bin, stored as shares. ``space``: ``"log"`` or
    ``"linear"`` (None: log when every statistic is positive). Raises
    ``ValueError`` for fewer than 2 usable frames; warns below 30.
    """
    values, references = _finite_frames(stats_iter, golden, len(layer_names))
    level = values.mean(axis=0) if len(values) else None
    space = _chosen_space(values, references, space)
    values = to_space(values, space)
    if references is not None:
        values = values - to_space(references, space)
    if len(values) < _MIN_FRAMES:
        raise ValueError(f"calibration needs at least {_MIN_FRAMES} frames with finite statistics, got {len(values)}")
    if len(values) < _FEW_FRAMES:
        logger.warning("calibration: only %d frames; the baseline spread is a rough estimate (use >= %d)", len(values), _FEW_FRAMES)
    return Baseline(
        layer_names=list(layer_names),
        mean=values.mean(axis=0),
        std=values.std(axis=0, ddof=1),
        quantiles=np.moveaxis(np.quantile(values, QUANTILE_LEVELS, axis=0), 0, -1),
        min=values.min(axis=0),
        max=values.max(axis=0),
        covariance=np.atleast_2d(np.cov(values.reshape(len(values), -1), rowvar=False)),
        count=len(values),
        imgsz=imgsz,
        model=dict(model_info or {}),
        source=source,
        faults=faults,
        relative=references is not None,
        space=space,
        level=level,
        image_levels=np.median(np.asarray(image_levels, np.float64), axis=0) if image_levels is not None and len(image_levels) else None,
        pixel_levels=_shares(pixel_levels),
    )


def _shares(counts: np.ndarray | None) -> np.ndarray | None:
    """float64 counts as shares of their sum (None when absent or empty)."""
    if counts is None or float(np.sum(counts)) <= 0:
        return None
    counts = np.asarray(counts, np.float64)
    return counts / counts.sum()


def _finite_frames(
    stats_iter: Iterable[torch.Tensor | np.ndarray], golden: Iterable[torch.Tensor | np.ndarray] | None, num_layers: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """Float64 ``[N, L, 2]`` frame statistics and their golden images' (None without ``golden``; the same shape), the
    frames with a non-finite value in either left out (and counted in a warning)."""
    values = _stacked(stats_iter, num_layers)
    references = _stacked(golden, num_layers) if golden is not None else None
    if references is not None and references.shape != values.shape:
        raise ValueError(f"got golden-image statistics for {len(references)} frames and frame statistics for {len(values)}")
    finite = np.isfinite(values).all(axis=(1, 2)) & (np.isfinite(references).all(axis=(1, 2)) if references is not None else True)
    if not finite.all():
        logger.warning("calibration: left out %d of %d frames with non-finite layer statistics", int((~finite).sum()), len(values))
        values = values[finite]
        references = references[finite] if references is not None else None
    return values, references


def _chosen_space(values: np.ndarray, references: np.ndarray | None, space: str | None) -> str:
    """``space`` checked, or when None ``"log"`` if every statistic (``[N, L, 2]``, and the golden images') is positive,
    else ``"linear"``."""
    if space is None:
        positive = len(values) and (values > 0).all() and (references is None or (references > 0).all())
        space = "log" if positive else "linear"
    if space not in SPACES:
        raise ValueError(f"space must be one of {list(SPACES)}, got {space!r}")
    return space


def _stacked(stats_iter: Iterable[torch.Tensor | np.ndarray], num_layers: int) -> np.ndarray:
    """Float64 ``[N, L, 2]`` of batches of per-frame statistics."""
    frames = [as_frames(stats, num_layers) for stats in stats_iter]
    return np.concatenate(frames) if frames else np.zeros((0, num_layers, len(STATISTICS)))
