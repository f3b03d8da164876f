"""Reference registration: align a golden board (the reference) with an inspected frame.

Inputs are grayscale uint8 ``[H, W]``; sizes may differ, pixel scale may not (the motion is rigid). Output: the
reference warped into the image's pixel frame (uint8 ``[H_img, W_img]``, exposed border 114, the letterbox pad
value) and a :class:`Registration` whose float64 2x3 ``matrix`` maps reference pixels to image pixels (pixel
centres at integers, as ``cv2.warpAffine``). Method, on a pyramid (default 1/4 then 1/2 resolution):
``cv2.phaseCorrelate`` (Hanning window) corrects the seed's translation at the coarsest level, the better
scoring of seed and corrected seed is refined by inverse-compositional Gauss-Newton per level (gain/offset
normalised over the overlap as in ECC, Huber-clipped residuals so defects pull less), and the refinement is
kept only if it scores higher. ``cv2.findTransformECC`` measured 5-6 ms at 1/4 and ~20 ms at 1/2 resolution
on 2 threads (it recomputes gradients each iteration); here the reference's gradients are computed once.
``score``: ZNCC in [-1, 1] of warped reference vs image over the overlap, at the finest level. ``spread``,
``tracks``, ``slivers``, ``missing``: the golden check (``align/golden_check.py``), how the differences of the two spread over the
frame at full resolution (``difference``, their differing share, is kept for the record): registration finds where a
golden image fits best, the check says whether it shows this frame's design. A reference that does not fit comes
back with ``ok=False`` and a ``reason``; only malformed inputs raise ``ValueError``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field, replace
from typing import Any

import cv2
import numpy as np

from defect_detector.align.golden_check import (
    BLANK,
    OCCLUDED_REGION,
    GoldenSide,
    Structure,
    compare,
    covered_area,
    differing,
    golden_side,
    structure,
    unlike_region,
)
from defect_detector.align.local_grid import LevelPair, Residual, fit_local, refine_local, residual
from defect_detector.align.mapping import Mapping, identity_mapping
from defect_detector.align.photometric import Photometric
from defect_detector.align.register_fit import FramePyramid, PreparedReference, Scored, blurred, estimate, residual_motion
from defect_detector.align.sharpness import blur_words
from defect_detector.core.config_register import RegisterConfig
from defect_detector.core.constants import PAD_VALUE
from defect_detector.core.devices import one_blas_thread
from defect_detector.core.errors import ReferenceError
from defect_detector.core.frame_record import Prepared, StageContext
from defect_detector.core.refusal import Refusal, RefusalKind

FILL_VALUE = PAD_VALUE  # the letterbox pad value: "no data"
log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class Registration:
    """How a reference sits in an image's frame. ``mapping``: reference px -> image px (``align/mapping.py``: a
    homography, a lens term and a local grid; :attr:`matrix` its affine part, what a person reads). ``score``: ZNCC in
    [-1, 1] over the overlap. ``ok``: score, motion, overlap and local residual within the config, else
    ``reason`` says why not. ``shift_px``: image px from the image centre to the mapped reference centre.
    ``angle_deg``: ``atan2(m10, m00)``, y down (``cv2.getRotationMatrix2D(c, a, 1)`` gives ``-a``). ``overlap``:
    fraction of the image covered. ``reused``: :class:`Registrar`'s cached matrix (nothing was estimated).
    ``difference``: the share of the covered area that differs, for the record; ``spread``: the share of its
    cells that thick differences touch; ``tracks``: long thick differences per 640x640 px; ``regions``: separate places
    of thick differences per 640x640 px; ``slivers``: the share of its cells only thin differences touch; ``missing``:
    whole features of the golden image missing from the frame per 640x640 px (the golden check,
    ``align/golden_check.py``: spread, tracks, slivers and missing decide).
    ``reference_shape``: ``(H, W)`` of the reference (None when unknown), for :meth:`covered`."""

    mapping: Mapping
    score: float
    ok: bool
    shift_px: float
    angle_deg: float
    overlap: float
    reused: bool = False
    reason: str = ""
    difference: float = 0.0
    spread: float = 0.0
    tracks: float = 0.0
    regions: float = 0.0
    slivers: float = 0.0
    missing: float = 0.0
    reference_shape: tuple[int, int] | None = None
    kind: RefusalKind | None = None
    """Why it was refused (None when ``ok``): ``OCCLUDED_BOARD`` when the golden check found one region unlike the golden
    image (a hand, a cloth, a label), not another design spread over the board; ``OUT_OF_FIXTURE`` for a move beyond the
    fixture's limits; ``BENT`` for a local residual beyond ``register.max_local``; else ``REFERENCE_MISMATCH``."""
    residual: Residual = Residual()
    """What the mapping leaves unexplained (``align/local_grid.py``), frame px, place in frame px; zero when not read
    (a mapping reused, a pair taken as given)."""
    photometric: Photometric | None = None
    """The golden image's levels fitted to the frame's (``align/photometric.py``), set by the prepare stage; None before."""
    covered_mask: np.ndarray | None = field(default=None, repr=False, compare=False)
    """bool ``[H, W]``: :meth:`covered` of the frame the golden check ran on, kept so that it is computed once per frame
    (a warp and an erosion of the frame's size: 1.7 ms at 640x640, 6.8 ms at 2048x1536); None when not computed."""

    @property
    def matrix(self) -> np.ndarray:
        """float64 ``[2, 3]``: the mapping's affine part at the golden image's centre (``Mapping.affine``; exact for an
        affine mapping)."""
        return self.mapping.affine

    def geometry(self) -> dict[str, Any]:
        """The record's geometric fields: ``model`` (``Mapping.model``), ``scale``, ``perspective`` (frame px the
        homography moves the golden image's corners from its affine part), ``lens`` (the radial term's ``k1``, 0 without
        one), ``grid`` (the largest local displacement the grid adds, frame px) and ``local`` (the residual the mapping
        leaves unexplained: ``largest`` and ``median`` frame px)."""
        return {
            "model": self.mapping.model,
            "scale": round(self.mapping.scale, 5),
            "perspective": round(self.mapping.perspective_px, 2),
            "lens": round(self.mapping.lens.k1, 5) if self.mapping.lens is not None else 0.0,
            "grid": round(self.mapping.local_px(self.residual.read)[0], 2),
            "local": {"largest": round(self.residual.largest, 2), "median": round(self.residual.median, 2)},
        }

    def covered(self, frame_shape: tuple[int, int]) -> np.ndarray:
        """bool ``[H, W]`` of a ``frame_shape`` frame: where the registered reference has data (a 3 px border off its
        edge; ``golden_check.covered_area``); all of the frame when the reference's shape is unknown."""
        if self.reference_shape is None:
            return np.ones(frame_shape[:2], bool)
        if self.covered_mask is not None and self.covered_mask.shape == tuple(frame_shape[:2]):
            return self.covered_mask
        return covered_area(self.mapping, frame_shape[:2])


