"""Exposure and content check: was the board really seen, at a light and contrast the model was validated for?

:func:`tones` reads a frame's tones from one 256-bin histogram (over the area a registered golden image covers, or
the whole frame): its dark and bright levels (1st and 99th percentile), its dark and bright modes (the mean level of
the pixels below and above halfway between the darkest and the brightest level it shows: unlike the percentiles they
hold for a board that is 99.9% copper, and a few glints or dead pixels do not move them), the shares of saturated
(>= :data:`SATURATED`) and crushed (<= :data:`CRUSHED`) pixels, ``highlights`` (the share of its bright pixels, those above the midpoint of
the two levels, that are saturated) and ``midtones`` (the share of pixels farther than a quarter of the level range
from both levels: a binarized or two-tone board has almost none; a hand, a cloth, a grey card or pure noise has many).

:func:`exposure_reason` compares them with a reference, the registered golden image's tones or, without one, the
calibration frames' levels the drift baseline records (``Baseline.image_levels``), and with the range the weights
were validated at (``core/limits.py`` ``ExposureLimits``, the weights' ``limits.exposure``). ``light`` is the bright level over
the reference's (a board at 25% light: 0.25); ``contrast`` the distance between the dark and bright modes over the
reference's (the calibration levels: its dark and bright levels). Over-exposure
clips: the bright level cannot rise past 255, so it shows as saturation instead, in ``highlights`` (a board whose
whites are all saturated: DeepPCB's boards keep 0.4-17% of their bright pixels below 250, and at 120% light none;
a board over 99% one tone, whose 1st and 99th percentiles are one level, is not judged on it: 7 of DeepPCB's 839
training boards, whose whites are saturated at normal light too; nor is a frame a binarized line thresholded,
``two_level`` :data:`THRESHOLDED` or more: its whites are 255 whatever the light)
and, against a golden image, as saturated or crushed area the golden image does not have. The range of the bundled
models was chosen by a measured ROC on the held-out groups (``benchmarks/exposure_roc.py``).
"""

from __future__ import annotations

import cv2
import numpy as np

from defect_detector.core.constants import CRUSHED, SATURATED
from defect_detector.core.limits import ExposureLimits
from defect_detector.core.refusal import Refusal, RefusalKind
from defect_detector.screens.blank import quantile_levels

MIN_SPAN = 64
"""Mid-tones lie between the dark and bright levels; when these are closer than this (a board that is over 99% one
tone: copper pours), between the darkest and the brightest level the frame shows instead."""

THRESHOLDED = 0.99
"""Share of a frame's pixels at exactly its darkest and its brightest level from which it is read as thresholded (a
binarized line's frame, lossless): its saturation says nothing of the light."""
TONES = ("dark", "bright", "saturated", "crushed", "highlights", "midtones", "dark_mode", "bright_mode", "two_level")
"""The entries of :func:`tones`."""


