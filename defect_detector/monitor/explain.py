"""Why a drift alert fired: the camera fault its layer statistics look like, and what moved.

Hints come from the model itself. ``calibrate`` runs the simulated faults of ``monitor/faults.py``
(defocus, contrast loss, lighting drop, salt-and-pepper noise), each at three strengths
(``CALIBRATION_STRENGTHS``), on some of its clean calibration frames and stores their statistics in the
baseline (``Baseline.faults``). :class:`FaultClassifier` turns each
frame's change ``(faulted - clean) / scale`` into a feature: whitened by the detector's precision
matrix (so statistics that move together with board content count little) and scaled to unit length
(so the fault's strength does not matter, only its direction). An alert's change is then named after
the nearest fault in the pooled within-fault covariance of those features (linear discriminant
analysis), read on the alert's last frames against the line reference. Simulating three strengths rather
than one raised the lighting drops named right at alert time from 26 to 30 of 32 held-out onsets with the
bundled model (``monitor/evaluate_drift.py`` measures every fault).

A change far from every simulated fault (beyond ``_UNKNOWN_FACTOR`` times the calibration spread of
the features) is named "unlike the simulated camera faults" instead: a new board design or product, or a
fault the calibration did not simulate.
"""

from __future__ import annotations

import numpy as np

from defect_detector.monitor.baseline import STATISTICS, Baseline

HINTS = {
    "defocus": "lens dirty or out of focus?",
    "contrast_loss": "contrast loss (haze, glare or gain)?",
    "lighting_drop": "lighting or exposure changed?",
    "salt_and_pepper": "sensor noise or interference?",
}
"""The hint of each simulated fault (``monitor/faults.py`` names), in the order DESIGN.md lists causes."""
UNKNOWN_HINT = "unlike the simulated camera faults: a new board design or product (calibrate for it), or another fault?"
_UNKNOWN_FACTOR = 3.0
_RIDGE = 1e-3
_EXPLAIN_Z = 1.0  # per-statistic |z| from which a layer is named in an alert


class FaultClassifier:
    """Names the simulated fault nearest to a change of the scored statistics (module docstring).

    ``baseline.faults`` maps fault names to float64 ``[N, L, 2]`` statistics of N calibration frames
    with that fault, ``baseline.faults["clean"]`` the same frames clean. ``scale`` float64 ``[L, 2]`` and
    ``entries`` (indices into the flattened ``[2L]``) and ``precision`` (``[E, E]``) are the detector's.
    """

    def __init__(self, baseline: Baseline, scale: np.ndarray, entries: np.ndarray, precision: np.ndarray) -> None:
        values, vectors = np.linalg.eigh(precision)
        self._whiten = vectors @ np.diag(np.sqrt(np.maximum(values, 0.0))) @ vectors.T  # [E, E]
        self._scale = scale
        self._entries = entries
        clean = baseline.faults["clean"]
        self.names = [name for name in HINTS if name in baseline.faults]
        features = {name: self._features((baseline.faults[name] - clean) / scale) for name in self.names}
        self._means = np.stack([features[n].mean(0) for n in self.names])  # [K, E]
        pooled = sum(np.cov((features[n] - features[n].mean(0)).T, bias=True) for n in self.names) / len(self.names)
        self._inverse = np.linalg.inv(np.atleast_2d(pooled) + _RIDGE * np.eye(len(entries)))
        spread = np.concatenate([self._distances(features[n])[:, k] for k, n in enumerate(self.names)])
        self._unknown = _UNKNOWN_FACTOR * float(np.quantile(spread, 0.99))

    def _features(self, change: np.ndarray) -> np.ndarray:
        """``[N, L, 2]`` changes in scale units -> ``[N, E]`` whitened unit vectors."""
        x = change.reshape(len(change), -1)[:, self._entries] @ self._whiten
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

    def _distances(self, features: np.ndarray) -> np.ndarray:
        """``[N, E]`` -> ``[N, K]`` squared discriminant distances to each fault's mean feature."""
        diff = features[:, None, :] - self._means[None]  # [N, K, E]
        return np.einsum("nke,ef,nkf->nk", diff, self._inverse, diff)

    def classify(self, change: np.ndarray) -> str | None:
        """The fault name nearest to ``change`` (float64 ``[L, 2]`` in scale units), or None when it is unlike all."""
        distances = self._distances(self._features(change[None]))[0]
        best = int(np.argmin(distances))
        return self.names[best] if distances[best] <= self._unknown else None


def hint(fault: str | None) -> str:
    """The operator's hint for a fault name from :meth:`FaultClassifier.classify` (None: unknown)."""
    return HINTS.get(fault, UNKNOWN_HINT) if fault is not None else UNKNOWN_HINT


def describe(z: np.ndarray, change: np.ndarray, layers: list[int]) -> tuple[int, list[int], str]:
    """``(statistic index, its layers, text)``: what moved, measured, e.g. "activation contrast (std) fell
    17% below normal in 2 layers".

    ``z`` float64 ``[L, 2]`` signed z-scores, ``change`` ``[L, 2]`` relative change against the level compared
    with, ``layers`` the scored layers to consider. The statistic is the one beyond ``|z| >= 1`` in more of
    them (else the one that moved most); its direction is the majority's.
    """
    counts = [(np.abs(z[layers, s]) >= _EXPLAIN_Z).sum() for s in range(len(STATISTICS))]
    if max(counts) == 0:
        top = max(layers, key=lambda i: np.abs(z[i]).max())
        statistic, members = int(np.argmax(np.abs(z[top]))), [top]
    else:
        statistic = int(np.argmax(counts))
        members = [i for i in layers if abs(z[i, statistic]) >= _EXPLAIN_Z]
    direction = 1 if np.sum(np.sign(z[members, statistic])) >= 0 else -1
    members = [i for i in members if np.sign(z[i, statistic]) == direction] or members
    percent = 100.0 * float(np.median(np.abs(change[members, statistic])))
    what = "mean activation" if STATISTICS[statistic] == "mean" else "activation contrast (std)"
    verb = "rose" if direction > 0 else "fell"
    return statistic, members, f"{what} {verb} {percent:.0f}% {'above' if direction > 0 else 'below'} normal in {len(members)} layers"