def matrix_to_shift_angle(matrix: np.ndarray, reference_shape: tuple[int, int], image_shape: tuple[int, int]) -> tuple[float, float]:
    """``(shift_px, angle_deg)`` of a 2x3 (or a 3x3 homography's affine part) reference -> image matrix: the distance from
    the image centre to the mapped reference centre, and ``atan2(m10, m00)`` in degrees (image axes, y down). Shapes are
    ``(H, W)``."""
    m = Mapping(np.asarray(matrix, dtype=np.float64), reference_shape).affine
    centre = m @ np.array([(reference_shape[1] - 1) / 2, (reference_shape[0] - 1) / 2, 1.0])
    shift = math.hypot(centre[0] - (image_shape[1] - 1) / 2, centre[1] - (image_shape[0] - 1) / 2)
    return shift, math.degrees(math.atan2(m[1, 0], m[0, 0]))


def _check_gray(name: str, array: object) -> np.ndarray:
    if not isinstance(array, np.ndarray) or array.dtype != np.uint8 or array.ndim != 2 or array.size == 0:
        got = f"{array.dtype} array of shape {array.shape}" if isinstance(array, np.ndarray) else type(array).__name__
        raise ValueError(f"{name}: expected a non-empty uint8 [H, W] grayscale array, got {got}")
    return np.ascontiguousarray(array)


