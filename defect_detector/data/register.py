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
``score``: ZNCC in [-1, 1] of warped reference vs image over the overlap, at the finest level. ``difference``: the
golden check (``data/golden_check.py``), the share of the covered area where the two disagree beyond tolerance at
full resolution: registration finds where a golden image fits best, the check says whether it shows this frame's
design. A reference that does not fit comes back with ``ok=False`` and a ``reason``; only malformed inputs raise
``ValueError``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import cv2
import numpy as np

from defect_detector.core.constants import PAD_VALUE
from defect_detector.data.golden_check import MAX_DIFFERENCE, covered_area, difference

FILL_VALUE = PAD_VALUE  # the letterbox pad value: "no data"
_MIN_SIDE = 8  # smallest side (px) of the coarsest pyramid level
_MIN_VALID = 0.1  # Gauss-Newton stops when less of the reference than this still lands on the image
_HUBER = 0.5  # residuals (in standard deviations) are clipped to this: a defect pulls the fit less


@dataclass(frozen=True)
class RegisterConfig:
    """Registration settings (config section ``register``). ``min_score``: lowest acceptable ZNCC. ``max_shift``
    (image px, reference centre from image centre) / ``max_angle`` (degrees): the motion the fixture allows.
    ``min_overlap``: least fraction of the image the warped reference must cover. ``scale``: coarsest working
    scale; ``levels``: each twice the previous (the finest scores). ``iterations``/``eps`` (level px): Gauss-Newton
    stop. ``blur``: Gaussian sigma (level px). ``reuse``: :class:`Registrar` keeps its matrix while the score stays
    within ``reuse_margin`` of its own and one coarse Gauss-Newton step moves no corner over ``reuse_shift`` px.
    ``max_difference``: the golden check's limit (``data/golden_check.py``). A golden image whose width or height
    differs from the frame's by more than ``2 * max_shift`` px was not captured at the frame's scale: refused."""

    min_score: float = 0.3
    max_shift: float = 64.0
    max_angle: float = 5.0
    min_overlap: float = 0.85
    scale: float = 0.25
    levels: int = 2
    iterations: int = 20
    eps: float = 0.02
    blur: float = 1.0
    reuse: bool = True
    reuse_margin: float = 0.05
    reuse_shift: float = 1.0
    max_difference: float = MAX_DIFFERENCE

    def validate(self) -> RegisterConfig:
        """Raise ``ValueError("register.<field>: must be ..., got X")`` for the first bad field; return self."""
        checks = (
            ("min_score", -1.0 <= self.min_score <= 1.0, "must be in [-1, 1]"),
            ("max_shift", self.max_shift > 0, "must be > 0 (pixels)"),
            ("max_angle", 0 < self.max_angle <= 180, "must be in (0, 180] (degrees)"),
            ("min_overlap", 0 < self.min_overlap <= 1, "must be in (0, 1]"),
            ("scale", 0 < self.scale <= 1, "must be in (0, 1]"),
            ("levels", isinstance(self.levels, int) and self.levels >= 1, "must be an integer >= 1"),
            ("iterations", isinstance(self.iterations, int) and self.iterations >= 1, "must be an integer >= 1"),
            ("eps", self.eps > 0, "must be > 0 (pixels)"),
            ("blur", self.blur >= 0, "must be >= 0 (0 = off)"),
            ("reuse", isinstance(self.reuse, bool), "must be true or false"),
            ("reuse_margin", 0 <= self.reuse_margin <= 2, "must be in [0, 2]"),
            ("reuse_shift", self.reuse_shift >= 0, "must be >= 0 (pixels)"),
            ("max_difference", 0 <= self.max_difference <= 1, "must be in [0, 1]"),
        )
        for name, ok, what in checks:
            if not ok:
                raise ValueError(f"register.{name}: {what}, got {getattr(self, name)!r}")
        if self.scale * 2 ** (self.levels - 1) > 1:
            raise ValueError(f"register.levels: must keep the finest scale (scale * 2**(levels - 1)) <= 1, got {self.levels!r}")
        return self


