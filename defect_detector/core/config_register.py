"""The ``register`` section of the config: how a golden image is registered into a frame and the golden check's limits.

The weights carry it (a training config's ``register`` section is stored in the checkpoint and in an artifact's meta),
so the golden check a model was validated with is the one ``predict`` applies. The limits' measures are defined in
``align/golden_check.py``.
"""

from __future__ import annotations

import math
import warnings
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from defect_detector.core.typed_yaml import Bool, Float, Int, Section, Share, check

warnings.filterwarnings("ignore", r'Field name "register" in "(Config|Limits)" shadows', UserWarning)
"""The ``register`` section of ``Config`` and of ``Limits`` shadows ``ABCMeta.register``, which pydantic warns of once per class;
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


LOCAL_PX, LOCAL_SHARE = 8.0, 0.005
"""Without ``register.max_local``: the grid may add the larger of 8 px and 0.5% of the frame's half-diagonal (measured
under the capture model: up to 7.4 px on a 4224x2816 photograph with a lens k1 of 0.014, 6.3 px on 1920x1280)."""

MAX_SHIFT_SHARE = 0.1
"""Without ``register.max_shift``, a board may sit this share of the frame's longer side off its golden image's place:
a board placed by hand or on a conveyor without a fixture."""


class RegisterConfig(Section):
    """Registration settings (config section ``register``). ``min_score``: lowest acceptable registration score (the ZNCC
    of the registered golden image and the frame, ``registration.score``; not the golden check). ``max_shift``
    (image px, reference centre from image centre) / ``max_angle`` (degrees): the motion the fixture allows.
    ``max_shift`` None: :data:`MAX_SHIFT_SHARE` of the frame's longer side (:meth:`shift_limit`). ``model``: the richest
    global model fitted (rigid, similarity, affine, homography; ``align/register_fit.py``), each richer one (and the local
    part) kept only where it raises the registration score by ``model_gain``, or takes ``model_share`` off what is left
    of it (``1 - score``: a photograph's large plain areas keep its score near 1 however misregistered its detail is).
    ``local``: add a radial lens term and a smooth grid of local displacements where the homography leaves more than
    ``grid_min`` px somewhere (lens distortion, a bowed board: ``align/local_grid.py``) and the global fit scores
    ``local_min_score`` or more (a golden image of another board fits its grid to what it is not), nodes ``grid_step`` golden-image
    px apart, ``grid_rounds`` rounds at most; ``max_local``: the largest local displacement (frame px) the grid may add,
    more is refused as bent (the bend beyond a shift, a scale and the lens); ``max_residual``: the most the whole
    mapping may leave unexplained (frame px, read where neighbouring nodes agree, across the edges each window's
    structure determines), more is refused as bent or moved.
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
    max_shift: Annotated[Float, Field(gt=0, description="pixels; null: 10% of the frame's longer side")] | None = None
    max_angle: Annotated[Float, Field(gt=0, le=180, description="degrees")] = 5.0
    model: Literal["rigid", "similarity", "affine", "homography"] = "homography"
    model_gain: Annotated[Float, Field(ge=0, le=1)] = 0.001
    model_share: Share = 0.1
    local: Bool = True
    local_min_score: Annotated[Float, Field(ge=-1, le=1)] = 0.6
    grid_step: Annotated[Float, Field(ge=16, description="golden-image pixels")] = 96.0
    grid_min: Annotated[Float, Field(gt=0, description="pixels")] = 0.4
    grid_rounds: Annotated[Int, Field(ge=1)] = 6
    max_local: Annotated[Float, Field(gt=0, description="pixels; null: the larger of 8 px and 0.5% of the half-diagonal")] | None = None
    max_residual: Annotated[Float, Field(gt=0, description="pixels")] = 8.0
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

    def better(self, score: float, than: float) -> bool:
        """Whether a richer model's registration ``score`` is worth keeping over ``than`` (``model_gain``, ``model_share``)."""
        return score >= than + self.model_gain or (score > than and 1 - score <= (1 - than) * (1 - self.model_share))

    def local_limit(self, frame_shape: tuple[int, ...]) -> float:
        """The largest local displacement (px) the grid may add in a frame of ``frame_shape`` ``(H, W)``: ``max_local``,
        or the larger of :data:`LOCAL_PX` and :data:`LOCAL_SHARE` of its half-diagonal (a lens term the homography
        shares leaves the grid more on a larger frame)."""
        if self.max_local is not None:
            return self.max_local
        return max(LOCAL_PX, LOCAL_SHARE * math.hypot(*frame_shape[:2]) / 2)

    def shift_limit(self, frame_shape: tuple[int, ...]) -> float:
        """The largest move (px) of a frame of ``frame_shape`` ``(H, W)``: ``max_shift``, or :data:`MAX_SHIFT_SHARE` of
        its longer side."""
        return self.max_shift if self.max_shift is not None else MAX_SHIFT_SHARE * float(max(frame_shape[:2], default=0))

    @model_validator(mode="after")
    def _check_values(self) -> RegisterConfig:
        finest = self.scale * 2 ** (self.levels - 1)
        check(finest <= 1, "levels", "must keep the finest scale (scale * 2**(levels - 1)) <= 1", self.levels)
        return self