def _reason(
    blank: list[str], scored: Scored, reg: Registration, shape: tuple[int, ...], cfg: RegisterConfig
) -> tuple[str, RefusalKind | None]:
    """Why a registration into a frame of ``shape`` does not fit (``("", None)`` when it does) and the refusal's kind, what
    was measured first and the key second; the golden check comes after (:func:`_checked`)."""
    shift, angle = reg.shift_px, reg.angle_deg
    unexplained, (bend, bend_x, bend_y) = reg.residual, _bend(reg.mapping, reg.residual.read)
    limit = cfg.shift_limit(shape)
    mismatch, fixture = RefusalKind.REFERENCE_MISMATCH, RefusalKind.OUT_OF_FIXTURE
    checks = (
        (not blank, " and ".join(f"{'golden image' if b == 'reference' else 'frame'} is blank (one grey level)" for b in blank), mismatch),
        (
            scored.score >= cfg.min_score,
            "golden image does not match this board: registration score (ZNCC) "
            f"{scored.score:.2f} (needs {cfg.min_score:.2f}; register.min_score)",
            mismatch,
        ),
        (
            shift <= limit,
            f"board is {shift:.0f} px off the golden image's position (at most {limit:.0f} px; register.max_shift): "
            "check how the board sits in the fixture",
            fixture,
        ),
        (
            abs(angle) <= cfg.max_angle,
            f"board is turned {abs(angle):.1f} degrees against the golden image (at most {cfg.max_angle:g}; register.max_angle): "
            "check how the board sits in the fixture",
            fixture,
        ),
        (
            scored.overlap >= cfg.min_overlap,
            f"golden image covers only {scored.overlap:.0%} of the frame (needs {cfg.min_overlap:.0%}; register.min_overlap): "
            "board partly out of view, or a cropped golden image",
            mismatch,
        ),
        (
            bend <= cfg.local_limit(shape),
            f"the board is bent against the golden image: {bend:.0f} px off its plane near x {bend_x:.0f}, y {bend_y:.0f} "
            f"(at most {cfg.local_limit(shape):.0f} px; register.max_local): check that the board lies flat",
            RefusalKind.BENT,
        ),
        (
            unexplained.determined <= cfg.max_residual,
            f"the board is bent or moved against the golden image: {unexplained.determined:.0f} px unexplained near x "
            f"{unexplained.x:.0f}, y {unexplained.y:.0f} (at most {cfg.max_residual:g} px; register.max_residual): "
            "check that the board lies flat and still",
            RefusalKind.BENT,
        ),
    )
    return next(((why, kind) for ok, why, kind in checks if not ok), ("", None))


def _bend(mapping: Mapping, read: np.ndarray | None) -> tuple[float, float, float]:
    """``(px, x, y)``: the local grid's largest bend at the nodes ``read`` (:meth:`Mapping.bend`) and where its node lands
    in the frame (frame px); ``(0, nan, nan)`` without a grid."""
    if mapping.grid is None:
        return 0.0, math.nan, math.nan
    norms = mapping.bend(read)
    i, j = np.unravel_index(int(np.argmax(norms)), norms.shape)
    xs, ys = mapping.nodes.positions()
    qx, qy = mapping.to_frame(np.array(xs[i, j]), np.array(ys[i, j]))
    return float(norms[i, j]), float(qx), float(qy)


def _size_reason(reference_shape: tuple[int, ...], image_shape: tuple[int, ...], cfg: RegisterConfig) -> str:
    """Why a golden image of ``reference_shape`` cannot be the frame's at its scale ("" when it can)."""
    limit = 2 * cfg.shift_limit(image_shape)
    if max(abs(a - b) for a, b in zip(reference_shape, image_shape)) <= limit:
        return ""
    return (
        f"golden image is {reference_shape[1]}x{reference_shape[0]} px, the frame {image_shape[1]}x{image_shape[0]} px: not captured at "
        f"the frame's scale (sides may differ by {limit:.0f} px, 2 x register.max_shift)"
    )


