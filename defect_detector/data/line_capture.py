"""The capture step of pair augmentation: the board as a line's day delivers it, then brought back to the golden
image's levels by the photometric registration, as the golden view does at inspection.

A line camera never sees a board as its golden image was captured (issue 42): gain and gamma drift, an offset, a
light gradient across the board, defocus, sensor noise and JPEG. :class:`LineCapture` draws those on the board of a
training pair (uint8 ``[H, W]``, the pair's frame; boxes are untouched: nothing moves), then fits the golden image's
levels to the board's (:func:`~defect_detector.data.photometric.fit_photometric`) and maps the board back with
:meth:`~defect_detector.data.photometric.Photometric.to_golden`. So the model trains on what inspection hands it: the
fit's residual, not the raw change. Moves are not drawn here: registration removes them, and the pair's rigid
residual (``augment.ref_shift``, ``ref_rotate``) stands in for what it leaves.
"""

from __future__ import annotations

import cv2
import numpy as np

from defect_detector.data.photometric import fit_photometric

GAIN = (0.85, 1.15)
GAMMA = (0.85, 1.15)
OFFSET = 10.0
"""Grey levels, +-."""
GRADIENT = 0.12
"""Largest half range of the linear light gradient across the image, as a fraction of the mean light."""
DEFOCUS = 1.2
"""Largest Gaussian sigma, pixels (half of the captures are defocused)."""
NOISE = 4.0
"""Largest sensor noise sigma, grey levels."""
JPEG_QUALITY = (85, 95)
"""JPEG quality range (half of the captures are compressed)."""


def _light(shape: tuple[int, int], amplitude: float, angle: float, gain: float) -> np.ndarray:
    """float32 ``[H, W]``: ``gain * (1 + amplitude * t)``, ``t`` in [-1, 1] along direction ``angle`` (radians)."""
    h, w = shape
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    t = (xs / max(w - 1, 1) * 2 - 1) * np.cos(angle) + (ys / max(h - 1, 1) * 2 - 1) * np.sin(angle)
    t /= max(abs(np.cos(angle)) + abs(np.sin(angle)), 1e-6)
    return (gain * (1 + amplitude * t)).astype(np.float32)


class LineCapture:
    """Draw a line capture on the board, then match it back to the golden image's levels (module docstring).
    ``__call__(image, reference) -> image``: uint8 ``[H, W]`` each, in the same frame; with probability ``p``."""

    def __init__(self, p: float = 1.0) -> None:
        self.p = p
        self.rng = np.random.default_rng()

    def set_random_state(self, rng: np.random.Generator) -> None:
        """Draw from ``rng`` from now on (``data/collate.py`` seeds each sample through ``PairTransform``)."""
        self.rng = rng

    def capture(self, board: np.ndarray) -> np.ndarray:
        """uint8 ``board`` ``[H, W]`` as one random line capture: uint8 ``[H, W]``."""
        rng = self.rng
        light = _light(board.shape, rng.uniform(0, GRADIENT), rng.uniform(0, 2 * np.pi), rng.uniform(*GAIN))
        gamma, offset = rng.uniform(*GAMMA), rng.uniform(-OFFSET, OFFSET)
        out = light * 255.0 * (board.astype(np.float32) / 255.0) ** gamma + offset
        if rng.random() < 0.5:
            out = cv2.GaussianBlur(out, (0, 0), rng.uniform(0.3, DEFOCUS))
        out += rng.normal(0.0, rng.uniform(0, NOISE), out.shape).astype(np.float32)
        out = np.clip(out + 0.5, 0, 255).astype(np.uint8)
        if rng.random() < 0.5:
            quality = int(rng.integers(JPEG_QUALITY[0], JPEG_QUALITY[1] + 1))
            ok, data = cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, quality])
            if ok:
                out = cv2.imdecode(data, cv2.IMREAD_GRAYSCALE)
        return out

    def __call__(self, image: np.ndarray, reference: np.ndarray) -> np.ndarray:
        if self.p <= 0 or self.rng.random() >= self.p:
            return image
        board = self.capture(image)
        return fit_photometric(reference, board).to_golden(board)
