"""The streaming drift detector: a window of live frames against the calibration baseline and the line reference.

Scoring. Per layer ``l`` and statistic ``s``, with ``m`` the mean of the last ``window`` frames::

    scale = max(base_std, eps, rel_floor * |base_mean|)       # spread of single clean frames
    v     = (m - base_mean) / scale                          # vs the calibration baseline
    u     = (m - line_reference) / scale                     # vs this line's clean level

Over the scored layers (``cfg.layers``) these form vectors, and the frame score is a Mahalanobis
distance with ``R``, the correlation of the statistics over the calibration frames (their covariance
in ``scale`` units, shrunk towards its diagonal by ``cfg.shrinkage``)::

    score = max(sqrt(v' R^-1 v) - baseline_margin, sqrt(u' R^-1 u))

Why a covariance: what is on the board moves every layer statistic together, in directions the
calibration frames already vary in, so ``R^-1`` discounts them; a camera fault changes how the image is
formed and moves the statistics against that pattern, which the same distance magnifies.

The line reference. A camera on a board design the calibration never saw sits at its own level, often
a few single-frame spreads from the calibration mean (``baseline_margin`` allows for that in ``v``).
The line reference is that level: the mean of the first ``cfg.reference`` frames the detector sees
while nothing is wrong, set once and then frozen. Setting it is logged as a ``rebaseline`` event; it
never follows the stream, so a lasting fault never becomes the new normal. Adapting to a legitimate
change (a new board design on the line) is a deliberate act: :meth:`DriftDetector.rebaseline` (also
logged) collects a new one from the next frames, or ``calibrate`` builds a new baseline.

Alerts hold. A drift alert needs ``debounce`` consecutive frames at or above ``z_warn`` (``warning``)
or ``z_alert`` (``critical``; a warning escalates after ``debounce`` critical frames). It stays raised
until ``recover`` consecutive frames score below ``z_clear`` (default ``0.9 * z_warn``), that is until the
window is back within the calibrated spread of the line reference and of the baseline; only then comes
``recovered``. The alert's cause is named from the baseline's simulated faults (``monitor/explain.py``),
read on the last ``window // 2`` frames, which at alert time are all faulty.

The scale is the spread of *single* frames, not the standard error of a window mean: consecutive frames
show the same board design and are strongly correlated, so averaging removes little content variation.
``rel_floor`` keeps a near-constant statistic from turning tiny numeric changes into huge values. By
default only the first backbone layers are scored: camera faults change how the image is formed, which
those layers measure, while deep layers mostly follow what is on the board.
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

from defect_detector.core.config import MonitorConfig
from defect_detector.monitor.baseline import STATISTICS, Baseline, as_frames, utc_now
from defect_detector.monitor.explain import FaultClassifier, describe, hint

logger = logging.getLogger("defect_detector.monitor")

_EPS = 1e-6
_CLEAR = 0.9  # default z_clear as a fraction of z_warn
_FRAMES_PER_STATISTIC = 3  # fewer calibration frames than this per scored statistic: no reliable correlations


@dataclass
class DriftEvent:
    """One alert line (DESIGN.md ``--alerts``).

    ``event`` is ``"drift"``, ``"recovered"`` or ``"rebaseline"`` (the line reference was set or cleared);
    ``frame`` the 0-based frame index of the update that raised it; ``time`` ISO 8601 UTC;
    ``severity`` ``"warning"``, ``"critical"`` or ``"info"``
    (recovered); ``score`` the frame score (Mahalanobis distance, module docstring); ``layers`` the
    scored layers with a statistic at ``|z| >= 1`` (else the one that moved most), highest first;
    ``statistic`` the statistic ("mean"/"std") that moved in most of them;
    ``observed`` / ``baseline`` per listed layer: that statistic's window mean and the normal level
    it is compared with (the stream's own reference once established, else the calibration mean);
    ``z`` per listed layer its z-score; ``reason`` a human-readable explanation; ``cause`` the simulated
    fault the change looks like (``monitor/explain.py``; None when unknown or not a drift event).
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
    cause: str | None = None
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
            "cause": self.cause,
            "observed": {k: float(v) for k, v in self.observed.items()},
            "baseline": {k: float(v) for k, v in self.baseline.items()},
            "z": {k: round(float(v), 3) for k, v in self.z.items()},
        }