def _with_blur(reason: str, image: np.ndarray, reference: np.ndarray) -> str:
    """``reason`` led by the blur when the frame is blurred against its golden image (``align/sharpness.py``): a
    blurred frame fails to match for that reason, not because it shows another board."""
    blur = blur_words(image, reference) if reason else ""
    return f"{blur}; {reason}" if blur else reason


def _refusal(found: Structure, region: float, cfg: RegisterConfig) -> str:
    """Why a golden image whose differences have the :class:`Structure` ``found`` is refused ("" when it is not);
    ``region``: :func:`unlike_region`'s share (an occluder from :data:`OCCLUDED_REGION` up)."""
    if not found.another_design(cfg.max_spread, cfg.max_tracks, cfg.max_slivers, cfg.max_missing):
        return ""
    measured = (
        f"thick differences in {found.spread:.0%} of the board's cells, at most {cfg.max_spread:.0%} (register.max_spread); "
        f"{found.tracks:.1f} long ones per 640x640 px, at most {cfg.max_tracks:g} (register.max_tracks); "
        f"slivers alone in {found.slivers:.0%} of the cells, at most {cfg.max_slivers:.0%} (register.max_slivers); "
        f"{found.missing:.1f} whole pads or holes of the golden image missing per 640x640 px, "
        f"at most {cfg.max_missing:g} (register.max_missing)"
    )
    if region >= OCCLUDED_REGION:
        return (
            f"occluded or not this board: {region:.0%} of the frame unlike the golden image in one region ({measured}): "
            "a hand, a cloth or a label in view?"
        )
    return (
        "golden image shows another design, another board or another scale: it differs from the frame along tracks and pads "
        f"spread over the board ({measured})"
    )


def _checked(  # noqa: PLR0913 - the pair, the config, and the golden side to reuse or keep
    reg: Registration,
    warped: np.ndarray,
    image: np.ndarray,
    reference: np.ndarray,
    cfg: RegisterConfig,
    side: GoldenSide | None = None,
    keep: bool = False,
) -> tuple[Registration, GoldenSide | None]:
    """``reg`` with the golden check's measures and the golden image's shape, refused (``ok`` False, ``reason``) when
    the golden image (``reference``, unwarped; ``warped`` uint8 ``[H, W]`` registered into the frame ``image``) does not
    show the frame's design at its scale; and the check's golden side (``golden_check.GoldenSide`` of ``warped`` within
    ``reg``'s covered area), None when none was used. ``side``: the golden side prepared for ``warped`` and
    ``reg.covered_mask`` on an earlier frame (used when it is that mask's); ``keep``: else prepare one (for the frames
    after), where without it the check of this one frame keeps nothing (``golden_check.differing``)."""
    reg = replace(reg, reference_shape=(int(reference.shape[0]), int(reference.shape[1])))
    if not reg.ok:
        return reg, side
    reason = _size_reason(reference.shape, image.shape, cfg)
    found, region = BLANK, 0.0
    if not reason:
        if reg.covered_mask is None or reg.covered_mask.shape != image.shape:  # a mask is always its own matrix's
            reg = replace(reg, covered_mask=covered_area(reg.mapping, image.shape))
        if side is None or side.valid is not reg.covered_mask:
            side = golden_side(warped, reg.covered_mask) if keep else None
        difference = compare(side, image) if side is not None else differing(warped, image, reg.covered_mask)
        differs, valid = difference.differs, difference.valid
        found = structure(*difference)
        refused = found.another_design(cfg.max_spread, cfg.max_tracks, cfg.max_slivers, cfg.max_missing)
        region = unlike_region(differs, valid) if differs is not None and refused else 0.0
        reason = _refusal(found, region, cfg) if differs is not None else "golden image or frame is blank over the covered area"
        reason = _with_blur(reason, image, reference)
    kind = (RefusalKind.OCCLUDED_BOARD if region >= OCCLUDED_REGION else RefusalKind.REFERENCE_MISMATCH) if reason else None
    checked = replace(reg, **dataclasses.asdict(found), ok=not reason, reason=reason, kind=kind)
    return checked, side


