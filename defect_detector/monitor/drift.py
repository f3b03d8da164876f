"""Drift baseline (calibration) and the streaming drift detector.

A :class:`Baseline` describes, for every monitored layer and statistic (``mean``, ``std``: see
``monitor/hooks.py``), how that per-frame value is distributed over clean reference frames.
:class:`DriftDetector` compares a sliding window of live frames against it and emits
:class:`DriftEvent` objects (the ``--alerts`` lines of DESIGN.md).

Scoring. Per layer ``l`` and statistic ``s``, with ``m`` the mean of the last ``window`` frames::

    scale = max(base_std, eps, rel_floor * |base_mean|)       # spread of single clean frames
    u     = (m - reference) / scale                          # vs this stream's own normal level
    v     = (m - base_mean) / scale                          # vs the calibration baseline

Over the scored layers (``cfg.layers``) these form vectors, and the frame score is a Mahalanobis
distance with ``R``, the correlation of the statistics over the calibration frames (their
covariance in ``scale`` units, shrunk towards its diagonal by ``cfg.shrinkage``)::

    score = max(sqrt(u' R^-1 u), sqrt(v' R^-1 v) - baseline_margin)

Why a covariance: what is on the board (how much copper, how dense the tracks) moves every layer
statistic together, in the directions the calibration frames already vary in, so ``R^-1`` discounts
them; a camera fault changes how the image is formed and moves the statistics against that pattern
(contrast falls while the mean holds, the stem loses edges while deeper layers do not), which the
same distance magnifies. Judged one statistic at a time, a defocused lens moved no statistic of the
bundled model by more than a board change does; together they separate. A baseline with fewer than
3 frames per scored statistic cannot estimate the correlations: they are ignored (``R`` diagonal).

``reference`` is the mean of the last ``cfg.reference`` frames that left the window while the
detector saw no drift: a camera on a board design the calibration never saw sits at its own level,
often one or two single-frame standard deviations away from the calibration mean, while a camera
fault is a change relative to the frames just before it. ``u`` is therefore the sensitive test;
``v`` (with a margin for new designs) is the backstop for a camera that is already faulty when the
stream starts, before the reference exists, or that drifts so slowly that the reference follows it.

The scale is the spread of *single* frames, not the standard error of a window mean
(``base_std / sqrt(window)``): consecutive frames show the same board design and are strongly
correlated, so averaging them removes little of the content variation, and the standard error
would raise false alarms on every board change. ``rel_floor`` keeps a statistic that barely moved
during calibration (a near-constant layer) from turning tiny numeric changes into huge values.

By default only the first backbone layers are scored: camera faults change how the image is formed
(brightness, contrast, sharpness, noise), which those layers measure, while deep layers mostly
follow what is on the board. Per-statistic z-scores (``u`` or ``v`` less the margin, whichever is
larger) name the layers and statistic in an alert's reason.

A drift alert needs ``debounce`` consecutive frames at or above ``z_warn`` (severity ``warning``)
or ``z_alert`` (``critical``; a warning escalates after ``debounce`` critical frames); a
``recovered`` event follows ``recover`` consecutive frames below ``z_warn``.
"""

from __future__ import annotations

import fnmatch
import logging
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from defect_detector.config import MonitorConfig
from defect_detector.monitor.baseline import STATISTICS, Baseline, as_frames, utc_now

logger = logging.getLogger("defect_detector.monitor")

_EPS = 1e-6
_FRAMES_PER_STATISTIC = 3  # fewer calibration frames than this per scored statistic: no reliable correlations
_EXPLAIN_Z = 1.0  # per-statistic |z| from which a layer is named in an alert


