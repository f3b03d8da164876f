"""The streaming drift detector: a window of live frames against the calibration baseline and the line reference.

What is scored. Per frame, the layer statistics ``x`` ``[L, 2]`` (mean, std of each monitored layer). With a
golden-template baseline (``Baseline.relative``) each frame comes with its golden image's statistics ``g`` (the
golden image paired with itself through the same pipeline) and the detector scores ``x - g``: two frames of one
design under one camera give nearly the same statistics, so the design cancels out and what is left is what the
camera changed. A change of golden image is a ``changeover`` event, never an alarm, and changes nothing else: the
line reference (below) is kept, not learned again from the new design's frames. Where a design does not cancel out
(a real photographed design, read against a baseline calibrated on renders), ``teach --good`` learns its own level
from its good boards (``monitor/design_drift.py``), and its frames are read against that level (``Golden.own``)
instead of the calibration's mean.

Scoring. Per layer ``l`` and statistic ``s``, with ``m`` the mean of the scored quantity over the last ``window`` frames::

    scale = max(base_std, eps, rel_floor * |level|)          # spread of single clean frames
    v     = (m - base_mean) / scale                          # vs the calibration baseline
    u     = (m - line_reference) / scale                     # vs this line's clean level

Over the scored layers (``cfg.layers``) these form vectors, and the frame score is a Mahalanobis
distance with ``R``, the correlation of the statistics over the calibration frames (their covariance
in ``scale`` units, shrunk towards its diagonal by ``cfg.shrinkage``, a relative baseline's eigenvalues floored at
``EIGEN_FLOOR``)::

    score = max(sqrt(v' R^-1 v) - baseline_margin, sqrt(u' R^-1 u))

Why a covariance: what is on the board moves every layer statistic together, in directions the
calibration frames already vary in, so ``R^-1`` discounts them; a camera fault changes how the image is
formed and moves the statistics against that pattern, which the same distance magnifies.

The line reference. A camera sits at its own level, often a few single-frame spreads from the calibration
mean (``baseline_margin`` allows for that in ``v``). The line reference is that level: the mean of the first
``cfg.reference`` frames the detector sees while nothing is wrong, set once and then frozen (a ``rebaseline``
event). It never follows the stream, so a lasting fault never becomes the new normal; :meth:`DriftDetector.rebaseline`
(also logged) collects a new one deliberately.

States. ``warming_up`` until ``window`` frames have been seen (nothing to judge yet), then ``normal``,
``warning`` or ``critical``. A drift alert needs ``debounce`` consecutive frames at or above ``z_warn``
(``warning``) or ``z_alert`` (``critical``; a warning escalates after ``debounce`` critical frames). It stays raised
until ``recover`` consecutive frames score below ``z_clear`` (default ``0.9 * z_warn``); only then comes
``recovered``. A blank frame (:meth:`DriftDetector.blank`, ``screens/blank.py``) raises a critical alert at once,
whatever the statistics say. An alert names its likely cause (``monitor/explain.py``), says what the image shows
and what to do, and carries ``since``, the first frame flagged (the first of the run of frames scored at or above
``z_warn`` that led to the alert; :attr:`DriftDetector.flag` marks every frame from there on); its words also name
the change point within the window, where the fault began, when that is earlier.

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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from defect_detector.core.config import MonitorConfig
from defect_detector.monitor.baseline import STATISTICS, Baseline, as_frames
from defect_detector.monitor.events import DriftEvent
from defect_detector.monitor.explain import FaultClassifier, alert_text, blank_text, describe, image_fact, refine_cause
from defect_detector.monitor.golden import Golden, changeover_reason

logger = logging.getLogger("defect_detector.monitor")

__all__ = ["EIGEN_FLOOR", "WARMING_UP", "DriftDetector", "DriftEvent"]

_EPS = 1e-6
_CLEAR = 0.5  # default z_clear as a fraction of z_warn
_MARGIN = 2.0  # default baseline_margin of a single-image baseline (a golden-template one: 0)
_MIN_EXPLAINED = 2  # frames since the onset that an alert is explained on, at least
_FRAMES_PER_STATISTIC = 3  # fewer calibration frames than this per scored statistic: no reliable correlations
WARMING_UP = "warming_up"
EIGEN_FLOOR = 0.15
"""Smallest eigenvalue of ``R`` kept (``scale`` units squared) for a relative (golden-template) baseline: no direction
of the statistics counts more than ``1 / sqrt(0.15)`` = 2.6 times its single-frame spread. Clean calibration frames
of one look tie some relative statistics together almost exactly (DeepPCB's binarized scans: the smallest eigenvalue
is 0.008, a x11 gain); a board design or look the calibration never saw loosens such a tie by a fraction of a spread,
which that gain turned into an alert. Chosen on runs of designs left out of calibration (``benchmarks/drift_unseen.py``):
every simulated fault is still caught on them, mild defocus included. A single-image baseline keeps its small
eigenvalues: there the board design moves the statistics along the large ones, and a camera fault shows in the small
ones."""


@dataclass
class _Seen:
    """One frame in the window: its index, scored quantity ``[L, 2]``, gray levels and its golden image's (or None)."""

    frame: int
    value: np.ndarray
    levels: np.ndarray | None
    golden_levels: np.ndarray | None


