"""One decoded frame, as a source (``inspect/sources.py``), ``Inspector.inspect``, ``val`` or ``calibrate`` hands it
to the prepare stage."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Frame:
    """One decoded frame.

    ``index``: 0-based position in the source. ``image``: uint8 ``[H, W]`` grayscale, or None for an
    error frame. ``source_name``: the SOURCE string. ``file_name``: the image path relative to SOURCE
    (its base name for a single file or a video; ``camera<N>`` / the URL for streams). ``timestamp``:
    seconds, the position in the video for video files, wall-clock time (``time.time()``) otherwise.
    ``error``: why the frame could not be read (None when ``image`` is set). ``decode_ms``: time spent reading and
    converting it.
    """

    index: int
    image: np.ndarray | None
    source_name: str
    file_name: str
    timestamp: float
    error: str | None = None
    decode_ms: float = 0.0
