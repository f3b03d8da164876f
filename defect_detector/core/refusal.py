"""Why a frame was not inspected: a typed :class:`Refusal` (its :class:`RefusalKind`, the values measured, the message).

Every stage that refuses a frame builds one; the outputs, the station, drift and the summary read its ``kind``, never
the message's text. The kinds' values are the short labels the station and the summary count by.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType


class RefusalKind(StrEnum):
    """What stopped a frame from being inspected."""

    UNREADABLE = "unreadable"
    """The frame could not be read or converted to gray (corrupt, huge, wrong channels)."""
    TOO_SMALL = "too small"
    """The frame, or its golden image, is under ``screens/frame.py`` ``MIN_SIDE`` pixels on a side."""
    BLANK = "blank frame"
    """Black, white, saturated or flat (``screens/blank.py``)."""
    NO_GOLDEN = "no golden image"
    """A golden-template model was given no golden images at all."""
    NO_REFERENCE = "no reference"
    """The folder of golden images holds none for this frame (``inspect/references.py``)."""
    UNREADABLE_REFERENCE = "unreadable reference"
    """The frame's golden image could not be read."""
    REFERENCE_MISMATCH = "reference does not match"
    """The golden check: the golden image shows another design or another board (``align/register.py``)."""
    OCCLUDED_BOARD = "occluded or not this board"
    """The golden check found one region unlike the golden image."""
    OUT_OF_FIXTURE = "board out of place"
    """The board is moved or turned beyond the fixture's limits (``register.max_shift``, ``register.max_angle``)."""
    BENT = "board bent or moved"
    """The golden image's mapping leaves a local residual beyond ``register.max_local``: a bent board, or one that moved
    during the capture (``align/local_grid.py``)."""
    COVERS_LITTLE = "golden image covers too little"
    """The board moved so far that its golden image covers too little of the frame (``screens/frame.py``)."""
    UNDEREXPOSED = "underexposed"
    """Too dark for the range the weights were validated at; or a single-image model's frame at grey levels the
    calibration frames never show, 10% or more darker than they are (``screens/hidden.py`` ``LIGHT_CHANGE``)."""
    OVEREXPOSED = "overexposed"
    LOW_CONTRAST = "low contrast"
    CLIPPED = "overexposed or underexposed"
    """More of the frame clipped than its golden image (or the calibration frames)."""
    OCCLUDED_MIDTONES = "occluded or not a board"
    """Mid-tones unlike the golden image's over much of the frame (``screens/exposure.py``)."""
    LIGHT_UNLIKE = "light unlike the golden image"
    """The photometric fit is outside the range the weights were validated for (``align/photometric.py``)."""
    HIDDEN = "hidden area"
    """Glare, a shadow or a hand over part of the board (``screens/hidden.py``)."""

    @property
    def camera(self) -> bool:
        """Whether it says the light or the camera changed: like a blank frame, such a refusal raises a critical drift
        alert at once (``AlertRouter.on_blank``); an occluder or a golden image that covers too little does not."""
        return self in _CAMERA


_CAMERA = frozenset(
    {
        RefusalKind.BLANK,
        RefusalKind.UNDEREXPOSED,
        RefusalKind.OVEREXPOSED,
        RefusalKind.LOW_CONTRAST,
        RefusalKind.CLIPPED,
        RefusalKind.LIGHT_UNLIKE,
    }
)


@dataclass(frozen=True)
class Refusal:
    """Why one frame was not inspected: ``kind``, the ``message`` a person reads (it names the frame and what to do),
    and the ``values`` measured (e.g. ``{"light": 0.25, "least": 0.6}``; empty where nothing was measured)."""

    kind: RefusalKind
    message: str
    values: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", RefusalKind(self.kind))
        object.__setattr__(self, "values", MappingProxyType({k: float(v) for k, v in self.values.items()}))