class DriftDetector:
    """Streaming drift detection against a :class:`Baseline` and a frozen line reference (module docstring).

    Only the layers matching ``cfg.layers`` (``scored``: indices into ``layer_names``) count.
    ``update(stats, frame_index, source, golden, levels)`` takes float ``[L, 2]`` (one frame) or ``[B, L, 2]``
    (B consecutive frames starting at ``frame_index``), on any device, with a relative baseline the frames'
    :class:`Golden` (one, or one per frame), and optionally their gray ``levels`` (``[4]`` or ``[B, 4]``,
    ``screens/blank.py``); it returns the events raised, usually none. ``score`` / ``level`` hold the latest frame
    score and ``"warming_up"``, ``"normal"``, ``"warning"`` or ``"critical"``; ``state`` the alert state
    (``"warming_up"``, ``"normal"`` or the severity of the active alert).
    """

    def __init__(self, baseline: Baseline, cfg: MonitorConfig | None = None) -> None:
        self.baseline = baseline
        self.relative = baseline.relative
        self.cfg = cfg or MonitorConfig()
        self.z_clear = self.cfg.z_clear if self.cfg.z_clear is not None else _CLEAR * self.cfg.z_warn
        margin = self.cfg.baseline_margin
        self.baseline_margin = margin if margin is not None else 0.0 if self.relative else _MARGIN
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
        self._unfit: set[str] = set()  # designs whose own level was learnt with another baseline (logged once)
        self.reset()

    def _precision_matrix(self) -> np.ndarray:
        """``R^-1`` over the scored entries: the calibration covariance in ``scale`` units, shrunk towards its diagonal;
        a relative baseline's eigenvalues floored at :data:`EIGEN_FLOOR`."""
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
        values, vectors = np.linalg.eigh((shrunk + shrunk.T) / 2)
        values = values + 1e-6  # a statistic that never moved during calibration: keep R invertible
        if self.relative:
            values = np.maximum(values, EIGEN_FLOOR)
        return (vectors / values) @ vectors.T

    def _distance(self, deviation: np.ndarray) -> float:
        """Mahalanobis length of a ``[L, 2]`` deviation in ``scale`` units, over the scored entries."""
        x = deviation.reshape(-1)[self._entries]
        return float(math.sqrt(max(float(x @ self._precision @ x), 0.0)))

    def reset(self) -> None:
        """Forget the window, the line reference, the golden image and any active alert (a new stream)."""
        self._window: deque[_Seen] = deque()
        self._window_sum = np.zeros_like(self._scale)
        self.line_reference: np.ndarray | None = None
        self.golden: str | None = None  # the key (pixel fingerprint) of the latest golden image
        self.golden_name = ""  # what the latest golden image is called (its file name)
        self._collected: list[np.ndarray] = []
        self._pending: list[DriftEvent] = []
        self.state = WARMING_UP
        self.score = 0.0
        self.level = WARMING_UP
        self._above = self._critical = self._below = 0
        self._run_start: int | None = None  # oldest window frame when the scores last rose from normal
        self._since: int | None = None
        self._flagged: int | None = None  # first frame of the current run of frames scored at or above z_warn
        self._began = 0  # the active alert's change point (``_onset``): its explanation is read from there
        self._blank = False

    @property
    def flag(self) -> str:
        """The drift field of the latest frame (the JSON record's ``drift``): the alert state, or, while no alert is
        raised yet, ``warning`` / ``critical`` for a frame scored at or above ``z_warn`` / ``z_alert``. So every frame
        from an alert's ``since`` on reads ``warning`` or ``critical``."""
        if self.state == "normal" and self.level in ("warning", "critical"):
            return self.level
        return self.state

    def rebaseline(self, frame_index: int, source: str = "", reason: str = "requested") -> DriftEvent:
        """Drop the line reference (and any active alert) and collect a new one from the next ``cfg.reference``
        clean frames: the deliberate way to accept a new normal. Returns the logged event."""
        self.line_reference, self._collected = None, []
        self.state = "normal" if len(self._window) >= self.cfg.window else WARMING_UP
        self._above, self._critical, self._below = 0, 0, 0
        self._blank, self._since = False, None
        reason = f"line reference cleared ({reason}); a new one is collected from the next frames"
        logger.info("drift monitor: %s", reason)
        return self._info("rebaseline", frame_index, source, reason)

    def update(
        self,
        stats: torch.Tensor | np.ndarray,
        frame_index: int,
        source: str = "",
        golden: Golden | Sequence[Golden] | None = None,
        levels: np.ndarray | None = None,
    ) -> list[DriftEvent]:
        """Add one frame (``[L, 2]``) or consecutive frames (``[B, L, 2]``); returns the events raised.

        ``golden``: each frame's golden image (one for all, or one per frame); needed with a relative baseline, and
        a change of its ``key`` logs a ``changeover``. ``levels``: the frames' gray levels (``[4]`` / ``[B, 4]``)."""
        frames = as_frames(stats, len(self.layer_names))
        goldens = self._goldens(golden, len(frames))
        rows = None if levels is None else np.asarray(levels, np.float64).reshape(len(frames), -1)
        events: list[DriftEvent] = []
        for offset, frame in enumerate(frames):
            index = frame_index + offset
            ref = goldens[offset]
            if ref is not None and ref.key != self.golden:
                if self.golden is not None:
                    events.append(self._changeover(index, source, ref.label))
                self.golden = ref.key
            if ref is not None:
                self.golden_name = ref.label
            value = self.baseline.scored(frame, ref.stats if ref is not None else None)
            expected = self._expected(ref)
            if expected is not None:
                value = value - expected + self.baseline.mean  # read against the design's own level
            event = self._step(_Seen(index, value, rows[offset] if rows is not None else None, ref.levels if ref else None), source)
            events += self._pending + ([event] if event is not None else [])
            self._pending = []
        return events

    def _expected(self, ref: Golden | None) -> np.ndarray | None:
        """The design's own level of ``ref`` (``monitor/design_drift.py``) when it was read with this baseline; a level
        read with another is logged once per design and not used."""
        if ref is None or ref.own is None:
            return None
        expected = ref.own.expected(self.baseline)
        if expected is None and ref.key not in self._unfit:
            self._unfit.add(ref.key)
            words = "own level was learnt with another baseline; its frames are read against the calibration's"
            logger.warning("drift monitor: %s's %s", ref.label, words)
        return expected

    def _goldens(self, golden: Golden | Sequence[Golden] | None, count: int) -> list[Golden | None]:
        if golden is None:
            if self.relative:
                raise ValueError("this baseline reads each frame against its golden image: pass the frame's Golden statistics")
            return [None] * count
        goldens = [golden] * count if isinstance(golden, Golden) else list(golden)
        if len(goldens) != count:
            raise ValueError(f"got {len(goldens)} golden images for {count} frames")
        for g in goldens:
            if np.shape(g.stats) != (len(self.layer_names), len(STATISTICS)):
                raise ValueError(f"golden statistics must have shape [{len(self.layer_names)}, 2], got {list(np.shape(g.stats))}")
        return goldens

    def blank(self, frame_index: int, source: str = "", reason: str = "blank frame") -> list[DriftEvent]:
        """A frame with nothing to inspect (``screens/blank.py``: black, dim, white, flat): a critical drift alert at
        once, unless one for blank frames is already raised. The frame is not scored; after it, ``recover`` clean
        scored frames are needed for ``recovered``."""
        self._below = 0
        self.level = "critical"
        if self.state == "critical" and self._blank:
            return []
        self.state, self._blank, self._since = "critical", True, frame_index
        return [
            DriftEvent(
                event="drift",
                frame=frame_index,
                source=source,
                severity="critical",
                score=self.score,
                layers=[],
                reason=blank_text(reason, frame_index),
                cause="blank",
                since=frame_index,
            )
        ]

    def _step(self, seen: _Seen, source: str) -> DriftEvent | None:
        if not np.isfinite(seen.value).all():
            self.nonfinite_frames += 1
            if self.nonfinite_frames == 1:
                logger.warning("frame %d: non-finite layer statistics; such frames are left out of drift detection", seen.frame)
            return None
        self._window.append(seen)
        self._window_sum += seen.value
        if len(self._window) > self.cfg.window:
            self._window_sum -= self._window.popleft().value
        if len(self._window) < self.cfg.window:
            return None
        window_mean = self._window_sum / len(self._window)
        score = self._distance((window_mean - self.baseline.mean) / self._scale) - self.baseline_margin
        if self.line_reference is not None:
            score = max(score, self._distance((window_mean - self.line_reference) / self._scale))
        self.score = max(score, 0.0)
        self.level = "critical" if self.score >= self.cfg.z_alert else "warning" if self.score >= self.cfg.z_warn else "normal"
        if self.level == "normal":
            self._flagged = None
        elif self._flagged is None:
            self._flagged = seen.frame
        if self.state == WARMING_UP:
            self.state = "normal"
        if self.score < self.z_clear:
            self._run_start = None
        elif self._run_start is None:
            self._run_start = self._window[0].frame
        self._collect(seen, source)
        return self._transition(seen.frame, source)

    def _collect(self, seen: _Seen, source: str) -> None:
        """Gather clean frames for the line reference until it is set; an alert or a warning level starts it over."""
        if self.line_reference is not None or self.cfg.reference == 0:
            return
        if self.state != "normal" or self.level != "normal":
            self._collected = []
            return
        self._collected.append(seen.value)
        if len(self._collected) == self.cfg.reference:
            self.line_reference = np.mean(self._collected, axis=0)
            reason = f"line reference set from frames {seen.frame - self.cfg.reference + 1}-{seen.frame}"
            logger.info("drift monitor: %s", reason)
            self._pending.append(self._info("rebaseline", seen.frame, source, reason))
            self._collected = []

    def _info(self, event: str, frame_index: int, source: str, reason: str, **extra: Any) -> DriftEvent:
        return DriftEvent(
            event=event, frame=frame_index, source=source, severity="info", score=self.score, layers=[], reason=reason, **extra
        )

    def _changeover(self, frame_index: int, source: str, name: str) -> DriftEvent:
        reason = changeover_reason(name, self.golden_name)
        return self._info("changeover", frame_index, source, reason, reference=name, previous=self.golden_name)

    def _transition(self, frame_index: int, source: str) -> DriftEvent | None:
        level = self.level
        if self.state == "normal":
            self._above = self._above + 1 if level != "normal" else 0
            self._critical = self._critical + 1 if level == "critical" else 0
            if self._above >= self.cfg.debounce:
                severity = "critical" if self._critical >= self.cfg.debounce else "warning"
                return self._raise(severity, frame_index, source)
            return None
        self._critical = self._critical + 1 if level == "critical" else 0
        self._below = self._below + 1 if self.score < self.z_clear else 0
        if self._below >= self.cfg.recover:
            self.state, self._above, self._critical, self._below = "normal", 0, 0, 0
            self._blank, self._since = False, None
            return DriftEvent(
                event="recovered",
                frame=frame_index,
                source=source,
                severity="info",
                score=self.score,
                layers=[],
                reason=(
                    f"the camera is back to normal: drift score below {self.z_clear:g} for {self.cfg.recover} frames in a row "
                    "(monitor.z_clear, monitor.recover)"
                ),
            )
        if self.state == "warning" and self._critical >= self.cfg.debounce:
            return self._raise("critical", frame_index, source)
        return None

    def _onset(self, reference: np.ndarray) -> int:
        """The frame where the fault began: the change point of the window (the start of the tail whose mean, times
        the square root of its length, lies farthest from ``reference``), or when that is the window's first frame,
        the oldest window frame when the scores first rose."""
        values = np.stack([s.value for s in self._window])
        tails = np.cumsum(values[::-1], axis=0)[::-1]  # tails[k] = sum of values[k:]
        lengths = np.arange(len(values), 0, -1)[:, None, None]
        strengths = [
            self._distance((tails[k] / lengths[k] - reference) / self._scale) * math.sqrt(lengths[k, 0, 0]) for k in range(len(values))
        ]
        best = int(np.argmax(strengths))
        if best == 0 and self._run_start is not None:
            return min(self._run_start, self._window[0].frame)
        return self._window[best].frame

    def _raise(self, severity: str, frame_index: int, source: str) -> DriftEvent:
        """The alert event, explained on the window's frames since the fault began (at least 2; else its last
        ``window // 2``) against the level they are compared with."""
        level_ref = self.line_reference if self.line_reference is not None else self.baseline.mean
        if self.state == "normal" or self._since is None:
            self._began = self._onset(level_ref)
            self._since = self._flagged if self._flagged is not None else self._began
        self.state = severity
        self._below = 0
        recent_seen = [s for s in self._window if s.frame >= self._began]
        if len(recent_seen) < _MIN_EXPLAINED:
            recent_seen = list(self._window)[-max(1, self.cfg.window // 2) :]
        recent = np.mean([s.value for s in recent_seen], axis=0)
        z = (recent - level_ref) / self._scale
        if self.baseline.space == "log":
            change = np.expm1(recent - level_ref)
        else:
            change = (recent - level_ref) / np.maximum(np.abs(self.baseline.level), _EPS)
        levels, reference_levels = _median([s.levels for s in recent_seen]), self._levels_reference(recent_seen)
        cause = self.classifier.classify(z) if self.classifier is not None else None
        cause = refine_cause(cause, levels, reference_levels) if self.classifier is not None else None
        statistic, members, moved = describe(z, change, self.scored)
        order = sorted(self.scored, key=lambda i: -float(np.abs(z[i]).max()))
        fact = image_fact(cause, levels, reference_levels, self.relative, change, self.scored)
        return DriftEvent(
            event="drift",
            frame=frame_index,
            source=source,
            severity=severity,
            score=self.score,
            layers=[self.layer_names[i] for i in order if np.abs(z[i]).max() >= 1.0] or [self.layer_names[order[0]]],
            reason=alert_text(fact or moved, cause, self._since, self.classifier is not None, began=self._began),
            statistic=STATISTICS[statistic],
            observed={self.layer_names[i]: float(recent[i, statistic]) for i in members},
            baseline={self.layer_names[i]: float(level_ref[i, statistic]) for i in members},
            z={self.layer_names[i]: float(z[i, statistic]) for i in members},
            cause=cause,
            since=self._since,
        )

    def _levels_reference(self, seen: list[_Seen]) -> np.ndarray | None:
        """The gray levels the recent frames are compared with: their golden images' (relative), else calibration's."""
        if self.relative:
            return _median([s.golden_levels for s in seen])
        return self.baseline.image_levels


def _median(rows: list[np.ndarray | None]) -> np.ndarray | None:
    kept = [r for r in rows if r is not None]
    return np.median(np.stack(kept), axis=0) if kept else None
