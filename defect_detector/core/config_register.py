"""The ``register`` section of the config: how a golden image is registered into a frame and the golden check's limits.

The weights carry it (a training config's ``register`` section is stored in the checkpoint and in an artifact's meta),
so the golden check a model was validated with is the one ``predict`` applies. The limits' measures are defined in
``align/golden_check.py``.
"""

from __future__ import annotations

import warnings
from typing import Annotated, ClassVar

from pydantic import Field, model_validator

from defect_detector.core.typed_yaml import Bool, Float, Int, Section, Share, check

warnings.filterwarnings("ignore", r'Field name "register" in "Config" shadows', UserWarning)
"""The ``register`` section of ``Config`` shadows ``ABCMeta.register``, which pydantic warns of once per class;
neither is ever registered as a virtual subclass."""

MAX_SPREAD = 0.21
"""Largest share of the covered :data:`CELL_PX` cells that thick differences may touch: between the painted pairs'
0.175 and the 0.253 of the first wrong pair that has at most one track (module docstring)."""

MAX_SLIVERS = 0.2
"""Largest share of the covered :data:`CELL_PX` cells that differences thinner than :data:`THICK_PX` alone may touch:
a golden image a few pixels off leaves slivers along every edge (true pairs: at most 0.163; module docstring)."""

MAX_TRACKS = 1.5
"""Most tracks (thick differences :data:`TRACK_PX` px long or more) per :data:`REFERENCE_AREA` covered pixels: true
pairs show none, painted ones at most 1.01, wrong pairs under :data:`MAX_SPREAD` from 2.0 (or none at all)."""

MAX_MISSING = 2.0
"""Most whole features of the golden image (pads, holes, islands of :data:`FEATURE_PX` px or more, off the covered
area's edge) that may be missing from the frame, per :data:`REFERENCE_AREA`: a defect cuts, bridges or adds copper
but rarely removes a whole isolated feature; a golden image of another board shows pads and holes the board lacks
(true and painted DeepPCB pairs: at most 1; 31 of 114 neighbouring boards: 3 to 6; module docstring). Features cut
by the covered area's edge do not count: 3 true pairs miss 2 half pads there."""


class RegisterConfig(Section):
    """Registration settings (config section ``register``). ``min_score``: lowest acceptable registration score (the ZNCC
    of the registered golden image and the frame, ``registration.score``; not the golden check). ``max_shift``
    (image px, reference centre from image centre) / ``max_angle`` (degrees): the motion the fixture allows.
    ``min_overlap``: least fraction of the image the warped reference must cover. ``scale``: coarsest working
    scale; ``levels``: each twice the previous (the finest scores). ``iterations``/``eps`` (level px): Gauss-Newton
    stop. ``blur``: Gaussian sigma (level px). ``reuse``: :class:`Registrar` keeps its matrix while the score stays
    within ``reuse_margin`` of its own and one coarse Gauss-Newton step moves no corner over ``reuse_shift`` px.
    ``max_spread`` / ``max_tracks`` / ``max_slivers``: the golden check's limits (``align/golden_check.py``): the share
    of the board's cells thick differences may touch, the long thick differences allowed per 640x640 px, and the share
    of cells thin slivers alone may touch; ``max_missing``: the whole features of the golden image (pads, holes)
    allowed missing from the frame per 640x640 px. A golden image whose width or height
    differs from the frame's by more than ``2 * max_shift`` px was not captured at the frame's scale: refused.
    A bad value is a one-line ``ConfigError`` (a ``ValueError``) at construction: ``register.<field>: must be ..., got X``."""

    section: ClassVar[str] = "register"

    min_score: Annotated[Float, Field(ge=-1, le=1)] = 0.3
    max_shift: Annotated[Float, Field(gt=0, description="pixels")] = 64.0
    max_angle: Annotated[Float, Field(gt=0, le=180, description="degrees")] = 5.0
    min_overlap: Annotated[Float, Field(gt=0, le=1)] = 0.85
    scale: Annotated[Float, Field(gt=0, le=1)] = 0.25
    levels: Annotated[Int, Field(ge=1)] = 2
    iterations: Annotated[Int, Field(ge=1)] = 20
    eps: Annotated[Float, Field(gt=0, description="pixels")] = 0.02
    blur: Annotated[Float, Field(ge=0, description="0 = off")] = 1.0
    reuse: Bool = True
    reuse_margin: Annotated[Float, Field(ge=0, le=2)] = 0.05
    reuse_shift: Annotated[Float, Field(ge=0, description="pixels")] = 1.0
    max_spread: Share = MAX_SPREAD
    max_tracks: Annotated[Float, Field(ge=0, description="per 640x640 px")] = MAX_TRACKS
    max_slivers: Share = MAX_SLIVERS
    max_missing: Annotated[Float, Field(ge=0, description="per 640x640 px")] = MAX_MISSING

    @model_validator(mode="after")
    def _check_values(self) -> RegisterConfig:
        finest = self.scale * 2 ** (self.levels - 1)
        check(finest <= 1, "levels", "must keep the finest scale (scale * 2**(levels - 1)) <= 1", self.levels)
        return self
