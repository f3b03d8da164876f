"""Simulated camera faults on grayscale frames, for tests, the demo and the drift benchmark.

Every function takes a uint8 ``[H, W]`` frame (the original frame, before letterboxing, as a
camera would deliver it) and returns a new uint8 ``[H, W]`` frame; the input is never modified.
"""

from __future__ import annotations

from collections.abc import Callable

import cv2
import numpy as np


def _check(img: np.ndarray) -> None:
    if img.ndim != 2 or img.dtype != np.uint8:
        raise ValueError(f"expected a uint8 [H, W] frame, got {img.dtype} {img.shape}")


def _to_uint8(values: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(values), 0, 255).astype(np.uint8)


def defocus(img: np.ndarray, sigma: float = 2.0) -> np.ndarray:
    """Out-of-focus lens or dirt on it: Gaussian blur with standard deviation ``sigma`` pixels (kernel +-3 sigma)."""
    _check(img)
    if sigma <= 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    return cv2.GaussianBlur(img, (0, 0), sigmaX=sigma, sigmaY=sigma, borderType=cv2.BORDER_REFLECT_101)


def contrast_loss(img: np.ndarray, factor: float = 0.6) -> np.ndarray:
    """Washed-out image (haze, veiling glare, gain fault): deviations from the frame's own mean
    grey level are multiplied by ``factor`` (0.6 = 40% less contrast), so mean brightness is kept
    and only contrast changes."""
    _check(img)
    if not 0 <= factor <= 1:
        raise ValueError(f"factor must be in [0, 1], got {factor}")
    mean = float(img.mean())
    return _to_uint8(mean + (img.astype(np.float32) - mean) * factor)


def lighting_drop(img: np.ndarray, factor: float = 0.6) -> np.ndarray:
    """Changed illumination: every pixel multiplied by ``factor`` (0.6 = 40% darker; above 1 brighter, clipped at 255)."""
    _check(img)
    if factor < 0:
        raise ValueError(f"factor must be >= 0, got {factor}")
    return _to_uint8(img.astype(np.float32) * factor)


def salt_and_pepper(img: np.ndarray, amount: float = 0.02, rng: np.random.Generator | None = None) -> np.ndarray:
    """Sensor noise or interference: a fraction ``amount`` of the pixels, chosen at random, set to
    0 (pepper) or 255 (salt) with equal probability. ``rng`` defaults to a fixed seed (0)."""
    _check(img)
    if not 0 <= amount <= 1:
        raise ValueError(f"amount must be in [0, 1], got {amount}")
    rng = rng if rng is not None else np.random.default_rng(0)
    out = img.copy()
    hit = rng.random(img.shape) < amount
    salt = rng.random(img.shape) < 0.5
    out[hit & salt] = 255
    out[hit & ~salt] = 0
    return out


FAULTS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "defocus": defocus,
    "contrast_loss": contrast_loss,
    "lighting_drop": lighting_drop,
    "salt_and_pepper": salt_and_pepper,
}
"""The four faults with their default strengths, by name (benchmark and demo order)."""

CALIBRATION_STRENGTHS: dict[str, tuple[float, ...]] = {
    "defocus": (1.5, 2.0, 3.0),
    "contrast_loss": (0.75, 0.6, 0.45),
    "lighting_drop": (0.75, 0.6, 0.45),
    "salt_and_pepper": (0.01, 0.02, 0.04),
}
"""The strengths ``calibrate`` simulates each fault at (milder, default, stronger), so an alert's cause is
named from how the model responds over a range of each fault, not at one strength only."""


def apply_fault(img: np.ndarray, name: str, strength: float, seed: int = 0) -> np.ndarray:
    """Fault ``name`` of :data:`FAULTS` at ``strength`` (its one parameter: sigma, factor or amount) on a uint8
    ``[H, W]`` frame; salt-and-pepper draws its pixels from ``seed``."""
    fn = FAULTS[name]
    if fn is salt_and_pepper:
        return salt_and_pepper(img, strength, np.random.default_rng(seed))
    return fn(img, strength)
