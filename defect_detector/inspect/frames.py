"""Frames as the runtime takes them: checked and converted to 8-bit grayscale, each with its optional reference.

A frame is a numpy image as OpenCV returns it: ``[H, W]``, ``[H, W, 1]``, BGR ``[H, W, 3]`` or BGRA ``[H, W, 4]``,
uint8 or uint16. A reference (2-channel models) is such an image of its frame's size, already registered into it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from defect_detector.data.images import to_gray_uint8

_CHANNELS = (1, 3, 4)


def check_frame(frame: Any, index: int, what: str = "frame") -> np.ndarray:
    """Return ``frame`` if it is an image :func:`to_gray_uint8` accepts with 1, 3 or 4 channels, else raise ``ValueError``
    starting ``"{what} {index}: "``."""
    name = f"{what} {index}"
    if not isinstance(frame, np.ndarray):
        raise ValueError(f"{name}: expected a numpy array, got {type(frame).__name__}")
    if frame.ndim not in (2, 3):
        raise ValueError(f"{name}: expected shape [H, W] or [H, W, C], got {frame.shape}")
    if frame.ndim == 3 and frame.shape[2] not in _CHANNELS:
        raise ValueError(f"{name}: expected 1, 3 (BGR) or 4 (BGRA) channels, got {frame.shape[2]} (shape {frame.shape})")
    if frame.shape[0] == 0 or frame.shape[1] == 0:
        raise ValueError(f"{name}: empty image, shape {frame.shape}")
    if frame.dtype not in (np.uint8, np.uint16):
        raise ValueError(f"{name}: expected dtype uint8 or uint16, got {frame.dtype}")
    return frame


def gray_planes(frame: Any, reference: Any, index: int) -> list[np.ndarray]:
    """``[frame]`` or ``[frame, reference]`` checked (:func:`check_frame`) and converted to uint8 ``[H, W]``
    (:func:`to_gray_uint8`); ``ValueError`` naming frame ``index`` for a bad image or a reference of another size."""
    gray = to_gray_uint8(check_frame(frame, index))[0]
    if reference is None:
        return [gray]
    ref = to_gray_uint8(check_frame(reference, index, "reference of frame"))[0]
    if ref.shape != gray.shape:
        raise ValueError(
            f"frame {index}: reference is {ref.shape[1]}x{ref.shape[0]} px, the frame {gray.shape[1]}x{gray.shape[0]}; "
            "register it into the frame first (defect_detector.data.register)"
        )
    return [gray, ref]