def histogram(gray: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """float64 ``[256]`` counts of the uint8 ``[H, W]`` ``gray`` (where bool ``mask`` ``[H, W]`` is set, when given)."""
    m = None if mask is None else mask.astype(np.uint8)
    return cv2.calcHist([np.ascontiguousarray(gray)], [0], m, [256], [0, 256]).ravel().astype(np.float64)


def tones(counts: np.ndarray) -> dict[str, float]:
    """The :data:`TONES` of a 256-bin histogram (module docstring); levels in gray levels 0-255, the rest shares in
    [0, 1]. ``ValueError`` for an empty histogram."""
    total = float(counts.sum())
    if total <= 0:
        raise ValueError("no pixels to read the exposure of")
    dark, bright = quantile_levels(counts, (0.01, 0.99))
    middle = (dark + bright) // 2
    bright_pixels = float(counts[middle + 1 :].sum())
    present = np.flatnonzero(counts)
    low, high = (dark, bright) if bright - dark >= MIN_SPAN else (int(present[0]), int(present[-1]))  # a board of one tone
    quarter = (high - low) / 4.0
    lo, hi = int(np.floor(low + quarter)) + 1, int(np.ceil(high - quarter))
    split = int(present[0] + present[-1]) // 2 + 1  # halfway between the darkest and the brightest level shown
    levels = np.arange(256, dtype=np.float64)
    below, above = counts[:split], counts[split:]
    dark_mode = float(below @ levels[:split] / below.sum()) if below.sum() > 0 else float(present[0])
    bright_mode = float(above @ levels[split:] / above.sum()) if above.sum() > 0 else float(present[-1])
    return {
        "dark": float(dark),
        "bright": float(bright),
        "saturated": float(counts[SATURATED:].sum()) / total,
        "crushed": float(counts[: CRUSHED + 1].sum()) / total,
        "highlights": float(counts[SATURATED:].sum()) / bright_pixels if bright_pixels > 0 and bright >= SATURATED else 0.0,
        "midtones": float(counts[lo:hi].sum()) / total if hi > lo else 0.0,
        "dark_mode": dark_mode,
        "bright_mode": bright_mode,
        "two_level": float(counts[present[0]] + counts[present[-1]]) / total if len(present) > 1 else 1.0,
    }


def contrast_ratio(frame: dict[str, float], reference: dict[str, float]) -> float:
    """The frame's contrast as a fraction of the reference's: the larger of its level range (1st-99th percentile) over
    the reference's and its mode distance over the reference's (its level range when it records no modes: the
    calibration levels), so neither a board that is 99.9% copper nor a photograph's soft tones read as low contrast."""
    modes = ("dark_mode", "bright_mode") if "dark_mode" in reference else ("dark", "bright")
    readings = []
    for low, high, ref_low, ref_high in (("dark", "bright", "dark", "bright"), ("dark_mode", "bright_mode", *modes)):
        span = reference[ref_high] - reference.get(ref_low, 0.0)
        readings.append((frame[high] - frame[low]) / span if span > 0 else 1.0)
    return max(readings)


def _overexposed(frame: dict[str, float], reference: dict[str, float] | None, max_highlights: float) -> bool:
    """More of the frame's bright pixels saturated than ``max_highlights``, and, against a golden image, fewer than half
    of the bright pixels the golden image keeps below saturation still below it: a binarized golden image whose whites
    are all 255 (a lossless scan, DeepPCB's templates) has a board of the same look pass, more light does not. A frame
    thresholded by a binarized line (:data:`THRESHOLDED` of it at its darkest and brightest level) says nothing of
    the light by its saturation: its whites are 255 whatever the light was, so it is never read as overexposed here."""
    if frame["highlights"] <= max_highlights or frame.get("two_level", 0.0) >= THRESHOLDED:
        return False
    if reference is None or "highlights" not in reference:
        return True
    return 1.0 - frame["highlights"] < 0.5 * (1.0 - reference["highlights"])


def exposure_reason(frame: dict[str, float], reference: dict[str, float] | None, limits: ExposureLimits, what: str) -> Refusal | None:
    """Why a frame of :func:`tones` ``frame`` is outside ``limits`` against ``reference`` (the golden image's tones, or
    the calibration levels: ``dark`` and ``bright`` only), or None. ``what`` names the reference in the message ("the
    golden image", "the calibration frames"). Mid-tones are read first (a hand or noise is not a board, whatever its
    levels), then light, contrast and clipping. The refusal's kind is ``occluded or not a board``, ``underexposed``,
    ``low contrast``, ``overexposed`` or ``overexposed or underexposed``; its values the measure and its limit."""
    whose = f"{what}'" if what.endswith("s") else f"{what}'s"
    extra = frame["midtones"] - (reference or {}).get("midtones", 0.0)
    if limits.max_midtones is not None and extra > limits.max_midtones:
        message = (
            f"occluded or not a board: {extra:.0%} of the frame in mid-tones unlike {what} (most {limits.max_midtones:.0%}): "
            "a hand, a cloth, noise or another scene in view, or a look (a photograph) the model was not validated on?"
        )
        return Refusal(RefusalKind.OCCLUDED_MIDTONES, message, {"midtones": extra, "most": limits.max_midtones})
    if reference is not None and reference.get("bright", 0.0) > 0:
        light = frame["bright"] / reference["bright"]
        if light < limits.min_light:
            message = f"underexposed: {light:.0%} of {whose} level (least {limits.min_light:.0%}): check the light and the exposure"
            return Refusal(RefusalKind.UNDEREXPOSED, message, {"light": light, "least": limits.min_light})
        contrast = contrast_ratio(frame, reference)
        if contrast < limits.min_contrast:
            message = f"low contrast: {contrast:.0%} of {whose} (least {limits.min_contrast:.0%}): check the focus, the light and the lens"
            return Refusal(RefusalKind.LOW_CONTRAST, message, {"contrast": contrast, "least": limits.min_contrast})
    if limits.max_highlights is not None and _overexposed(frame, reference, limits.max_highlights):
        message = (
            f"overexposed: {frame['highlights']:.2%} of the bright pixels saturated (most {limits.max_highlights:.2%}): "
            "check the light and the exposure"
        )
        return Refusal(RefusalKind.OVEREXPOSED, message, {"highlights": frame["highlights"], "most": limits.max_highlights})
    if reference is not None and "saturated" in reference:
        clipped = frame["saturated"] + frame["crushed"] - reference["saturated"] - reference["crushed"]
        if clipped > limits.max_clipped:
            message = f"overexposed or underexposed: {clipped:.0%} more of the frame clipped than {what} (most {limits.max_clipped:.0%})"
            return Refusal(RefusalKind.CLIPPED, message, {"clipped": clipped, "most": limits.max_clipped})
    return None