@dataclass(frozen=True, eq=False)
class Registration:
    """How a reference sits in an image's frame. ``matrix``: float64 ``[2, 3]`` (read-only), reference px -> image
    px. ``score``: ZNCC in [-1, 1] over the overlap. ``ok``: score, motion and overlap within the config, else
    ``reason`` says why not. ``shift_px``: image px from the image centre to the mapped reference centre.
    ``angle_deg``: ``atan2(m10, m00)``, y down (``cv2.getRotationMatrix2D(c, a, 1)`` gives ``-a``). ``overlap``:
    fraction of the image covered. ``reused``: :class:`Registrar`'s cached matrix (nothing was estimated).
    ``difference``: the golden check, the share of the covered area that differs (``data/golden_check.py``)."""

    matrix: np.ndarray
    score: float
    ok: bool
    shift_px: float
    angle_deg: float
    overlap: float
    reused: bool = False
    reason: str = ""
    difference: float = 0.0


def matrix_to_shift_angle(matrix: np.ndarray, reference_shape: tuple[int, int], image_shape: tuple[int, int]) -> tuple[float, float]:
    """``(shift_px, angle_deg)`` of a 2x3 reference -> image matrix: the distance from the image centre to the
    mapped reference centre, and ``atan2(m10, m00)`` in degrees (image axes, y down). Shapes are ``(H, W)``."""
    m = np.asarray(matrix, dtype=np.float64).reshape(2, 3)
    centre = m @ np.array([(reference_shape[1] - 1) / 2, (reference_shape[0] - 1) / 2, 1.0])
    shift = math.hypot(centre[0] - (image_shape[1] - 1) / 2, centre[1] - (image_shape[0] - 1) / 2)
    return shift, math.degrees(math.atan2(m[1, 0], m[0, 0]))


def _check_gray(name: str, array: object) -> np.ndarray:
    if not isinstance(array, np.ndarray) or array.dtype != np.uint8 or array.ndim != 2 or array.size == 0:
        got = f"{array.dtype} array of shape {array.shape}" if isinstance(array, np.ndarray) else type(array).__name__
        raise ValueError(f"{name}: expected a non-empty uint8 [H, W] grayscale array, got {got}")
    return np.ascontiguousarray(array)


def _pyramid(image: np.ndarray, cfg: RegisterConfig, name: str) -> list[np.ndarray]:
    """uint8 levels, coarsest first; level k is ``round(side * scale * 2**k)`` px (INTER_AREA, finest first)."""
    h, w = image.shape
    sizes = [(round(w * cfg.scale * 2**k), round(h * cfg.scale * 2**k)) for k in range(cfg.levels)]
    if min(sizes[0]) < _MIN_SIDE:
        raise ValueError(f"{name}: {w}x{h} px is too small for register.scale {cfg.scale} (coarsest level under {_MIN_SIDE} px)")
    levels, src = [], image
    for size in reversed(sizes):
        src = src if src.shape[::-1] == size else cv2.resize(src, size, interpolation=cv2.INTER_AREA)
        levels.append(src)
    return levels[::-1]


def _to_level(level: np.ndarray, full_shape: tuple[int, ...]) -> np.ndarray:
    """3x3 map from full-resolution pixel coordinates to ``level``'s (pixel centres stay centres)."""
    sx, sy = level.shape[1] / full_shape[1], level.shape[0] / full_shape[0]
    return np.array([[sx, 0, (sx - 1) / 2], [0, sy, (sy - 1) / 2], [0, 0, 1]])


def _blurred(level: np.ndarray, blur: float) -> np.ndarray:
    """float32 copy of a uint8 level, Gaussian-blurred with sigma ``blur`` (level px; 0: not blurred)."""
    f = level.astype(np.float32)
    return cv2.GaussianBlur(f, (0, 0), blur) if blur > 0 else f