def check_pair(reference: np.ndarray, image: np.ndarray, cfg: RegisterConfig | None = None) -> Registration:
    """The golden check of a pair used as given (already aligned, no registration: ``--no-register``, training pairs
    taken as aligned): the identity :class:`Registration` with its ``difference``, ``ok`` False with a ``reason`` when
    the golden image is blank, of another size or shows another design."""
    return _check_given(reference, image, cfg or RegisterConfig(), None)[0]


def _check_given(
    reference: np.ndarray, image: np.ndarray, cfg: RegisterConfig, side: GoldenSide | None
) -> tuple[Registration, GoldenSide | None]:
    """:func:`check_pair`, reusing ``side`` (the golden side of ``reference`` as given, from an earlier frame of its
    shape); also returns the golden side it used."""
    reference, image = _check_gray("reference", reference), _check_gray("image", image)
    identity = identity_mapping(reference.shape)
    if reference.shape != image.shape:
        reason = (
            f"golden image is {reference.shape[1]}x{reference.shape[0]} px, the frame {image.shape[1]}x{image.shape[0]} px: "
            "not aligned as given (register it)"
        )
        refused = Registration(identity, 0.0, False, 0.0, 0.0, 0.0, reason=reason, difference=1.0, spread=1.0, slivers=1.0)
        return replace(refused, kind=RefusalKind.REFERENCE_MISMATCH), side
    blank = [name for name, im in (("reference", reference), ("image", image)) if float(im.std()) < 1e-3]
    blank_reason = " and ".join(f"{'golden image' if b == 'reference' else 'frame'} is blank (one grey level)" for b in blank)
    covered = side.valid if side is not None and side.valid.shape == image.shape else None  # the identity's covered area
    kind = RefusalKind.REFERENCE_MISMATCH if blank else None
    reg = Registration(identity, 1.0, not blank, 0.0, 0.0, 1.0, reason=blank_reason, covered_mask=covered, kind=kind)
    return _checked(reg, reference, image, reference, cfg, side, keep=True)


def _seed(frame: FramePyramid, init: np.ndarray | Mapping | None) -> np.ndarray:
    """float64 3x3 seed: ``init``'s homography, or the golden image's centre on the frame's."""
    if isinstance(init, Mapping):
        return np.array(init.homography)
    if init is not None:
        init = np.asarray(init, dtype=np.float64)
        return init.copy() if init.shape == (3, 3) else np.vstack([init[:2], [0, 0, 1]])
    (h, w), (rh, rw) = frame.shape, frame.ref.image.shape
    return np.array([[1, 0, (w - rw) / 2], [0, 1, (h - rh) / 2], [0, 0, 1]], dtype=np.float64)


LOCAL_GAIN = 0.7
"""A lens term or grid is kept where it fits the finest level better (``RegisterConfig.better``), or where it leaves the
largest residual move that neighbouring nodes agree on (``Residual.coherent``) at most this share of what was left
before it, the score no lower: the ZNCC alone misses it where a photograph's plain background keeps it near 1 however
misregistered its board is."""

MAX_NODES = 400
"""The local grid's nodes are at least ``register.grid_step`` apart and at most this many over a golden image: a
4224x2816 px photograph gets 154 px between them (the dense solves stay under a second)."""