@dataclass
class DriftEvent:
    """One alert line (DESIGN.md ``--alerts``).

    ``event`` is ``"drift"`` or ``"recovered"``; ``frame`` the 0-based frame index of the update
    that raised it; ``time`` ISO 8601 UTC; ``severity`` ``"warning"``, ``"critical"`` or ``"info"``
    (recovered); ``score`` the frame score (Mahalanobis distance, module docstring); ``layers`` the
    scored layers with a statistic at ``|z| >= 1`` (else the one that moved most), highest first;
    ``statistic`` the statistic ("mean"/"std") that moved in most of them;
    ``observed`` / ``baseline`` per listed layer: that statistic's window mean and the normal level
    it is compared with (the stream's own reference once established, else the calibration mean);
    ``z`` per listed layer its z-score; ``reason`` a human-readable explanation.
    """

    event: str
    frame: int
    source: str
    severity: str
    score: float
    layers: list[str]
    reason: str
    statistic: str | None = None
    observed: dict[str, float] = field(default_factory=dict)
    baseline: dict[str, float] = field(default_factory=dict)
    z: dict[str, float] = field(default_factory=dict)
    time: str = field(default_factory=utc_now)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object written per line: DESIGN.md's keys first, then the details."""
        return {
            "event": self.event,
            "frame": self.frame,
            "source": self.source,
            "time": self.time,
            "severity": self.severity,
            "score": round(float(self.score), 3),
            "layers": list(self.layers),
            "reason": self.reason,
            "statistic": self.statistic,
            "observed": {k: float(v) for k, v in self.observed.items()},
            "baseline": {k: float(v) for k, v in self.baseline.items()},
            "z": {k: round(float(v), 3) for k, v in self.z.items()},
        }


_MEAN, _STD = 0, 1
_LIGHT = "lighting or exposure changed?"
"""The hint when the mean moved and the std moved the same way or not at all. It names no direction:
whether a layer's mean activation rises or falls when the image darkens depends on the weights (under a
lighting drop, v0.5's rose while v0.4's and v0.6's fell); the reason's first part states the measured direction."""