class _Template:
    """A reference level for inverse-compositional Gauss-Newton: blurred, zero-mean unit-variance ``t`` (float32
    [h, w]; ``flat``, ``flat2``: it and its square, flat), steepest-descent images ``sd`` (float32 [3, h*w]:
    rotation about the centre, x, y) and the inverse Hessian ``hinv`` (float64 [3, 3])."""

    def __init__(self, level: np.ndarray, blur: float) -> None:
        t = _blurred(level, blur)
        mean, std = cv2.meanStdDev(t)
        self.t = (t - np.float32(mean[0, 0])) / np.float32(max(std[0, 0], 1e-6))  # zero mean, unit variance
        self.flat = self.t.ravel()
        self.flat2 = self.flat * self.flat
        h, w = level.shape
        self.centre = ((w - 1) / 2, (h - 1) / 2)
        self.radius = math.hypot(w, h) / 2
        gx = cv2.Sobel(self.t, cv2.CV_32F, 1, 0, ksize=3, scale=1 / 8)
        gy = cv2.Sobel(self.t, cv2.CV_32F, 0, 1, ksize=3, scale=1 / 8)
        xs = np.arange(w, dtype=np.float32) - np.float32(self.centre[0])
        ys = np.arange(h, dtype=np.float32) - np.float32(self.centre[1])
        self.sd = np.empty((3, h * w), np.float32)
        self.sd[0] = (gy * xs[None, :] - gx * ys[:, None]).ravel()
        self.sd[1], self.sd[2] = gx.ravel(), gy.ravel()
        hessian = np.array([[float(self.sd[i] @ self.sd[j]) for j in range(3)] for i in range(3)])  # 9 dots beat a BLAS gemm here
        self.hinv = np.linalg.pinv(hessian)

    def inverse_step(self, dp: np.ndarray) -> np.ndarray:
        """3x3 inverse of the incremental warp ``x -> R(dp[0]) (x - centre) + centre + dp[1:]`` (level px)."""
        c, s = math.cos(dp[0]), math.sin(dp[0])
        cx, cy = self.centre
        return np.linalg.inv(np.array([[c, -s, cx - c * cx + s * cy + dp[1]], [s, c, cy - s * cx - c * cy + dp[2]], [0, 0, 1]]))


def _refine(tpl: _Template, image: np.ndarray, m3: np.ndarray, iterations: int, eps: float) -> np.ndarray:
    """``m3`` (3x3, reference level px -> image level px) refined so that ``image`` (float32 level) pulled into the
    reference frame matches ``tpl`` up to gain and offset over the overlap. Stops once an update moves no pixel by
    ``eps`` or more, or is not finite, or the overlap collapses (keeping the last estimate)."""
    h, w = tpl.t.shape
    for _ in range(iterations):
        pulled = cv2.warpAffine(image, m3[:2], (w, h), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP, borderValue=float("nan")).ravel()
        valid = (pulled == pulled).astype(np.float32)  # NaN != NaN: outside the image
        n = float(valid.sum())
        if n < _MIN_VALID * valid.size:
            break
        cv2.patchNaNs(pulled, 0)
        mean_p, mean_t = float(pulled.sum(dtype=np.float64)) / n, float(valid @ tpl.flat) / n
        var_p, var_t = float(pulled @ pulled) / n - mean_p**2, float(valid @ tpl.flat2) / n - mean_t**2
        gain = math.sqrt(max(var_t, 0.0) / var_p) if var_p > 1e-12 else 0.0
        err = (pulled - np.float32(mean_p)) * np.float32(gain) - (tpl.flat - np.float32(mean_t))
        np.clip(err, -_HUBER, _HUBER, out=err)  # Huber's influence function
        err *= valid
        dp = tpl.hinv @ (tpl.sd @ err).astype(np.float64)
        if not np.all(np.isfinite(dp)):
            break
        m3 = m3 @ tpl.inverse_step(dp)
        if abs(dp[0]) * tpl.radius + math.hypot(dp[1], dp[2]) < eps:
            break
    return m3


class _Scored:
    """A matrix's quality on one level: the float32 reference level warped into the image level's frame (flat,
    minus 128, 0 outside), the 0/1 mask it covers, its mean/std there, ``score``/``overlap`` against one image
    level; :meth:`against` scores another image level (uint8) with three dot products."""

    def __init__(self, ref_level: np.ndarray, m3: np.ndarray, image_level: np.ndarray) -> None:
        h, w = image_level.shape
        warped = cv2.warpAffine(ref_level, m3[:2], (w, h), flags=cv2.INTER_LINEAR, borderValue=float("nan")).ravel()
        self.valid = np.isfinite(warped).astype(np.float32)
        self.count = float(self.valid.sum())
        cv2.patchNaNs(warped, 128.0)
        self.warped = warped - np.float32(128.0)
        n = max(self.count, 1.0)
        self.mean = float(self.warped.sum(dtype=np.float64)) / n
        self.std = math.sqrt(max(float(self.warped @ self.warped) / n - self.mean**2, 0.0))
        self.score, self.overlap = self.against(image_level)

    def against(self, image_level: np.ndarray) -> tuple[float, float]:
        """``(zncc, overlap)`` against a uint8 image level of the warped size (zncc 0.0 when either side is blank)."""
        if self.count < 2:
            return 0.0, 0.0
        b = image_level.ravel().astype(np.float32) - np.float32(128.0)
        n = self.count
        mean_b = float(self.valid @ b) / n
        std_b = math.sqrt(max(float(self.valid @ (b * b)) / n - mean_b**2, 0.0))
        denom = self.std * std_b
        score = (float(self.warped @ b) / n - self.mean * mean_b) / denom if denom > 1e-3 else 0.0
        return min(max(score, -1.0), 1.0), n / self.valid.size