def _local(frame: FramePyramid, mapping: Mapping, scored: Scored, cfg: RegisterConfig) -> tuple[Mapping, Scored, Residual]:
    """``mapping`` (scoring ``scored`` on the finest level) with the lens term and the local grid of
    ``align/local_grid.py`` where the board needs them: neighbouring nodes read over ``register.grid_min`` px off, and
    the fitted part fits better or takes the residual down (:data:`LOCAL_GAIN`; the lens term alone, then with the
    grid, each kept where it improves on the last kept); the homography alone elsewhere. Also returns the chosen
    mapping's :class:`Scored` and the :class:`Residual` it leaves (frame px; zero when nothing was read)."""
    if not cfg.local or scored.score < cfg.local_min_score:
        return mapping, scored, Residual()
    k = len(frame.levels) - 1
    level = frame.level_mapping(mapping, k)
    pair = LevelPair(frame.ref.templates[k].t, blurred(frame.levels[k], cfg.blur))
    factor = frame.ref.levels[k].shape[1] / frame.ref.image.shape[1]
    h, w = frame.ref.image.shape
    step = max(cfg.grid_step, math.sqrt(h * w / MAX_NODES)) * factor
    left = residual(pair, level, step)
    chosen = (level, scored)
    if level.is_homography and left.coherent > cfg.grid_min * factor:
        bound = 2 * cfg.local_limit(frame.shape) * factor
        fitted = fit_local(pair, level, step, cfg.grid_rounds, cfg.eps * factor, bound)
        fitted = refine_local(pair, fitted, cfg.grid_rounds, cfg.eps * factor, bound)
        for candidate in (fitted.with_local(fitted.lens, None, None), fitted):
            after = residual(pair, candidate, step)
            score = Scored(frame.ref.levels_f[k], candidate, frame.levels[k])
            gained = after.coherent <= LOCAL_GAIN * left.coherent and score.score >= chosen[1].score
            if gained or cfg.better(score.score, chosen[1].score):
                chosen, left = (candidate, score), after
    full = frame.full_mapping(chosen[0], k)
    gx, gy = frame.golden_full(left.x, left.y, k)
    x, y = full.to_frame(np.array(gx), np.array(gy))
    return full, chosen[1], left.scaled(1 / factor, (float(x), float(y)))


def _register(
    frame: FramePyramid, cfg: RegisterConfig, init: np.ndarray | Mapping | None
) -> tuple[np.ndarray, Registration, GoldenSide | None, Scored]:
    """:func:`register` on a prepared frame; also returns the golden check's golden side and the finest level's
    :class:`Scored` (for reuse)."""
    ref, shape = frame.ref, frame.shape
    m3 = _seed(frame, init)
    blank = [name for name, level in (("reference", ref.levels[0]), ("image", frame.levels[0])) if cv2.meanStdDev(level)[1][0, 0] < 1e-3]
    fine = len(frame.levels) - 1
    candidates = [m3] if blank else estimate(frame, m3, cfg)
    scores = [Scored(ref.levels_f[fine], frame.down(m, fine), frame.levels[fine]) for m in candidates]
    scored = max(scores, key=lambda c: c.score)  # measure, then choose (a large defect on a sparse board can mislead)
    mapping = Mapping(candidates[scores.index(scored)], ref.image.shape)
    left = Residual()
    if not blank and scored.score >= cfg.min_score:
        mapping, scored, left = _local(frame, mapping, scored, cfg)
    shift, angle = matrix_to_shift_angle(mapping.affine, ref.image.shape, shape)
    reg = Registration(mapping, scored.score, True, shift, angle, scored.overlap, reference_shape=ref.image.shape, residual=left)
    reason, kind = _reason(blank, scored, reg, shape, cfg)
    reason = reason if blank else _with_blur(reason, frame.image, ref.image)
    reg = replace(reg, ok=not reason, reason=reason, kind=kind)
    warped = cv2.convertScaleAbs(mapping.golden_into_frame(ref.image_f, shape, cv2.INTER_LINEAR, FILL_VALUE))
    return (warped, *_checked(reg, warped, frame.image, ref.image, cfg), scored)


