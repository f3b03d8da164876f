"""The frame record and the stage: what the frame path hands from stage to stage, and what a stage is.

A frame goes through an ordered list of stages (``inspect/prepare.py`` ``STAGES``, declared once). Each stage is a
function ``(context, record) -> record`` owned by the room whose measure it is (a screen in ``screens/``, registration
and the fits in ``align/``, the design and the plan in ``inspect/``): it returns a new :class:`Prepared` record, or the
record refused with a typed :class:`~defect_detector.core.refusal.Refusal`. The record lives here, below every room,
so each room's stage can read and hand it on without importing the frame path; the fields that hold another room's
objects are typed ``Any`` here and name their type in the docstring.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from defect_detector.core.frame import Frame
from defect_detector.core.limits import Limits
from defect_detector.core.refusal import Refusal, RefusalKind
from defect_detector.core.types import TileRecord


@dataclass(frozen=True)
class Prepared:
    """What the stages made of one frame (immutable; each stage hands on a new one).

    ``frame``: the frame (``image`` None when it could not be read). ``levels``: float64 ``[4]`` gray levels
    (``screens/blank.py``), None for an unreadable frame. ``refusal``: why it is not inspected, None when it is ready for
    the model. ``design``: its golden image (``inspect/designs.py`` ``Design``: key, name), None without one;
    ``golden_name``: the file name of its golden image (the key for pixels given). ``design_warning``: the golden image
    looks unlike the model's training images (a warning, never a refusal), else None; ``design_taught``: the weights were
    taught it. ``registration``: how its golden image sat in the frame (``align/register.py`` ``Registration``: mapping,
    score, golden check, photometric fit), None for a single-image model or a frame refused before. ``golden``: uint8
    ``[H, W]`` its golden image registered into the frame's pixels at the frame's levels, ``covered`` bool ``[H, W]``
    where that has data, within ``area`` (bool ``[H, W]``: its design's inspection area in the frame,
    ``align/inspection_area.py``; None: the whole frame). ``view``: the frame in its golden image's pixels when the model
    sees it there (``align/golden_view.py`` ``GoldenView``; ``plan`` and the detections' letterbox record are then the
    golden view's), else None. ``plan``: its tile plan (None: letterboxed whole). ``hidden``: its largest hidden region
    (``screens/hidden.py`` ``HiddenArea``), None when none or not screened. ``working_scale``: its design shows this many
    times coarser than the weights were validated at, so it is planned at ``pixel_scale / working_scale``
    (``inspect/design_scale.py``; 1.0: as given); ``scale_warning``: its design's features are finer than validated (one
    line, also joined into ``design_warning``, which carries it to the station), else None.

    Between stages only (cleared once the frame is prepared): ``given``, the golden image given with the frame (gray;
    None: its references' one); ``matched``, the registered golden image at the frame's levels (the photometric fit);
    ``captured``, the registered golden image as captured, once ``golden`` is the matched one; ``found``, the frame's
    design and golden image name when the caller already found them (the design stage then looks nothing up);
    ``mismatch``, the golden check's refusal of a golden image registration found on the board, which the hidden-area
    screen decides (hidden area may explain it: ``screens/hidden.py``)."""

    frame: Frame
    levels: np.ndarray | None = field(default=None, repr=False)
    refusal: Refusal | None = None
    design: Any = None
    golden_name: str | None = None
    design_warning: str | None = None
    design_taught: bool = False
    registration: Any = None
    golden: np.ndarray | None = field(default=None, repr=False)
    covered: np.ndarray | None = field(default=None, repr=False)
    area: np.ndarray | None = field(default=None, repr=False)
    view: Any = field(default=None, repr=False)
    plan: TileRecord | None = None
    hidden: Any = None
    working_scale: float = 1.0
    scale_warning: str | None = None
    given: np.ndarray | None = field(default=None, repr=False, compare=False)
    matched: np.ndarray | None = field(default=None, repr=False, compare=False)
    captured: np.ndarray | None = field(default=None, repr=False, compare=False)
    found: Any = field(default=None, repr=False, compare=False)
    mismatch: Refusal | None = field(default=None, repr=False, compare=False)

    @property
    def refused(self) -> bool:
        """A stage refused the frame (unreadable, blank, no usable golden image, exposure, coverage, hidden)."""
        return self.refusal is not None

    @property
    def golden_key(self) -> str | None:
        """The fingerprint of its golden image's pixels (None without one)."""
        return self.design.key if self.design is not None else None

    def refuse(self, kind: RefusalKind, message: str, values: dict[str, float] | None = None) -> Prepared:
        """This record, refused."""
        return dataclasses.replace(self, refusal=Refusal(kind, message, values or {}))


class StageContext(Protocol):
    """What a stage reads besides the record: the run's settings (``inspect/prepare.py`` ``Prepare`` holds them).

    ``calibration``: the calibration frames' levels a single-image model's frame is read against (``screens/frame.py``
    ``calibration_levels``; None: absolute limits only). ``screen_hidden``: refuse frames with hidden area (False: the
    largest region is still measured and kept). ``align``: register the golden image (False: it is given aligned).
    ``golden_view``: the model sees the frame in its golden image's pixels. ``designs``: the run's designs
    (``inspect/designs.py`` ``Designs``: ``register(design, image, file_name, align)``), None for a single-image model."""

    calibration: dict[str, Any] | None
    screen_hidden: bool
    align: bool
    golden_view: bool
    designs: Any

    def limits_for(self, key: str | None) -> Limits:
        """The limits a frame of the design keyed ``key`` is judged by (None: no golden image)."""
        ...

    def area_of(self, key: str) -> Any:
        """The inspection area (``align/inspection_area.py``) the weights store for design ``key``, else None."""
        ...


@dataclass(frozen=True)
class Stage:
    """One stage of the frame path: its ``name`` and ``run``: ``(context, record) -> record``, refused or handed on.
    Its ``owner`` is the module that defines ``run``: the room whose measure the stage is."""

    name: str
    run: Callable[[StageContext, Prepared], Prepared]

    @property
    def owner(self) -> str:
        """The module that owns the stage, as ``room/module.py``."""
        return self.run.__module__.removeprefix("defect_detector.").replace(".", "/") + ".py"