class DriftDetector:
    """Streaming drift detection against a :class:`Baseline` and a frozen line reference (module docstring).

    Only the layers matching ``cfg.layers`` (``scored``: indices into ``layer_names``) count.
    ``update(stats, frame_index, source)`` takes float ``[L, 2]`` (one frame) or ``[B, L, 2]`` (B
    consecutive frames starting at ``frame_index``), on any device, and returns the events raised,
    usually none. ``score`` / ``level`` hold the latest frame score and ``"normal"``, ``"warning"`` or
    ``"critical"``; ``state`` the alert state (``"normal"`` or the severity of the active alert).
    """

    def __init__(self, baseline: Baseline, cfg: MonitorConfig | None = None) -> None:
        self.baseline = baseline
        self.cfg = cfg or MonitorConfig()
        self.cfg.validate()
        self.z_clear = self.cfg.z_clear if self.cfg.z_clear is not None else _CLEAR * self.cfg.z_warn
        self.layer_names = list(baseline.layer_names)
        self._scale = baseline.scale(self.cfg.rel_floor)
        self.scored = [i for i, name in enumerate(self.layer_names) if any(fnmatch.fnmatchcase(name, p) for p in self.cfg.layers)]
        if not self.scored:
            logger.warning("monitor.layers %s match none of the baseline's layers; scoring all of them", list(self.cfg.layers))
            self.scored = list(range(len(self.layer_names)))
        self._entries = np.array([2 * i + k for i in self.scored for k in range(len(STATISTICS))])  # into the flattened [2L]
        self._precision = self._precision_matrix()
        self.classifier = FaultClassifier(baseline, self._scale, self._entries, self._precision) if baseline.faults else None
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
        shrunk += np.eye(len(shrunk)) * 1e-6  # a statistic that never moved during calibration: keep R invertible
        return np.linalg.pinv(shrunk, hermitian=True)

    def _distance(self, deviation: np.ndarray) -> float:
        """Mahalanobis length of a ``[L, 2]`` deviation in ``scale`` units, over the scored entries."""
        x = deviation.reshape(-1)[self._entries]
        return float(math.sqrt(max(float(x @ self._precision @ x), 0.0)))

    def reset(self) -> None:
        """Forget the window, the line reference and any active alert (a new stream)."""
        self._window: deque[np.ndarray] = deque()
        self._window_sum = np.zeros_like(self._scale)
        self.line_reference: np.ndarray | None = None
        self._collected: list[np.ndarray] = []
        self._pending: list[DriftEvent] = []
        self.state = "normal"
        self.score = 0.0
        self.level = "normal"
        self._above = self._critical = self._below = 0

    def rebaseline(self, frame_index: int, source: str = "", reason: str = "requested") -> DriftEvent:
        """Drop the line reference (and any active alert) and collect a new one from the next ``cfg.reference``
        clean frames: the deliberate way to accept a new normal, e.g. a new board design. Returns the logged event."""
        self.line_reference, self._collected = None, []
        self.state, self._above, self._critical, self._below = "normal", 0, 0, 0
        reason = f"line reference cleared ({reason}); a new one is collected from the next frames"
        return self._rebaseline_event(frame_index, source, reason)

    def update(self, stats: torch.Tensor | np.ndarray, frame_index: int, source: str = "") -> list[DriftEvent]:
        """Add one frame (``[L, 2]``) or consecutive frames (``[B, L, 2]``); returns the events raised."""
        frames = as_frames(stats, len(self.layer_names))
        events: list[DriftEvent] = []
        for offset, frame in enumerate(frames):
            event = self._step(frame, frame_index + offset, source)
            events += self._pending + ([event] if event is not None else [])
            self._pending = []
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
            self._window_sum -= self._window.popleft()
        if len(self._window) < self.cfg.window:
            return None
        window_mean = self._window_sum / len(self._window)
        score = self._distance((window_mean - self.baseline.mean) / self._scale) - self.cfg.baseline_margin
        if self.line_reference is not None:
            score = max(score, self._distance((window_mean - self.line_reference) / self._scale))
        self.score = max(score, 0.0)
        self.level = "critical" if self.score >= self.cfg.z_alert else "warning" if self.score >= self.cfg.z_warn else "normal"
        self._collect(frame, frame_index, source)
        return self._transition(frame_index, source, window_mean)

    def _collect(self, frame: np.ndarray, frame_index: int, source: str) -> None:
        """Gather clean frames for the line reference until it is set; an alert or a warning level starts it over."""
        if self.line_reference is not None or self.cfg.reference == 0:
            return
        if self.state != "normal" or self.level != "normal":
            self._collected = []
            return
        self._collected.append(frame)
        if len(self._collected) == self.cfg.reference:
            self.line_reference = np.mean(self._collected, axis=0)
            first = frame_index - self.cfg.reference + 1
            self._pending.append(self._rebaseline_event(frame_index, source, f"line reference set from frames {first}-{frame_index}"))
            self._collected = []

    def _rebaseline_event(self, frame_index: int, source: str, reason: str) -> DriftEvent:
        logger.info("drift monitor: %s", reason)
        return DriftEvent(event="rebaseline", frame=frame_index, source=source, severity="info", score=self.score, layers=[], reason=reason)

    def _transition(self, frame_index: int, source: str, window_mean: np.ndarray) -> DriftEvent | None:
        level = self.level
        if self.state == "normal":
            self._above = self._above + 1 if level != "normal" else 0
            self._critical = self._critical + 1 if level == "critical" else 0
            if self._above >= self.cfg.debounce:
                severity = "critical" if self._critical >= self.cfg.debounce else "warning"
                return self._raise(severity, frame_index, source, window_mean)
            return None
        self._critical = self._critical + 1 if level == "critical" else 0
        self._below = self._below + 1 if self.score < self.z_clear else 0
        if self._below >= self.cfg.recover:
            self.state, self._above, self._critical, self._below = "normal", 0, 0, 0
            return DriftEvent(
                event="recovered",
                frame=frame_index,
                source=source,
                severity="info",
                score=self.score,
                layers=[],
                reason=f"layer statistics back within z_clear={self.z_clear:g} of the clean level for {self.cfg.recover} frames",
            )
        if self.state == "warning" and self._critical >= self.cfg.debounce:
            return self._raise("critical", frame_index, source, window_mean)
        return None

    def _raise(self, severity: str, frame_index: int, source: str, window_mean: np.ndarray) -> DriftEvent:
        """The alert event, explained on the last ``window // 2`` frames against the level they are compared with."""
        self.state = severity
        self._below = 0
        level_ref = self.line_reference if self.line_reference is not None else self.baseline.mean
        recent = np.mean(list(self._window)[-max(1, self.cfg.window // 2) :], axis=0)
        z = (recent - level_ref) / self._scale
        change = (recent - level_ref) / np.maximum(np.abs(level_ref), _EPS)
        cause = self.classifier.classify(z) if self.classifier is not None else None
        statistic, members, moved = describe(z, change, self.scored)
        order = sorted(self.scored, key=lambda i: -float(np.abs(z[i]).max()))
        return DriftEvent(
            event="drift",
            frame=frame_index,
            source=source,
            severity=severity,
            score=self.score,
            layers=[self.layer_names[i] for i in order if np.abs(z[i]).max() >= 1.0] or [self.layer_names[order[0]]],
            reason=moved + (f": {hint(cause)}" if self.classifier is not None else ""),
            statistic=STATISTICS[statistic],
            observed={self.layer_names[i]: float(recent[i, statistic]) for i in members},
            baseline={self.layer_names[i]: float(level_ref[i, statistic]) for i in members},
            z={self.layer_names[i]: float(z[i, statistic]) for i in members},
            cause=cause,
        )