class _Reference:
    """A reference prepared once: uint8 and float32 copies, its pyramid and one :class:`_Template` per level."""

    def __init__(self, reference: np.ndarray, cfg: RegisterConfig) -> None:
        self.image = reference
        self.image_f = reference.astype(np.float32)  # OpenCV warps float32 about 2x faster than uint8 here
        self.levels = _pyramid(reference, cfg, "reference")
        self.levels_f = [level.astype(np.float32) for level in self.levels]
        self.templates = [_Template(level, cfg.blur) for level in self.levels]


class _Frame:
    """An image's pyramid against a prepared reference; converts 3x3 matrices between full resolution and level k."""

    def __init__(self, ref: _Reference, image: np.ndarray, cfg: RegisterConfig) -> None:
        self.ref, self.shape, self.image = ref, image.shape, image
        self.levels = _pyramid(image, cfg, "image")
        self._maps = [(_to_level(img, image.shape), _to_level(r, ref.image.shape)) for img, r in zip(self.levels, ref.levels)]

    def down(self, m3: np.ndarray, k: int) -> np.ndarray:
        to_img, to_ref = self._maps[k]
        return to_img @ m3 @ np.linalg.inv(to_ref)

    def up(self, m3: np.ndarray, k: int) -> np.ndarray:
        to_img, to_ref = self._maps[k]
        return np.linalg.inv(to_img) @ m3 @ to_ref


def _estimate(frame: _Frame, seed: np.ndarray, cfg: RegisterConfig) -> list[np.ndarray]:
    """Full-resolution 3x3 candidates: ``start`` (the better scoring of ``seed`` and ``seed`` corrected by phase
    correlation, at the coarsest level) refined level by level, then ``start`` if refining lowered the score."""
    ref_level, img_level = frame.ref.levels_f[0], frame.levels[0]
    m3 = frame.down(seed, 0)
    h, w = img_level.shape
    placed = cv2.warpAffine(ref_level, m3[:2], (w, h), flags=cv2.INTER_LINEAR, borderValue=float(ref_level.mean()))
    (dx, dy), _ = cv2.phaseCorrelate(placed, img_level.astype(np.float32), cv2.createHanningWindow((w, h), cv2.CV_32F))
    moved = np.array([[1, 0, dx], [0, 1, dy], [0, 0, 1]]) @ m3 if math.isfinite(dx) and math.isfinite(dy) else m3
    scores = [_Scored(ref_level, m, img_level).score for m in (m3, moved)]
    start_score = max(scores)
    start = m3 = moved if scores[1] > scores[0] else m3
    for k, (tpl, level) in enumerate(zip(frame.ref.templates, frame.levels)):
        if k > 0:
            m3 = frame.down(frame.up(m3, k - 1), k)
        m3 = _refine(tpl, _blurred(level, cfg.blur), m3, cfg.iterations, cfg.eps)
    refined = frame.up(m3, len(frame.levels) - 1)
    return [refined] if _Scored(ref_level, frame.down(refined, 0), img_level).score >= start_score else [refined, frame.up(start, 0)]


def _residual_motion(frame: _Frame, m3: np.ndarray, cfg: RegisterConfig) -> float:
    """Image px by which one Gauss-Newton step at the coarsest level moves the reference's farthest corner from ``m3``."""
    stepped = frame.up(_refine(frame.ref.templates[0], _blurred(frame.levels[0], cfg.blur), frame.down(m3, 0), 1, 0.0), 0)
    h, w = frame.ref.image.shape
    corners = np.array([[0, w - 1, 0, w - 1], [0, 0, h - 1, h - 1], [1, 1, 1, 1]], dtype=np.float64)
    return float(np.hypot(*((stepped - m3)[:2] @ corners)).max())


