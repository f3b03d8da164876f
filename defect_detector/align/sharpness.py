"""How sharp a frame is against its golden image: the words a refusal under blur needs.

A blurred frame can fail registration or the golden check (its tracks smear, so it differs from the golden image
along all of them), which would read like "another design". Sharpness tells the two apart. An image's
:func:`sharpness` is the energy of its fine detail over that of its coarse detail: the variance of the Laplacian
after a Gaussian blur of sigma 1 px, over the same after sigma 2 px. Being a ratio, it hardly depends on how much
is on the board (on DeepPCB's sample golden images of four designs it lies between 6.5 and 7.6), while blur takes
the fine detail first. Frame over golden image: 0.99-1.00 for true pairs, unchanged by sensor noise (sigma 3
levels); about 0.50 under a defocus of sigma 1 px, 0.27 of sigma 2 px and 0.20 of sigma 3 px (``monitor/faults.py``
``defocus`` on the same pairs). Below :data:`BLURRED` a refusal names the blur first.
"""

from __future__ import annotations

import cv2
import numpy as np

BLURRED = 0.6
"""A frame whose sharpness is below this share of its golden image's is called blurred (designs differ by up to 0.86)."""


def _detail(image: np.ndarray, sigma: float) -> float:
    return float(cv2.Laplacian(cv2.GaussianBlur(image.astype(np.float32), (0, 0), sigma), cv2.CV_32F).var())


def sharpness(image: np.ndarray) -> float:
    """Fine over coarse detail of ``image`` (uint8 ``[H, W]``): Laplacian variance after a Gaussian of sigma 1 px over
    the same after sigma 2 px; 0.0 for a flat image."""
    coarse = _detail(image, 2.0)
    return _detail(image, 1.0) / coarse if coarse > 0 else 0.0


def sharpness_ratio(image: np.ndarray, golden: np.ndarray) -> float:
    """``sharpness(image) / sharpness(golden)`` (both uint8 ``[H, W]``, any sizes); ``inf`` when the golden image is flat."""
    reference = sharpness(golden)
    return sharpness(image) / reference if reference > 0 else float("inf")


def blur_words(image: np.ndarray, golden: np.ndarray) -> str:
    """"frame is blurred: sharpness 27% of the golden image's (check the focus and clean the lens)" when the frame's
    sharpness is below :data:`BLURRED` of the golden image's, else ""."""
    ratio = sharpness_ratio(image, golden)
    if ratio >= BLURRED:
        return ""
    return f"frame is blurred: sharpness {ratio:.0%} of the golden image's (check the focus and clean the lens)"
