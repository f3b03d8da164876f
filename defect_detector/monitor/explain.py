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
bundled model (``benchmarks/evaluate_drift.py`` measures every fault).

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
ACTIONS = {
    "defocus": "check the focus and clean the lens",
    "contrast_loss": "clean the lens and its window, shade stray light, check the camera gain",
    "lighting_drop": "check the light and the exposure setting",
    "salt_and_pepper": "check the camera, its cable and grounding, and nearby interference",
}
"""What the line engineer should do about each fault."""
UNKNOWN_HINT = "unlike the simulated camera faults: a new board design or product (calibrate for it), or another fault?"
UNKNOWN_ACTION = "compare a frame with a known-good one; if the camera is fine, calibrate for this product"
_NOTABLE = 0.1  # a gray-level change an alert quotes, as a fraction
_LIFTED = 0.04  # a rise of the dark level (fraction of the reference's spread) that means lost contrast
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
        clean = baseline.transform(baseline.faults["clean"])
        self.names = [name for name in HINTS if name in baseline.faults]
        features = {name: self._features((baseline.transform(baseline.faults[name]) - clean) / scale) for name in self.names}
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


def refine_cause(cause: str | None, levels: np.ndarray | None, reference: np.ndarray | None) -> str | None:
    """Tell a lighting change from a contrast loss by the gray levels, which the layer statistics confuse: haze, glare
    or gain lift the dark level, a dimmer light keeps it and lowers the bright level. ``levels`` / ``reference``:
    ``screens/blank.py`` levels of the recent frames and of what they are compared with (None: ``cause`` as it is)."""
    if levels is None or reference is None or cause not in (None, "contrast_loss", "lighting_drop"):
        return cause
    spread = max(float(reference[2]) - float(reference[0]), 1.0)
    lifted = (float(levels[0]) - float(reference[0])) / spread
    bright = float(levels[2]) / max(float(reference[2]), 1.0) - 1.0
    if lifted >= _LIFTED:
        return "contrast_loss"
    if abs(bright) >= _NOTABLE and abs(lifted) < _LIFTED / 2:
        return "lighting_drop"
    return cause


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
    where = "1 layer" if len(members) == 1 else f"{len(members)} layers"
    return statistic, members, f"the model's {what} {verb} {percent:.0f}% {'above' if direction > 0 else 'below'} normal in {where}"


def image_fact(
    cause: str | None,
    levels: np.ndarray | None,
    reference: np.ndarray | None,
    relative: bool,
    change: np.ndarray,
    layers: list[int],
) -> str | None:
    """What the image shows, in the line's words, e.g. "image 40% darker than at calibration", or None when the
    statistics at hand say nothing readable (the caller then quotes :func:`describe`).

    ``levels`` / ``reference``: the recent frames' gray levels and those they are compared with (``screens/blank.py``
    ``LEVELS``: dark, median, bright, detail; None when unknown); ``relative``: compared with the golden images
    (else with calibration); ``change`` float64 ``[L, 2]`` relative change of the layer statistics, ``layers`` the
    scored ones (their activation contrast measures fine detail)."""
    versus = "than its golden image" if relative else "than at calibration"
    if levels is not None and reference is not None:
        bright = float(levels[2]) / max(float(reference[2]), 1.0) - 1.0
        spread = (float(levels[2]) - float(levels[0])) / max(float(reference[2]) - float(reference[0]), 1.0) - 1.0
        if cause == "contrast_loss" and spread <= -_NOTABLE:
            return f"image contrast {100 * -spread:.0f}% lower {versus}"
        if cause in (None, "lighting_drop", "contrast_loss") and abs(bright) >= _NOTABLE:
            return f"image {100 * abs(bright):.0f}% {'darker' if bright < 0 else 'brighter'} {versus}"
        if cause is None and abs(spread) >= _NOTABLE:
            return f"image contrast {100 * abs(spread):.0f}% {'lower' if spread < 0 else 'higher'} {versus}"
    if cause == "defocus":
        weaker = -100.0 * float(min(change[layers, 1].min(), 0.0)) if layers else 0.0
        return f"image blurred (fine detail {weaker:.0f}% weaker {versus})"
    if cause == "salt_and_pepper":
        stronger = 100.0 * float(max(change[layers].max(), 0.0)) if layers else 0.0
        return f"speckle noise in the image (the model's first layers respond {stronger:.0f}% more strongly {versus})"
    return None


def alert_text(fact: str, cause: str | None, since: int | None, named: bool = True, began: int | None = None) -> str:
    """An alert's reason: what the image shows, the likely cause, what to do, and which results are suspect: from
    ``since``, the first frame the monitor flagged (the per-frame ``drift`` reads ``warning`` or ``critical`` from
    there), and, when the window shows the change starting earlier (``began``), from about there.
    ``named``: the baseline can name causes (else only the fact and the suspect frames)."""
    suspect = f"; inspection results since frame {since} are suspect (first frame flagged)" if since is not None else ""
    if since is not None and began is not None and began < since:
        suspect += f"; the change shows from about frame {began}: re-check the boards from there"
    if not named:
        return f"{fact}: check the camera{suspect}"
    question = HINTS.get(cause, UNKNOWN_HINT) if cause is not None else UNKNOWN_HINT
    action = ACTIONS.get(cause, UNKNOWN_ACTION) if cause is not None else UNKNOWN_ACTION
    return f"{fact}: {question} {action}{suspect}"


def blank_text(reason: str, frame: int) -> str:
    """The alert of a blank frame (``screens/blank.py`` ``reason``): such frames are not inspected."""
    return f"{reason}; frame {frame} and any blank frame after it are not inspected"