def _reason(blank: list[str], scored: _Scored, shift: float, angle: float, cfg: RegisterConfig) -> str:
    """Why a registration does not fit ("" when it does); the golden check comes after (:func:`_checked`)."""
    checks = (
        (not blank, f"{' and '.join(blank)} blank (one grey level)"),
        (scored.score >= cfg.min_score, f"score {scored.score:.3f} < register.min_score {cfg.min_score}"),
        (shift <= cfg.max_shift, f"shift {shift:.1f} px > register.max_shift {cfg.max_shift}"),
        (abs(angle) <= cfg.max_angle, f"angle {angle:.2f} deg beyond register.max_angle {cfg.max_angle}"),
        (scored.overlap >= cfg.min_overlap, f"overlap {scored.overlap:.2f} < register.min_overlap {cfg.min_overlap}"),
    )
    return next((why for ok, why in checks if not ok), "")


def _size_reason(reference_shape: tuple[int, ...], image_shape: tuple[int, ...], cfg: RegisterConfig) -> str:
    """Why a golden image of ``reference_shape`` cannot be the frame's at its scale ("" when it can)."""
    if max(abs(a - b) for a, b in zip(reference_shape, image_shape)) <= 2 * cfg.max_shift:
        return ""
    return (
        f"golden image {reference_shape[1]}x{reference_shape[0]} px, the frame {image_shape[1]}x{image_shape[0]}: not captured at "
        f"the frame's scale (sides may differ by 2 x register.max_shift = {2 * cfg.max_shift:g} px)"
    )


def _checked(
    reg: Registration, warped: np.ndarray, image: np.ndarray, reference_shape: tuple[int, ...], cfg: RegisterConfig
) -> Registration:
    """``reg`` with the golden check's ``difference``, refused (``ok`` False, ``reason``) when the golden image does not show
    the frame's design at its scale."""
    if not reg.ok:
        return reg
    reason = _size_reason(reference_shape, image.shape, cfg)
    diff = difference(warped, image, covered_area(reg.matrix, reference_shape, image.shape)) if not reason else 1.0
    if not reason and diff > cfg.max_difference:
        reason = (
            f"the golden image differs from the frame in {diff:.1%} of its area (register.max_difference {cfg.max_difference:.1%}): "
            "another design or another board?"
        )
    return replace(reg, difference=diff, ok=not reason, reason=reason)


def check_pair(reference: np.ndarray, image: np.ndarray, cfg: RegisterConfig | None = None) -> Registration:
    """The golden check of a pair used as given (already aligned, no registration: ``--no-register``, training pairs
    taken as aligned): the identity :class:`Registration` with its ``difference``, ``ok`` False with a ``reason`` when
    the golden image is blank, of another size or shows another design."""
    cfg = (cfg or RegisterConfig()).validate()
    reference, image = _check_gray("reference", reference), _check_gray("image", image)
    identity = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    identity.setflags(write=False)
    if reference.shape != image.shape:
        reason = f"golden image {reference.shape[1]}x{reference.shape[0]} px, the frame {image.shape[1]}x{image.shape[0]}: register it"
        return Registration(identity, 0.0, False, 0.0, 0.0, 0.0, reason=reason, difference=1.0)
    blank = [name for name, im in (("reference", reference), ("image", image)) if float(im.std()) < 1e-3]
    reg = Registration(identity, 1.0, not blank, 0.0, 0.0, 1.0, reason=f"{' and '.join(blank)} blank (one grey level)" if blank else "")
    return _checked(reg, reference, image, reference.shape, cfg)


def _register(frame: _Frame, cfg: RegisterConfig, init: np.ndarray | None) -> tuple[np.ndarray, Registration, _Scored]:
    """:func:`register` on a prepared frame; also returns the finest level's :class:`_Scored` (for reuse)."""
    ref, shape = frame.ref, frame.shape
    if init is None:
        m3 = np.array([[1, 0, (shape[1] - ref.image.shape[1]) / 2], [0, 1, (shape[0] - ref.image.shape[0]) / 2], [0, 0, 1]])
    else:
        m3 = np.vstack([np.asarray(init, dtype=np.float64)[:2], [0, 0, 1]])
    blank = [name for name, level in (("reference", ref.levels[0]), ("image", frame.levels[0])) if cv2.meanStdDev(level)[1][0, 0] < 1e-3]
    fine = len(frame.levels) - 1
    candidates = [m3] if blank else _estimate(frame, m3, cfg)
    scores = [_Scored(ref.levels_f[fine], frame.down(m, fine), frame.levels[fine]) for m in candidates]
    scored = max(scores, key=lambda c: c.score)  # measure, then choose (a large defect on a sparse board can mislead)
    m3 = candidates[scores.index(scored)]
    matrix = m3[:2].copy()
    matrix.setflags(write=False)
    shift, angle = matrix_to_shift_angle(matrix, ref.image.shape, shape)
    reason = _reason(blank, scored, shift, angle, cfg)
    reg = Registration(matrix, scored.score, not reason, shift, angle, scored.overlap, reason=reason)
    warped = cv2.convertScaleAbs(cv2.warpAffine(ref.image_f, matrix, (shape[1], shape[0]), flags=cv2.INTER_LINEAR, borderValue=FILL_VALUE))
    return warped, _checked(reg, warped, frame.image, ref.image.shape, cfg), scored