def register(
    reference: np.ndarray, image: np.ndarray, cfg: RegisterConfig | None = None, init: np.ndarray | None = None
) -> tuple[np.ndarray, Registration]:
    """Warp ``reference`` (uint8 [H_ref, W_ref]) into the frame of ``image`` (uint8 [H, W]); ``init``: a 2x3 reference
    -> image seed (default: centre on centre). Returns (warped uint8 [H, W], border 114; :class:`Registration`).
    Raises ``ValueError`` for malformed inputs (not 2-D uint8, empty, too small) or a bad config, never for a misfit."""
    cfg = cfg or RegisterConfig()
    reference, image = _check_gray("reference", reference), _check_gray("image", image)
    if init is not None and np.shape(init) not in ((2, 3), (3, 3)):
        raise ValueError(f"init: expected a 2x3 (or 3x3) matrix, got shape {np.shape(init)}")
    with one_blas_thread():
        warped, reg, _, _ = _register(FramePyramid(PreparedReference(reference, cfg), image, cfg), cfg, init)
    return warped, reg


class Registrar:
    """Registers frames against a fixed reference (or one per call), prepared once, reusing the last good matrix.

    With ``cfg.reuse`` a frame of the cached size is first checked: its score under the cached matrix (warped
    reference cached: a downscale and three dot products) must be >= ``max(min_score, cached - reuse_margin)``
    and one coarse Gauss-Newton step must move no reference corner over ``reuse_shift`` px; then the cached result
    returns with ``reused=True``. Else the frame is registered fully, seeded with the cached matrix. Only ``ok``
    results are cached.

    The golden check runs on every frame, but its golden side (``golden_check.GoldenSide``: the warped golden image at
    its two levels, their dilation and erosion, the covered cells, the golden image's whole features) depends only on
    the golden image and the matrix: it is kept with the cached matrix and reused while that matrix is (and, for
    :meth:`as_given`, once per frame shape). It is prepared on the matrix's first reuse, not with the matrix: a frame
    of a design met once (a new golden image every frame) is checked as before, keeping nothing. ``prepared`` counts the
    golden sides prepared."""

    def __init__(self, reference: np.ndarray | None = None, cfg: RegisterConfig | None = None) -> None:
        self.cfg = cfg or RegisterConfig()
        self._ref: PreparedReference | None = None
        self._cache: tuple[np.ndarray, Registration, GoldenSide | None, Scored] | None = None
        self._given: GoldenSide | None = None
        self.prepared = 0
        if reference is not None:
            self._set_reference(reference)

    def _set_reference(self, reference: np.ndarray) -> None:
        reference = _check_gray("reference", reference)
        held = self._ref
        if held is None or not (reference is held.image or (reference.shape == held.image.shape and np.array_equal(reference, held.image))):
            self._ref, self._cache, self._given = PreparedReference(reference.copy(), self.cfg), None, None

    @property
    def reference(self) -> np.ndarray | None:
        """The reference as given (uint8 ``[H, W]``, not warped), or None before one was given."""
        return self._ref.image if self._ref is not None else None

    def reset(self) -> None:
        """Forget the cached matrix: the next frame is registered fully."""
        self._cache = None

    def __call__(self, image: np.ndarray, reference: np.ndarray | None = None) -> tuple[np.ndarray, Registration]:
        """``(warped reference uint8 [H, W], Registration)`` for ``image`` (uint8 [H, W]); see :func:`register`."""
        with one_blas_thread():
            return self._registered(image, reference)

    def _registered(self, image: np.ndarray, reference: np.ndarray | None) -> tuple[np.ndarray, Registration]:
        if reference is not None:
            self._set_reference(reference)
        if self._ref is None:
            raise ValueError("Registrar: no reference (pass one to Registrar(...) or to this call)")
        frame = FramePyramid(self._ref, _check_gray("image", image), self.cfg)
        init = None
        if self._cache is not None and self._cache[0].shape == frame.shape:
            warped, reg, side, scored = self._cache
            init = reg.mapping
            score = self._reuse_score(frame, reg, scored) if self.cfg.reuse else None
            if score is not None:
                reused = replace(reg, score=score, reused=True)
                checked, used = _checked(reused, warped, frame.image, self._ref.image, self.cfg, side, keep=True)
                if used is not side:  # the matrix's first reuse: its golden side, kept with it
                    self.prepared += 1
                    self._cache = (warped, reg, used, scored)
                if checked.ok:  # the golden check runs on every frame: a cached matrix is no licence
                    return warped.copy(), checked
        warped, reg, side, scored = _register(frame, self.cfg, init)  # a new matrix: no golden side kept yet
        if reg.ok:
            self._cache = (warped, reg, side, scored)
        return warped.copy(), reg

    def as_given(self, image: np.ndarray) -> Registration:
        """:func:`check_pair` of the reference and ``image`` (uint8 ``[H, W]``, taken as aligned: no registration), the
        reference's golden side prepared once per frame shape. ``ValueError`` before a reference was given."""
        if self._ref is None:
            raise ValueError("Registrar: no reference (pass one to Registrar(...) or to __call__)")
        held = self._given
        reg, side = _check_given(self._ref.image, image, self.cfg, held)
        if side is not held:
            self._given, self.prepared = side, self.prepared + (side is not None)
        return reg

    def _reuse_score(self, frame: FramePyramid, reg: Registration, scored: Scored) -> float | None:
        """The frame's score under the cached matrix if that matrix still holds (see the class docstring), else None."""
        score, _ = scored.against(frame.levels[-1])
        if score < max(self.cfg.min_score, reg.score - self.cfg.reuse_margin):
            return None
        motion = residual_motion(frame, reg.mapping, self.cfg)
        return score if motion <= self.cfg.reuse_shift else None