class DriftDetector:
    """Streaming drift detection against a :class:`Baseline` (algorithm: module docstring).

    Only the layers matching ``cfg.layers`` (``scored``: indices into ``layer_names``) count.
    ``update(stats, frame_index, source)`` takes float ``[L, 2]`` (one frame) or ``[B, L, 2]``
    (B consecutive frames starting at ``frame_index``), on any device: it is copied to the host
    once per call. It returns the events raised, usually none. ``score`` / ``level`` hold the
    latest frame score and ``"normal"``, ``"warning"`` or ``"critical"``; ``state`` the alert
    state (``"normal"`` or the severity of the active alert).
    """

    def __init__(self, baseline: Baseline, cfg: MonitorConfig | None = None) -> None:
        self.baseline = baseline
        self.cfg = cfg or MonitorConfig()
        self.cfg.validate()
        self.layer_names = list(baseline.layer_names)
        self._scale = baseline.scale(self.cfg.rel_floor)
        self.scored = [i for i, name in enumerate(self.layer_names) if any(fnmatch.fnmatchcase(name, p) for p in self.cfg.layers)]
        if not self.scored:
            logger.warning("monitor.layers %s match none of the baseline's layers; scoring all of them", list(self.cfg.layers))
            self.scored = list(range(len(self.layer_names)))
        self._entries = np.array([2 * i + k for i in self.scored for k in range(len(STATISTICS))])  # into the flattened [2L]
        self._precision = self._precision_matrix()
        self.nonfinite_frames = 0
        self.reset()

    def _precision_matrix(self) -> np.ndarray:
        """``R^-1`` over the scored entries: the calibration covariance in ``scale`` units, shrunk towards its diagonal."""
        scale = self._scale.reshape(-1)[self._entries]
        covariance = self.baseline.covariance[np.ix_(self._entries, self._entries)] / np.outer(scale, scale)
        shrinkage = self.cfg.shrinkage
        if self.baseline.count < _FRAMES_PER_STATISTIC * len(self._entries):
            logger.warning(
                "baseline has %d frames for %d scored statistics: their correlations are ignored; calibrate on >= %d frames",
                self.baseline.count,
                len(self._entries),
                _FRAMES_PER_STATISTIC * len(self._entries),
            )
            shrinkage = 1.0
        shrunk = (1.0 - shrinkage) * covariance + shrinkage * np.diag(np.diag(covariance))
        # A statistic that never moved during calibration has zero variance: keep R invertible.
        shrunk += np.eye(len(shrunk)) * 1e-6
        return np.linalg.pinv(shrunk, hermitian=True)

    def _distance(self, deviation: np.ndarray) -> float:
        """Mahalanobis length of a ``[L, 2]`` deviation in ``scale`` units, over the scored entries."""
        x = deviation.reshape(-1)[self._entries]
        return float(math.sqrt(max(float(x @ self._precision @ x), 0.0)))

    def reset(self) -> None:
        """Forget the window, the stream reference and any active alert (e.g. after a product change)."""
        self._window: deque[np.ndarray] = deque()
        self._window_sum = np.zeros_like(self._scale)
        self._reference: deque[np.ndarray] = deque()
        self._reference_sum = np.zeros_like(self._scale)
        self.state = "normal"
        self.score = 0.0
        self.level = "normal"
        self._above = 0
        self._critical = 0
        self._below = 0

    @property
    def reference(self) -> np.ndarray | None:
        """float64 ``[L, 2]``: the stream's own normal level, or None until ``cfg.reference`` frames are in."""
        if self.cfg.reference == 0 or len(self._reference) < self.cfg.reference:
            return None
        return self._reference_sum / len(self._reference)

    def update(self, stats: torch.Tensor | np.ndarray, frame_index: int, source: str = "") -> list[DriftEvent]:
        """Add one frame (``[L, 2]``) or consecutive frames (``[B, L, 2]``); returns the events raised."""
        frames = as_frames(stats, len(self.layer_names))
        events: list[DriftEvent] = []
        for offset, frame in enumerate(frames):
            event = self._step(frame, frame_index + offset, source)
            if event is not None:
                events.append(event)
        return events

    def _step(self, frame: np.ndarray, frame_index: int, source: str) -> DriftEvent | None:
        if not np.isfinite(frame).all():
            self.nonfinite_frames += 1
            if self.nonfinite_frames == 1:
                logger.warning("frame %d: non-finite layer statistics; such frames are left out of drift detection", frame_index)
            return None
        self._window.append(frame)
        self._window_sum += frame
        if len(self._window) > self.cfg.window:
            self._retire(self._window.popleft())
        if len(self._window) < self.cfg.window:
            return None
        window_mean = self._window_sum / len(self._window)
        reference = self.reference
        score = self._distance((window_mean - self.baseline.mean) / self._scale) - self.cfg.baseline_margin
        if reference is not None:
            score = max(score, self._distance((window_mean - reference) / self._scale))
        self.score = max(score, 0.0)
        self.level = "critical" if self.score >= self.cfg.z_alert else "warning" if self.score >= self.cfg.z_warn else "normal"
        return self._transition(frame_index, source, window_mean, reference)

    def _retire(self, frame: np.ndarray) -> None:
        """A frame leaving the window joins the stream reference while nothing looks wrong."""
        self._window_sum -= frame
        if self.cfg.reference == 0 or self.state != "normal" or self.level != "normal":
            return
        self._reference.append(frame)
        self._reference_sum += frame
        if len(self._reference) > self.cfg.reference:
            self._reference_sum -= self._reference.popleft()

    def _z(self, window_mean: np.ndarray, reference: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Per-statistic signed z ``[L, 2]`` (for the alert's reason) and, per entry, the level it was measured against."""
        z_base = (window_mean - self.baseline.mean) / self._scale
        effective = np.sign(z_base) * np.maximum(np.abs(z_base) - self.cfg.baseline_margin, 0.0)
        level_ref = self.baseline.mean.copy()
        if reference is not None:
            z_change = (window_mean - reference) / self._scale
            use_change = np.abs(z_change) >= np.abs(effective)
            effective = np.where(use_change, z_change, effective)
            level_ref = np.where(use_change, reference, level_ref)
        return effective, level_ref

    def _transition(self, frame_index: int, source: str, window_mean: np.ndarray, reference: np.ndarray | None) -> DriftEvent | None:
        level = self.level
        if self.state == "normal":
            self._above = self._above + 1 if level != "normal" else 0
            self._critical = self._critical + 1 if level == "critical" else 0
            if self._above >= self.cfg.debounce:
                severity = "critical" if self._critical >= self.cfg.debounce else "warning"
                return self._raise(severity, frame_index, source, window_mean, reference)
            return None
        if level == "normal":
            self._below += 1
            if self._below >= self.cfg.recover:
                self.state, self._above, self._critical, self._below = "normal", 0, 0, 0
                return DriftEvent(
                    event="recovered",
                    frame=frame_index,
                    source=source,
                    severity="info",
                    score=self.score,
                    layers=[],
                    reason=f"layer statistics back within z_warn={self.cfg.z_warn:g} for {self.cfg.recover} frames",
                )
            return None
        self._below = 0
        self._critical = self._critical + 1 if level == "critical" else 0
        if self.state == "warning" and self._critical >= self.cfg.debounce:
            return self._raise("critical", frame_index, source, window_mean, reference)
        return None

    def _raise(self, severity: str, frame_index: int, source: str, window_mean: np.ndarray, reference: np.ndarray | None) -> DriftEvent:
        """The alert event; its per-statistic z-scores (only needed to explain it) are computed here."""
        self.state = severity
        self._below = 0
        z, level_ref = self._z(window_mean, reference)
        layer_scores = np.zeros(len(self.layer_names))
        layer_scores[self.scored] = np.abs(z[self.scored]).max(axis=1)
        flagged = [int(i) for i in np.argsort(-layer_scores, kind="stable") if layer_scores[i] >= _EXPLAIN_Z]
        if not flagged:
            flagged = [int(np.argmax(layer_scores))]
        change = (window_mean - level_ref) / np.maximum(np.abs(level_ref), _EPS)
        statistic, members, reason = _explain(z, change, flagged, _EXPLAIN_Z)
        names = [self.layer_names[i] for i in flagged]
        observed = {self.layer_names[i]: float(window_mean[i, statistic]) for i in members}
        normal = {self.layer_names[i]: float(level_ref[i, statistic]) for i in members}
        return DriftEvent(
            event="drift",
            frame=frame_index,
            source=source,
            severity=severity,
            score=self.score,
            layers=names,
            reason=reason,
            statistic=STATISTICS[statistic],
            observed=observed,
            baseline=normal,
            z={self.layer_names[i]: float(z[i, statistic]) for i in members},
        )


def _direction(z: np.ndarray, flagged: list[int], statistic: int, threshold: float) -> tuple[int, list[int]]:
    """Majority direction (+1 rose, -1 fell, 0 none) of ``statistic`` among ``flagged`` layers beyond ``threshold``, and those layers."""
    up = [i for i in flagged if z[i, statistic] >= threshold]
    down = [i for i in flagged if z[i, statistic] <= -threshold]
    if not up and not down:
        return 0, []
    return (1, up) if len(up) > len(down) else (-1, down)


def _median_abs(z: np.ndarray, layers: list[int], statistic: int) -> float:
    return float(np.median(np.abs(z[layers, statistic])))


def _explain(z: np.ndarray, change: np.ndarray, flagged: list[int], threshold: float) -> tuple[int, list[int], str]:
    """(statistic index, its layers, human-readable reason) for the change seen in the ``flagged`` layers.

    ``change`` is the relative change ``[L, 2]`` against the level compared with. A statistic counts
    in the layers where ``|z| >= threshold`` (else the one that moved most). The mean moving, with the
    std moving the same way or not at all, points at the light; std alone falling at focus / the lens;
    std rising alone, or more than the mean, at noise.
    """
    mean_dir, mean_layers = _direction(z, flagged, _MEAN, threshold)
    std_dir, std_layers = _direction(z, flagged, _STD, threshold)
    if not mean_layers and not std_layers:
        i = flagged[0]
        statistic = _STD if abs(z[i, _STD]) >= abs(z[i, _MEAN]) else _MEAN
        mean_dir, std_dir = (0, int(np.sign(z[i, _STD]))) if statistic == _STD else (int(np.sign(z[i, _MEAN])), 0)
        mean_layers, std_layers = ([], [i]) if statistic == _STD else ([i], [])
    if mean_dir != 0 and std_dir in (0, mean_dir):
        hint = _LIGHT
    else:
        hint = "lens dirty or out of focus?" if std_dir < 0 else "sensor noise or interference?"
    if (mean_dir, std_dir) == (1, 1) and _median_abs(z, std_layers, _STD) > _median_abs(z, mean_layers, _MEAN):
        hint = "sensor noise or interference?"  # both rose, the spread more than the level: noise rather than light

    def phrase(what: str, direction: int, layers: list[int], statistic: int) -> str:
        percent = 100.0 * float(np.median([abs(change[i, statistic]) for i in layers]))
        verb, where = ("rose", "above") if direction > 0 else ("fell", "below")
        return f"{what} {verb} {percent:.0f}% {where} baseline in {len(layers)} layers"

    parts = []
    if mean_layers:
        parts.append(phrase("mean activation", mean_dir, mean_layers, _MEAN))
    if std_layers:
        parts.append(phrase("activation contrast (std)", std_dir, std_layers, _STD))
    if mean_dir != std_dir:
        parts.reverse()
    statistic, members = (_STD, std_layers) if len(std_layers) >= len(mean_layers) else (_MEAN, mean_layers)
    return statistic, members, " and ".join(parts) + f": {hint}"