def register(
    reference: np.ndarray, image: np.ndarray, cfg: RegisterConfig | None = None, init: np.ndarray | None = None
) -> tuple[np.ndarray, Registration]:
    """Warp ``reference`` (uint8 [H_ref, W_ref]) into the frame of ``image`` (uint8 [H, W]); ``init``: a 2x3 reference
    -> image seed (default: centre on centre). Returns (warped uint8 [H, W], border 114; :class:`Registration`).
    Raises ``ValueError`` for malformed inputs (not 2-D uint8, empty, too small) or a bad config, never for a misfit."""
    cfg = (cfg or RegisterConfig()).validate()
    reference, image = _check_gray("reference", reference), _check_gray("image", image)
    if init is not None and np.shape(init) not in ((2, 3), (3, 3)):
        raise ValueError(f"init: expected a 2x3 (or 3x3) matrix, got shape {np.shape(init)}")
    warped, reg, _ = _register(_Frame(_Reference(reference, cfg), image, cfg), cfg, init)
    return warped, reg


class Registrar:
    """Registers frames against a fixed reference (or one per call), prepared once, reusing the last good matrix.

    With ``cfg.reuse`` a frame of the cached size is first checked: its score under the cached matrix (warped
    reference cached: a downscale and three dot products) must be >= ``max(min_score, cached - reuse_margin)``
    and one coarse Gauss-Newton step must move no reference corner over ``reuse_shift`` px; then the cached result
    returns with ``reused=True``. Else the frame is registered fully, seeded with the cached matrix. Only ``ok``
    results are cached."""

    def __init__(self, reference: np.ndarray | None = None, cfg: RegisterConfig | None = None) -> None:
        self.cfg = (cfg or RegisterConfig()).validate()
        self._ref: _Reference | None = None
        self._cache: tuple[np.ndarray, Registration, _Scored] | None = None
        if reference is not None:
            self._set_reference(reference)

    def _set_reference(self, reference: np.ndarray) -> None:
        reference = _check_gray("reference", reference)
        held = self._ref
        if held is None or not (reference is held.image or (reference.shape == held.image.shape and np.array_equal(reference, held.image))):
            self._ref, self._cache = _Reference(reference.copy(), self.cfg), None

    def reset(self) -> None:
        """Forget the cached matrix: the next frame is registered fully."""
        self._cache = None

    def __call__(self, image: np.ndarray, reference: np.ndarray | None = None) -> tuple[np.ndarray, Registration]:
        """``(warped reference uint8 [H, W], Registration)`` for ``image`` (uint8 [H, W]); see :func:`register`."""
        if reference is not None:
            self._set_reference(reference)
        if self._ref is None:
            raise ValueError("Registrar: no reference (pass one to Registrar(...) or to this call)")
        frame = _Frame(self._ref, _check_gray("image", image), self.cfg)
        init = None
        if self._cache is not None and self._cache[0].shape == frame.shape:
            warped, reg, scored = self._cache
            init = reg.matrix
            score = self._reuse_score(frame, reg, scored) if self.cfg.reuse else None
            if score is not None:
                checked = _checked(replace(reg, score=score, reused=True), warped, frame.image, self._ref.image.shape, self.cfg)
                if checked.ok:  # the golden check runs on every frame: a cached matrix is no licence
                    return warped.copy(), checked
        warped, reg, scored = _register(frame, self.cfg, init)
        if reg.ok:
            self._cache = (warped, reg, scored)
        return warped.copy(), reg

    def _reuse_score(self, frame: _Frame, reg: Registration, scored: _Scored) -> float | None:
        """The frame's score under the cached matrix if that matrix still holds (see the class docstring), else None."""
        score, _ = scored.against(frame.levels[-1])
        if score < max(self.cfg.min_score, reg.score - self.cfg.reuse_margin):
            return None
        motion = _residual_motion(frame, np.vstack([reg.matrix, [0, 0, 1]]), self.cfg)
        return score if motion <= self.cfg.reuse_shift else None