SCALE_CHANGE = 0.1
"""A golden image refused as not matching whose sides both differ from the frame's by this share or more, by one
factor, is named as captured at another scale."""


def registration(context: StageContext, record: Prepared) -> Prepared:
    """The registration stage (golden-template models): ``record`` with its design's golden image registered into the
    frame (``context.designs.register``: the design's :class:`Registrar`, then the golden check), its covered area
    narrowed to the design's inspection area where the weights store one (``align/inspection_area.py``: the screens
    judge the board only, and calls off it are dropped). Refused when no golden image fits; a golden check refusal of
    a golden image registration found on the board is left pending (``record.mismatch``) for the hidden-area screen,
    which decides whether hidden area explains it (``screens/hidden.py``)."""
    if record.design is None:
        return record
    frame = record.frame
    try:
        golden, found = context.designs.register(record.design, frame.image, frame.file_name, context.align)
    except ReferenceError as exc:
        if exc.kind != RefusalKind.REFERENCE_MISMATCH:
            return record.refuse(exc.kind, str(exc))
        message = f"{exc}{_scale_hint(record.design.image.shape, frame.image.shape)}"
        if exc.registered is None:
            return record.refuse(exc.kind, message)
        golden, found = exc.registered
        record = dataclasses.replace(record, mismatch=Refusal(exc.kind, message, {}))
    return _covered(context, dataclasses.replace(record, golden=golden, registration=found))


def _covered(context: StageContext, record: Prepared) -> Prepared:
    """``record`` (registered) with ``covered``: where its registered golden image has data, within ``area``, its
    design's inspection area in the frame where the weights store one."""
    shape, found = record.frame.image.shape[:2], record.registration
    covered, area = found.covered(shape), context.area_of(record.design.key)
    if area is None or area.shape != record.design.image.shape:
        return dataclasses.replace(record, covered=covered, area=None)
    inside = area.in_frame(found.mapping, shape)
    return dataclasses.replace(record, covered=covered & inside, area=inside)


def _scale_hint(golden: tuple[int, ...], shape: tuple[int, ...]) -> str:
    """``"; the golden image is 1.50x the frame's size: captured at another scale?"`` when both sides of a golden image
    of shape ``golden`` differ from a frame of ``shape`` ``(H, W)`` by one factor, :data:`SCALE_CHANGE` or more; else
    ``""``."""
    high, wide = golden[0] / shape[0], golden[1] / shape[1]
    if abs(high / wide - 1.0) > SCALE_CHANGE / 2 or abs(high - 1.0) < SCALE_CHANGE:
        return ""
    return f"; the golden image is {(high * wide) ** 0.5:.2f}x the frame's size: captured at another scale?"
