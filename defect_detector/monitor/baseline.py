"""Drift baseline: how each monitored layer statistic is distributed over clean calibration frames.

:func:`calibrate` builds a :class:`Baseline` from per-frame statistics (``inspect/calibrate.py`` runs the model
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
from typing import Any

import numpy as np
import torch

from defect_detector.core.io import atomic_write_json, read_json_file
from defect_detector.monitor.blank import LEVELS

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
    median gray levels of the calibration frames (``monitor/blank.py`` ``LEVELS``), which alerts compare with.
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
        }

    @classmethod
    def from_dict(cls, raw: Any, where: str = "baseline") -> Baseline:
        """Validate and build a baseline; :class:`BaselineError` names ``where`` and the bad key."""
        header = _checked_header(raw, where)
        shape = (len(header["layer_names"]), len(STATISTICS))
        arrays = _checked_arrays(raw, shape, len(header["quantile_levels"]), where)
        return cls(**header, **arrays, **_checked_extras(raw, shape, where))

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


SPACES = ("linear", "log")
_LOG_FLOOR = 1e-6


def to_space(stats: np.ndarray, space: str) -> np.ndarray:
    """``stats`` as they are (``"linear"``) or their logarithms (``"log"``; values clamped at 1e-6)."""
    return np.log(np.maximum(stats, _LOG_FLOOR)) if space == "log" else stats


def _checked_header(raw: Any, where: str) -> dict[str, Any]:
    """The checked scalar fields of a baseline dict ``raw`` (its version readable, every array key present):
    ``layer_names``, ``statistics``, ``quantile_levels``, ``count`` and ``imgsz``."""
    if not isinstance(raw, dict):
        raise BaselineError(f"{where}: must be a JSON object, got {type(raw).__name__}")
    if "version" not in raw:
        raise BaselineError(f"{where}: missing keys ['version']")
    if raw["version"] not in READABLE_VERSIONS:
        raise BaselineError(
            f"{where}: version: unsupported baseline version {raw['version']!r} (expected {BASELINE_VERSION}); "
            "run `defect-detector calibrate` again to rebuild it"
        )
    missing = [k for k in ("layer_names", "mean", "std", "quantiles", "min", "max", "covariance", "count") if k not in raw]
    if missing:
        raise BaselineError(f"{where}: missing keys {missing}")
    names = raw["layer_names"]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise BaselineError(f"{where}: layer_names: must be a non-empty list of unique layer names, got {names!r}")
    statistics = tuple(raw.get("statistics", STATISTICS))
    if statistics != STATISTICS:
        raise BaselineError(f"{where}: statistics: must be {list(STATISTICS)}, got {list(statistics)}")
    levels = raw.get("quantile_levels", list(QUANTILE_LEVELS))
    if not isinstance(levels, list) or not levels or not all(_is_number(q) and 0 <= q <= 1 for q in levels):
        raise BaselineError(f"{where}: quantile_levels: must be a non-empty list of numbers in [0, 1], got {levels!r}")
    count = raw["count"]
    if isinstance(count, bool) or not isinstance(count, int) or count < _MIN_FRAMES:
        raise BaselineError(f"{where}: count: must be an integer >= {_MIN_FRAMES}, got {count!r}")
    imgsz = raw.get("imgsz")
    if imgsz is not None and (isinstance(imgsz, bool) or not isinstance(imgsz, int) or imgsz <= 0):
        raise BaselineError(f"{where}: imgsz: must be a positive integer or null, got {imgsz!r}")
    quantile_levels = tuple(float(q) for q in levels)
    return {"layer_names": list(names), "statistics": statistics, "quantile_levels": quantile_levels, "count": count, "imgsz": imgsz}


def _checked_arrays(raw: dict[str, Any], shape: tuple[int, int], num_levels: int, where: str) -> dict[str, np.ndarray]:
    """The distribution arrays of a baseline dict, float64: ``mean``, ``std``, ``min``, ``max`` of ``shape`` ``[L, 2]``,
    ``quantiles`` ``[L, 2, num_levels]`` and ``covariance`` ``[2L, 2L]`` (symmetric, non-negative diagonal)."""
    arrays = {key: _array(raw[key], shape, f"{where}: {key}") for key in ("mean", "std", "min", "max")}
    arrays["quantiles"] = _array(raw["quantiles"], (*shape, num_levels), f"{where}: quantiles")
    covariance = _array(raw["covariance"], (2 * shape[0], 2 * shape[0]), f"{where}: covariance")
    if not np.allclose(covariance, covariance.T) or (np.diag(covariance) < 0).any():
        raise BaselineError(f"{where}: covariance: must be symmetric with a non-negative diagonal")
    if (arrays["std"] < 0).any():
        raise BaselineError(f"{where}: std: must be >= 0")
    arrays["covariance"] = covariance
    return arrays


def _checked_extras(raw: dict[str, Any], shape: tuple[int, int], where: str) -> dict[str, Any]:
    """The checked optional fields of a baseline dict: ``model``, ``source``, ``created``, ``relative``, ``space``,
    ``level`` (``shape`` ``[L, 2]``; needed when ``relative``), ``image_levels`` ``[4]`` and ``faults``."""
    model = raw.get("model", {})
    if not isinstance(model, dict):
        raise BaselineError(f"{where}: model: must be an object, got {type(model).__name__}")
    relative = raw.get("relative", False)
    if not isinstance(relative, bool):
        raise BaselineError(f"{where}: relative: must be true or false, got {relative!r}")
    space = raw.get("space", "linear")
    if space not in SPACES:
        raise BaselineError(f"{where}: space: must be one of {list(SPACES)}, got {space!r}")
    level = _array(raw["level"], shape, f"{where}: level") if raw.get("level") is not None else None
    if relative and level is None:
        raise BaselineError(f"{where}: level: a relative (golden-template) baseline needs the frames' level")
    image_levels = raw.get("image_levels")
    image_levels = _array(image_levels, (len(LEVELS),), f"{where}: image_levels") if image_levels is not None else None
    return {
        "model": model,
        "source": str(raw.get("source", "")),
        "created": str(raw.get("created", "")),
        "relative": relative,
        "space": space,
        "level": level,
        "image_levels": image_levels,
        "faults": _faults(raw.get("faults"), shape, where),
    }


def _faults(raw: Any, shape: tuple[int, int], where: str) -> dict[str, np.ndarray] | None:
    """The ``faults`` entry: None, or ``{"clean": [N, L, 2], <fault>: [N, L, 2], ...}`` with one N >= 2."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or "clean" not in raw or len(raw) < 2:
        raise BaselineError(f"{where}: faults: must map 'clean' and fault names to per-frame statistics")
    frames = len(raw["clean"]) if isinstance(raw["clean"], list) else 0
    if frames < _MIN_FRAMES:
        raise BaselineError(f"{where}: faults: need at least {_MIN_FRAMES} frames per fault, got {frames}")
    return {str(k): _array(v, (frames, *shape), f"{where}: faults.{k}") for k, v in raw.items()}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _array(value: Any, shape: tuple[int, ...], where: str) -> np.ndarray:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise BaselineError(f"{where}: must be nested lists of numbers with shape {list(shape)}") from exc
    if array.shape != shape:
        raise BaselineError(f"{where}: must have shape {list(shape)}, got {list(array.shape)}")
    if not np.isfinite(array).all():
        raise BaselineError(f"{where}: must contain only finite numbers")
    return array


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
) -> Baseline:
    """Build a :class:`Baseline` from per-frame layer statistics of clean reference frames.

    ``stats_iter`` yields float ``[B, L, 2]`` (or ``[L, 2]``) tensors or arrays, layers in
    ``layer_names`` order. ``golden`` (golden-template models): the statistics of each frame's golden image
    paired with itself, in the same batches; the baseline is then ``relative`` (frame minus golden).
    Frames with a non-finite value are left out (and counted in a warning).
    ``faults``: see :class:`Baseline` (from ``inspect/calibrate.py``'s ``fault_statistics``). ``image_levels``:
    float ``[N, 4]`` gray levels of the frames (``monitor/blank.py``), stored as their median. ``space``: ``"log"`` or
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
    )


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
