"""Was the board really seen? The checks a frame passes between registration and the model, and the mask after it.

- Coverage (golden-template models): the registered golden image has no data where it was moved off the frame; a
  frame it covers less than :data:`MIN_COVERED` of is not inspected, and no call is kept whose centre lies where it
  has none (:func:`mask_uncovered`): the model would compare the board with the fill value there.
- Exposure and content (``screens/exposure.py``): the frame's tones against its registered golden image over the
  covered area, or, without one, against the calibration frames' levels the drift baseline records; outside the
  range the weights were validated at (their ``limits.exposure``, ``core/limits.py``) the frame is not inspected, the
  reason naming what was measured ("underexposed: 25% of the golden image's level ...").
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from defect_detector.core.boxes import centres_inside
from defect_detector.core.frame_record import Prepared, StageContext
from defect_detector.core.limits import ExposureLimits
from defect_detector.core.refusal import Refusal, RefusalKind
from defect_detector.core.types import Detections
from defect_detector.screens.exposure import exposure_reason, histogram, tones

MIN_SIDE = 32
"""Fewest pixels on a side of a frame or golden image that is inspected: a defect the weights were validated on is at
least 26 px (docs/looks.md), and registration's coarsest level needs 8 px at ``register.scale`` 0.25 (issue 44: a
16x16 frame aborted a golden-template run, and a 16x16 checkerboard or a 65535x1 frame passed)."""


def too_small(shape: tuple[int, ...], what: str) -> Refusal | None:
    """The refusal of an image of ``shape`` under :data:`MIN_SIDE` px on a side (``what``: "frame", "golden image"), or
    None."""
    h, w = shape[:2]
    if min(h, w) >= MIN_SIDE:
        return None
    message = f"{what} is {w}x{h} px: too small to inspect (at least {MIN_SIDE} px a side; a defect is at least 26 px)"
    return Refusal(RefusalKind.TOO_SMALL, message, {"width": w, "height": h, "least": MIN_SIDE})


MIN_COVERED = 0.9
"""Least share of the frame the registered golden image must cover (its 3 px edge off) for the frame to be inspected."""


def calibration_levels(*baselines: Any) -> dict[str, Any] | None:
    """``{"dark", "bright", "pixel_levels"}`` of the calibration frames the first of ``baselines`` that records them
    holds (a ``Baseline`` or its dict, ``image_levels``: median 1st and 99th percentiles; ``pixel_levels``: the shares
    of their pixels per grey level, ``screens/hidden.py``, None in baselines before v0.14; None entries skipped), or
    None."""
    for baseline in baselines:
        levels, shares = (
            (baseline.get("image_levels"), baseline.get("pixel_levels"))
            if isinstance(baseline, dict)
            else (getattr(baseline, "image_levels", None), getattr(baseline, "pixel_levels", None))
        )
        if levels is not None and len(levels) >= 3:
            return {"dark": float(levels[0]), "bright": float(levels[2]), "pixel_levels": None if shares is None else np.asarray(shares)}
    return None


def screen_reason(
    gray: np.ndarray,
    golden: np.ndarray | None,
    covered: np.ndarray | None,
    limits: ExposureLimits,
    calibration: dict[str, float] | None,
    matched: np.ndarray | None = None,
    own: dict[str, float] | None = None,
    area: np.ndarray | None = None,
) -> Refusal | None:
    """Why the uint8 ``[H, W]`` frame ``gray`` is not inspected, or None. ``golden``: its registered
    golden image (uint8 ``[H, W]``) and ``covered`` (bool ``[H, W]``) where that has data; None for a single-image
    model, which is read against ``calibration`` (:func:`calibration_levels`; None: only the absolute limits).
    ``matched``: the registered golden image at the frame's levels (``Photometric.to_board``): the frame's mid-tones
    and its clipped area are read against its own, so a gain and tone change is not taken for an occluder, and the
    saturation a brighter light within the validated range predicts (a white background at gain 1.15) is not taken for
    clipping (the light's own range is judged by ``photometric_reason`` after); light and contrast stay read against the
    golden image as captured. ``own``: :func:`tones` of the golden image itself, not registered: the share of its bright
    pixels saturated (``highlights``) is read from it, since registration's interpolation puts in-between levels on
    every edge (a binarized golden image, whites exactly 255, keeps 3% of its bright pixels below saturation once
    registered, and a lossless binarized board, which has none, read as overexposed). ``area``: bool ``[H, W]``, the
    design's inspection area in the frame (``align/inspection_area.py``; ``covered`` lies within it): coverage is then
    read over the board, not the frame."""
    if golden is not None and covered is not None:
        whole = float(area.sum()) if area is not None else float(covered.size)
        share = float(covered.sum()) / max(whole, 1.0)
        if share < MIN_COVERED:
            what = "the board's inspection area" if area is not None else "the frame"
            message = (
                f"golden image covers {share:.0%} of {what} (least {MIN_COVERED:.0%}): the board is shifted or turned "
                "too far in the fixture"
            )
            return Refusal(RefusalKind.COVERS_LITTLE, message, {"covered": share, "least": MIN_COVERED})
        frame, reference, what = tones(histogram(gray, covered)), tones(histogram(golden, covered)), "the golden image"
        if matched is not None and matched is not golden:
            predicted = tones(histogram(matched, covered))
            reference.update({k: predicted[k] for k in ("midtones", "saturated", "crushed")})
        if own is not None:
            reference["highlights"] = own["highlights"]
    else:
        frame, reference, what = tones(histogram(gray)), calibration, "the calibration frames"
    return exposure_reason(frame, reference, limits, what)


def frame_size(context: StageContext, record: Prepared) -> Prepared:
    """The frame-size stage: a frame under :data:`MIN_SIDE` px on a side is refused (``too_small``)."""
    small = too_small(record.frame.image.shape, f"{record.frame.file_name}: the frame")
    return record if small is None else dataclasses.replace(record, refusal=small)


def exposure(context: StageContext, record: Prepared) -> Prepared:
    """The coverage and exposure stage (:func:`screen_reason`): the frame against its registered golden image over the
    covered area, or against the calibration levels, at its design's ``limits.exposure``. A frame whose golden check
    refusal is pending (``record.mismatch``) is left to the hidden-area screen, which decides it."""
    if record.mismatch is not None:
        return record
    design = record.design
    if design is not None and design.tones is None:
        design.tones = tones(histogram(design.image))
    own = design.tones if design is not None else None
    limits = context.limits_for(record.golden_key).exposure
    image, matched = record.frame.image, record.matched
    refusal = screen_reason(image, record.golden, record.covered, limits, context.calibration, matched, own, record.area)
    return record if refusal is None else dataclasses.replace(record, refusal=refusal)


def mask_uncovered(detections: Detections, covered: np.ndarray | None) -> Detections:
    """``detections`` without the calls whose box centre lies outside ``covered`` (bool ``[H, W]`` in frame pixels;
    None: all kept)."""
    if covered is None or len(detections) == 0:
        return detections
    kept = centres_inside(detections.boxes, covered)
    return detections if bool(kept.all()) else detections.keep(kept)
