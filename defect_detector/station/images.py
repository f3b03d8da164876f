"""Stored frame images: PNG files under the images root, named by the recorder, never by a request.

Layout: ``<root>/<YYYYMMDD>/<32 hex>.png`` for a kept frame, ``<32 hex>.ref.png`` for its registered golden image,
``<root>/live/<32 hex>.png`` for the live page's latest picture of a frame that is not kept. The database stores the
path relative to the root; :func:`resolve` refuses any stored path that would leave it.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from pathlib import Path

import cv2
import numpy as np

from defect_detector.core.io import atomic_write_bytes

PNG_PARAMS = (
    cv2.IMWRITE_PNG_COMPRESSION,
    1,
    cv2.IMWRITE_PNG_STRATEGY,
    cv2.IMWRITE_PNG_STRATEGY_RLE,
    cv2.IMWRITE_PNG_FILTER,
    cv2.IMWRITE_PNG_FILTER_UP,
)
"""Kept frames: fast PNG settings (the writer thread shares the CPU with inspection): zlib level 1, run-length
strategy, the "up" filter. A noisy 640x640 camera frame takes about 4 ms (the default settings: 10 ms, same size);
a clean board 1 ms."""
LIVE_PNG_PARAMS = (cv2.IMWRITE_PNG_COMPRESSION, 0, cv2.IMWRITE_PNG_FILTER, cv2.IMWRITE_PNG_FILTER_NONE)
"""The live page's picture of a frame that is not kept (replaced a few times a second): stored uncompressed, 0.4 ms."""


def encode_png(image: np.ndarray, live: bool = False) -> bytes:
    """PNG bytes of a uint8 ``[H, W]`` image (``live``: uncompressed, for the live page's passing picture)."""
    ok, data = cv2.imencode(".png", image, list(LIVE_PNG_PARAMS if live else PNG_PARAMS))
    if not ok:
        raise ValueError(f"cannot encode a {image.dtype} {image.shape} image as PNG")
    return data.tobytes()


def new_names(time: datetime, live: bool = False) -> tuple[str, str]:
    """Fresh relative paths ``(frame, golden)`` for a frame inspected at ``time`` (``live``: the live folder)."""
    stem = uuid.uuid4().hex
    folder = "live" if live else time.strftime("%Y%m%d")
    return f"{folder}/{stem}.png", f"{folder}/{stem}.ref.png"


def write_png(root: Path, relative: str, image: np.ndarray, live: bool = False) -> None:
    """Encode ``image`` (see :func:`encode_png`) and write it to ``root / relative`` atomically (temp file + rename)."""
    atomic_write_bytes(root / relative, encode_png(image, live))


def resolve(root: Path, relative: str | None) -> Path | None:
    """The file of a stored relative path, or None when unset, outside ``root`` or missing."""
    if not relative:
        return None
    base = root.resolve()
    path = (base / relative).resolve()
    if not path.is_relative_to(base) or not path.is_file():
        return None
    return path
