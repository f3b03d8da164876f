"""Is a golden image like the ones the model was trained (or taught) on? Statistics of its look, and a model of them.

A golden-template model learns the look of its training pairs: DeepPCB's are binarized scans (two grey levels, 0 and
255, edges one pixel wide, no texture), a line camera's are photographs (substrate, copper and pads a few tens of
levels apart, soft edges, noise and texture). :func:`design_stats` measures a golden image's look in a few
milliseconds (:data:`FEATURES`); :class:`DomainModel`, fitted on the golden images of a training set, says how far
a new golden image lies from all of them (:meth:`DomainModel.distance`) and names the feature farthest off
(:meth:`DomainModel.explain`). It travels in the weights (``meta.json`` key ``domain``, :meth:`DomainModel.to_dict`).

Distances are Euclidean in standardised units: each feature (``track_width`` as ``log2`` pixels) minus the training
median, divided by its robust spread (1.4826 x MAD), never less than the feature's :data:`FLOORS` (a difference that
matters: 3% of the pixels, 24 grey levels, 0.4 px of edge width...). The distance of an image is the one to its
nearest reference vector (the training goldens, at most :data:`MAX_REFERENCES` chosen by farthest-point sampling,
plus the designs taught later: :meth:`DomainModel.extend`); it is unlike the training images above ``threshold``:
the 99th percentile of the training goldens' leave-one-out distances (each to its nearest other reference), or the
covering radius of the references, whichever is larger, times :data:`MARGIN`, and at least :data:`MIN_THRESHOLD`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from typing import Annotated, Any

import cv2
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from defect_detector.core.board_area import board_area
from defect_detector.monitor.scale import ScaleRange, ridge_widths

WORK_SIDE = 1024
"""Histogram and track-width features are read on the image downscaled (INTER_AREA) to at most this side; edge width
and texture on its central crop of at most this side at the original resolution (no resampling)."""

FEATURES = ("binary", "midtones", "contrast", "texture", "edge_width", "track_width")
"""The statistics of :class:`DesignStats`, in vector order."""

FLOORS = (0.03, 0.02, 24.0, 0.01, 0.4, 0.5)
"""The least spread of each feature in :data:`FEATURES` order (its units; ``track_width`` in log2 px)."""

MAX_REFERENCES = 256
MAX_TAUGHT = 256
MARGIN = 1.5
MIN_THRESHOLD = 3.0
MIN_PHASE = 0.002
"""An image whose darker or brighter phase (either side of Otsu's threshold) holds fewer pixels than this share, or
whose phases lie fewer than 8 grey levels apart, is flat: its look cannot be read (never called unlike)."""


@dataclass(frozen=True)
class DesignStats:
    """The look of one golden image (uint8 gray ``[H, W]``), from :func:`design_stats`.

    ``binary``: share of pixels within 10% of the contrast of the dark or the bright level (the medians of the pixels
    either side of Otsu's threshold); 1 for a binarized scan. ``midtones``: share of pixels between 25% and 75% of the
    way from the dark to the bright level. ``contrast``: bright minus dark level (grey levels). ``texture``: median
    local standard deviation (5x5 px) in flat regions, as a share of the contrast. ``edge_width``: contrast over the
    median peak gradient (central difference, grey levels per px) on edges, in original pixels (2 for a sharp step).
    ``track_width``: median width (twice the distance transform on its ridge) of the narrower phase, original px.
    ``flat``: the image has no two phases to read (:data:`MIN_PHASE`)."""

    binary: float
    midtones: float
    contrast: float
    texture: float
    edge_width: float
    track_width: float
    flat: bool = False

    def vector(self) -> np.ndarray:
        """float64 ``[len(FEATURES)]``: the features in model units (``track_width`` as log2 px)."""
        values = list(astuple(self)[: len(FEATURES)])
        values[-1] = math.log2(max(values[-1], 0.5))
        return np.asarray(values, dtype=np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _check_gray(image: Any) -> np.ndarray:
    if not isinstance(image, np.ndarray) or image.ndim != 2 or image.dtype != np.uint8 or min(image.shape) < 8:
        got = f"{getattr(image, 'dtype', type(image).__name__)} {getattr(image, 'shape', '')}"
        raise ValueError(f"expected a uint8 gray [H, W] image of at least 8x8 px, got {got}")
    return image


def _phases(counts: np.ndarray) -> tuple[int, float, float, float]:
    """``(Otsu threshold, dark level, bright level, share of the smaller phase)`` of a float64 ``[256]`` histogram: the
    levels are the medians of the pixels at or below and above the threshold."""
    levels = np.arange(256, dtype=np.float64)
    total = counts.sum()
    weight = np.cumsum(counts)
    mass = np.cumsum(counts * levels)
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (mass[-1] * weight - total * mass) ** 2 / (weight * (total - weight))
    split = int(np.argmax(np.nan_to_num(between, nan=-1.0, posinf=-1.0)))
    low, high = weight[split], total - weight[split]
    if low == 0 or high == 0:
        return split, float(split), float(split), 0.0
    dark = float(np.searchsorted(weight, low / 2))
    bright = float(np.searchsorted(weight, low + high / 2))
    return split, dark, bright, float(min(low, high) / total)


def _edges(crop: np.ndarray, contrast: float) -> tuple[float, float]:
    """``(edge width px, texture share)`` of the original-resolution ``crop`` with phases ``contrast`` levels apart."""
    pixels = crop.astype(np.float32)
    gx = cv2.Sobel(pixels, cv2.CV_32F, 1, 0, ksize=3, scale=0.125)
    gy = cv2.Sobel(pixels, cv2.CV_32F, 0, 1, ksize=3, scale=0.125)
    magnitude = cv2.magnitude(gx, gy)
    edge = magnitude >= 0.1 * contrast
    peaks = edge & (magnitude >= cv2.dilate(magnitude, np.ones((3, 3), np.uint8)))
    width = contrast / float(np.median(magnitude[peaks])) if peaks.any() else 0.0
    mean = cv2.blur(pixels, (5, 5))
    std = np.sqrt(np.maximum(cv2.blur(pixels * pixels, (5, 5)) - mean * mean, 0.0))
    flat = cv2.dilate(edge.astype(np.uint8), np.ones((5, 5), np.uint8)) == 0
    texture = float(np.median(std[flat][::4])) / contrast if flat.any() else 0.0
    return width, texture


def _track_width(mask: np.ndarray) -> float:
    """The median ridge width of the foreground of uint8 ``mask`` (px; 0 if empty): ``ridge_widths`` with the 3x3 mask
    the stored domains were fitted with."""
    widths = ridge_widths(mask, cv2.DIST_MASK_3)
    return float(np.median(widths)) if widths.size else 0.0


def design_stats(image: np.ndarray) -> DesignStats:
    """:class:`DesignStats` of a uint8 gray ``[H, W]`` golden image of any size (a few ms at 640x640; larger images are
    read downscaled, see :data:`WORK_SIDE`), read on the board's own area (``core/board_area.py``: a plain background
    round the board, such as a scan placed on a grey frame, is left out). ``ValueError`` for anything else."""
    image = _check_gray(image)
    image = board_area(image).crop(image)
    height, width = image.shape
    factor = min(1.0, WORK_SIDE / max(height, width))
    size = (max(8, round(width * factor)), max(8, round(height * factor)))
    work = image if factor == 1.0 else cv2.resize(image, size, interpolation=cv2.INTER_AREA)
    counts = cv2.calcHist([work], [0], None, [256], [0, 256]).ravel().astype(np.float64)
    threshold, dark, bright, minority = _phases(counts)
    contrast = bright - dark
    if minority < MIN_PHASE or contrast < 8:
        return DesignStats(1.0, 0.0, contrast, 0.0, 0.0, 0.0, flat=True)
    levels = (np.arange(256) - dark) / contrast
    share = counts / counts.sum()
    binary = float(share[(np.abs(levels) <= 0.1) | (np.abs(levels - 1) <= 0.1)].sum())
    midtones = float(share[(levels > 0.25) & (levels < 0.75)].sum())
    top, left = max(0, (height - WORK_SIDE) // 2), max(0, (width - WORK_SIDE) // 2)
    edge_width, texture = _edges(image[top : top + WORK_SIDE, left : left + WORK_SIDE], contrast)
    mask = work > threshold
    tracks = min(_track_width(mask.astype(np.uint8)), _track_width((~mask).astype(np.uint8))) / factor
    return DesignStats(binary, midtones, contrast, texture, edge_width, tracks)


def _words(name: str, value: float) -> str:
    """A feature's raw ``value`` in words (see :class:`DesignStats`)."""
    if name == "binary":
        return f"{value:.0%} of the pixels at its two main grey levels"
    if name == "midtones":
        return f"mid-tones {value:.0%} of the image"
    if name == "contrast":
        return f"contrast {value:.0f} grey levels"
    if name == "texture":
        return f"texture in flat areas {value:.1%} of the contrast"
    if name == "edge_width":
        return f"edges {value:.1f} px wide"
    return f"tracks {value:.0f} px wide"


def _bound(name: str, value: float) -> str:
    """A feature's raw ``value`` with its unit, as a training bound."""
    if name in ("binary", "midtones"):
        return f"{value:.0%}"
    return {"contrast": f"{value:.0f}", "texture": f"{value:.1%}", "edge_width": f"{value:.1f} px"}.get(name, f"{value:.0f} px")


_Vector = Annotated[list[float], Field(min_length=len(FEATURES), max_length=len(FEATURES))]


class _DomainFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = 1
    features: list[str]
    centre: _Vector
    scale: _Vector
    low: _Vector
    high: _Vector
    references: Annotated[list[_Vector], Field(min_length=1)]
    taught: list[_Vector] = []
    threshold: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    fitted_on: int = 0
    scale_range: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _check(self) -> _DomainFile:
        if tuple(self.features) != FEATURES:
            raise ValueError(f"features must be {list(FEATURES)}")
        rows = (self.centre, self.scale, self.low, self.high, *self.references, *self.taught)
        if min(self.scale) <= 0 or not all(math.isfinite(v) for row in rows for v in row):
            raise ValueError("scale must be positive and every number finite")
        if self.scale_range is not None:
            ScaleRange.from_dict(self.scale_range)
        return self


@dataclass
class DomainModel:
    """Where the golden images of a training set lie (see the module docstring).

    ``centre`` / ``scale``: float64 ``[F]`` per feature (model units, :meth:`DesignStats.vector`); ``low`` / ``high``:
    float64 ``[F]`` the least and greatest raw value seen (the words of :meth:`explain`); ``references``: float64
    ``[R, F]`` standardised training vectors (R <= :data:`MAX_REFERENCES`); ``taught``: float64 ``[T, F]`` those added by
    :meth:`extend`; ``threshold``: the distance above which a golden image is unlike them; ``fitted_on``: goldens read;
    ``scale_range``: the scale the weights were validated at (``monitor/scale.py``; None: not recorded, no scale check)."""

    centre: np.ndarray
    scale: np.ndarray
    low: np.ndarray
    high: np.ndarray
    references: np.ndarray
    threshold: float
    taught: np.ndarray
    fitted_on: int = 0
    scale_range: ScaleRange | None = None

    @classmethod
    def fit(cls, stats: Iterable[DesignStats]) -> DomainModel:
        """Fit on the :class:`DesignStats` of training golden images (flat ones skipped). ``ValueError`` with fewer than 2."""
        rows = [s for s in stats if not s.flat]
        if len(rows) < 2:
            raise ValueError(f"a design domain needs at least 2 golden images with two grey-level phases, got {len(rows)}")
        raw = np.array([astuple(s)[: len(FEATURES)] for s in rows], dtype=np.float64)
        vectors = np.stack([s.vector() for s in rows])
        centre = np.median(vectors, axis=0)
        scale = np.maximum(1.4826 * np.median(np.abs(vectors - centre), axis=0), FLOORS)
        z = (vectors - centre) / scale
        chosen = _farthest_points(z, MAX_REFERENCES)
        references = z[chosen]
        distance = np.linalg.norm(z[:, None, :] - references[None, :, :], axis=2)  # [N, R]
        distance[chosen, np.arange(len(chosen))] = np.inf  # leave one out: a reference is not its own neighbour
        loo = distance.min(axis=1)
        cover = float(np.delete(loo, chosen).max()) if len(chosen) < len(z) else 0.0
        threshold = max(MIN_THRESHOLD, MARGIN * max(float(np.quantile(loo, 0.99)), cover))
        return cls(centre, scale, raw.min(axis=0), raw.max(axis=0), references, threshold, np.zeros((0, len(FEATURES))), len(rows))

    def _z(self, stats: DesignStats) -> np.ndarray:
        return (stats.vector() - self.centre) / self.scale

    def _all(self) -> np.ndarray:
        return np.concatenate([self.references, self.taught]) if len(self.taught) else self.references

    def distance(self, stats: DesignStats) -> float:
        """Distance (standardised units) of ``stats`` to the nearest reference; 0 for a flat image."""
        if stats.flat:
            return 0.0
        return float(np.linalg.norm(self._all() - self._z(stats), axis=1).min())

    def is_unlike(self, stats: DesignStats) -> bool:
        """Whether ``stats`` lie farther than ``threshold`` from every reference."""
        return self.distance(stats) > self.threshold

    def explain(self, stats: DesignStats) -> str:
        """The feature of ``stats`` farthest off, in words: e.g. ``"mid-tones 62% of the image, training at most 3%"``.
        It is the feature farthest outside the references' range (standardised), else the one farthest from the
        nearest reference."""
        z, refs = self._z(stats), self._all()
        outside = np.maximum(refs.min(axis=0) - z, 0) + np.maximum(z - refs.max(axis=0), 0)
        if not outside.any():
            outside = np.abs(z - refs[np.argmin(np.linalg.norm(refs - z, axis=1))])
        i = int(np.argmax(outside))
        name, value = FEATURES[i], astuple(stats)[i]
        if value > self.high[i]:
            return f"{_words(name, value)}, training at most {_bound(name, self.high[i])}"
        if value < self.low[i]:
            return f"{_words(name, value)}, training at least {_bound(name, self.low[i])}"
        return f"{_words(name, value)}, training {_bound(name, self.low[i])} to {_bound(name, self.high[i])}"

    def extend(self, stats: Sequence[DesignStats]) -> int:
        """Add taught designs' ``stats`` (flat ones skipped) as references; keeps the newest :data:`MAX_TAUGHT`, widens
        ``low`` / ``high``. Returns how many were added."""
        rows = [s for s in stats if not s.flat]
        if rows:
            raw = np.array([astuple(s)[: len(FEATURES)] for s in rows], dtype=np.float64)
            self.low, self.high = np.minimum(self.low, raw.min(axis=0)), np.maximum(self.high, raw.max(axis=0))
            self.taught = np.concatenate([self.taught, np.stack([self._z(s) for s in rows])])[-MAX_TAUGHT:]
        return len(rows)

    def to_dict(self) -> dict[str, Any]:
        """A small JSON-ready dict (numbers rounded to 4 decimals; ``scale_range`` only when recorded); :meth:`from_dict`
        reads it back."""

        def rows(a: np.ndarray) -> list[Any]:
            return np.round(a, 4).tolist()

        out = {
            "version": 1,
            "features": list(FEATURES),
            "centre": rows(self.centre),
            "scale": rows(self.scale),
            "low": rows(self.low),
            "high": rows(self.high),
            "references": rows(self.references),
            "taught": rows(self.taught),
            "threshold": round(float(self.threshold), 4),
            "fitted_on": int(self.fitted_on),
        }
        return out if self.scale_range is None else out | {"scale_range": self.scale_range.to_dict()}

    @classmethod
    def from_dict(cls, data: Any, where: str = "domain") -> DomainModel:
        """Read :meth:`to_dict`'s form; ``ValueError`` starting with ``where`` naming the first bad key."""
        try:
            parsed = _DomainFile.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            key = ".".join(str(p) for p in first["loc"]) or "value"
            raise ValueError(f"{where}: {key}: {first['msg']}") from None
        arrays = {k: np.asarray(getattr(parsed, k), dtype=np.float64) for k in ("centre", "scale", "low", "high", "references")}
        taught = np.asarray(parsed.taught, dtype=np.float64).reshape(-1, len(FEATURES))
        scale_range = ScaleRange.from_dict(parsed.scale_range) if parsed.scale_range is not None else None
        return cls(**arrays, threshold=parsed.threshold, taught=taught, fitted_on=parsed.fitted_on, scale_range=scale_range)


def _farthest_points(z: np.ndarray, count: int) -> np.ndarray:
    """int64 indices of at most ``count`` rows of ``z`` ``[N, F]`` by farthest-point sampling, starting from the row
    nearest the centre (deterministic)."""
    if len(z) <= count:
        return np.arange(len(z))
    chosen = [int(np.argmin(np.linalg.norm(z, axis=1)))]
    nearest = np.linalg.norm(z - z[chosen[0]], axis=1)
    while len(chosen) < count:
        pick = int(np.argmax(nearest))
        chosen.append(pick)
        nearest = np.minimum(nearest, np.linalg.norm(z - z[pick], axis=1))
    return np.array(chosen, dtype=np.int64)
