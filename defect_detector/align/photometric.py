"""Photometric registration: the golden image's grey levels fitted to the board's, after the geometric registration.

A board is never lit as its golden image was: gain, offset, a tone change and a smooth light gradient come between
them (DESIGN.md, Captures). With the golden image already registered into the board's pixels, the levels of a golden
pixel ``g`` (uint8) at frame pixel ``(x, y)`` are modelled as

    board ~= light(x, y) * 255 * (g / 255) ** gamma + offset

where ``light`` is a smooth field, quadratic in the frame's normalised coordinates ``u, v`` in [-1, 1]
(``c0 + c1 u + c2 v + c3 u^2 + c4 u v + c5 v^2``). The fit reads both images area-averaged to at most
:data:`FIT_SIDE` px a side, where both have data. A sample whose board pixels clip more than its golden pixels (a
camera at a little more gain saturates a bright pad, glare; a shadow crushes) reads a bound, not a level: it is
censored, counted only while the fit falls short of it. Left out instead, or averaged as a level, the clipped
bright end pulled the fit's tone to the end of its search (gamma 0.6 with a negative offset, for gain 1.15 and gamma
0.85) and mapped a pad the board saturates 10-13 levels too dark, which the hidden-area screen read as an object over
the board. Defects are outliers: iteratively reweighted least squares with Tukey's biweight, ``gamma`` by a search over
:data:`GAMMAS` with the weights held, refined by a parabola. A binarized pair (two levels) leaves ``gamma`` free: the
search prefers 1 (a small pull towards it). :class:`Photometric` maps golden levels to the board's
(:meth:`Photometric.to_board`, the frame view's golden channel) or the board's to the golden image's
(:meth:`Photometric.to_golden`, the golden view's board).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import cv2
import numpy as np

from defect_detector.align.mapping import Mapping
from defect_detector.core.constants import CRUSHED, SATURATED
from defect_detector.core.frame_record import Prepared, StageContext
from defect_detector.core.limits import PhotometricLimits
from defect_detector.core.refusal import RefusalKind

FIT_SIDE = 48
"""Longest side, in samples, of the area-averaged images the fit reads."""

GAMMAS = np.exp(np.linspace(math.log(0.6), math.log(1.6), 9))
"""The tone exponents searched (log-spaced), refined by a parabola through the best three."""

_FIELD_STEP = 16
"""The light field is evaluated every this many pixels and interpolated (bilinear) in between."""

NEGLIGIBLE = {"gain": 0.01, "gamma": 0.01, "light_range": 0.01, "offset": 1.0}
"""A fit this close to the identity (each a fraction, the offset in grey levels) is taken as the identity by the prepare
stage: a board captured as its golden image was is inspected exactly as read."""

_CLIPPED = 0.02
"""A sample whose board pixels clip (saturate or crush) more than its golden pixels by this share is censored: its
area average is a bound of the level the camera would have read."""

_PULL = 4.0
"""Weight of ``log(gamma)^2`` (in squared levels per sample) that settles a free ``gamma`` at 1."""


@dataclass(frozen=True)
class Photometric:
    """A fitted level map (module docstring). ``coeffs``: float64 ``[6]`` of the light field over a frame of
    ``shape`` ``(H, W)`` (frame pixels); ``gamma``: the tone exponent; ``offset``: grey levels. ``gain``: the field's
    mean over the frame; ``light_range``: its half range where the fit read the board (its inlying samples, never
    extrapolated beyond them) as a fraction of ``gain`` (0.12: +-12%).
    ``inliers``: the share of fitted samples with non-zero weight. ``span``: the golden image's 5th and 95th
    percentile levels among the fitted samples, the levels the range check reads the map at. ``blur``: the relative
    defocus (:func:`relative_blur`): > 0, the board is blurrier and the golden image is blurred by this Gaussian sigma (px)
    to match it (:meth:`to_board`, :func:`blur_golden`); < 0, the golden image is blurrier and the board is blurred by
    ``-blur`` (:meth:`to_golden`). ``identity``: no fit (levels as given)."""

    coeffs: np.ndarray
    gamma: float
    offset: float
    shape: tuple[int, int]
    gain: float = 1.0
    light_range: float = 0.0
    inliers: float = 1.0
    span: tuple[float, float] = (0.0, 255.0)
    blur: float = 0.0

    @classmethod
    def identity(cls, shape: tuple[int, int]) -> Photometric:
        return cls(np.array([1.0, 0, 0, 0, 0, 0]), 1.0, 0.0, (int(shape[0]), int(shape[1])))

    @property
    def is_identity(self) -> bool:
        return self.gamma == 1.0 and self.offset == 0.0 and self.blur == 0.0 and bool(np.array_equal(self.coeffs, [1.0, 0, 0, 0, 0, 0]))

    @property
    def negligible(self) -> bool:
        """Within :data:`NEGLIGIBLE` of the identity."""
        return (
            abs(self.gain - 1) < NEGLIGIBLE["gain"]
            and abs(self.gamma - 1) < NEGLIGIBLE["gamma"]
            and self.light_range < NEGLIGIBLE["light_range"]
            and abs(self.offset) < NEGLIGIBLE["offset"]
            and self.blur == 0.0
        )

    def curve(self, levels: np.ndarray) -> np.ndarray:
        """float64 golden ``levels`` as the board shows them under the mean light (``gain``, tone, offset; unclipped)."""
        return self.gain * 255.0 * (np.asarray(levels, np.float64) / 255.0) ** self.gamma + self.offset

    def light(self, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """The light field at frame pixels ``(xs, ys)`` (float arrays of one shape): float32, that shape."""
        u, v = _normalised(xs, ys, self.shape)
        return (_basis(u, v) @ self.coeffs).astype(np.float32)

    def light_map(self, shape: tuple[int, int], mapping: Mapping | None = None) -> np.ndarray:
        """float32 ``[H, W]`` light field over an image of ``shape``: the frame itself, or (``mapping``: golden image px
        -> frame px, ``align/mapping.py``) the golden image, whose pixels the mapping carries into the frame's."""
        h, w = shape
        step = _FIELD_STEP
        ny, nx = -(-h // step) + 2, -(-w // step) + 2  # one coarse point beyond each edge
        gy, gx = (np.mgrid[0:ny, 0:nx].astype(np.float64) - 1 + 0.5) * step - 0.5  # centres, as cv2.resize reads them
        if mapping is not None:
            gx, gy = mapping.to_frame(gx, gy)
        full = cv2.resize(self.light(gx, gy), (nx * step, ny * step), interpolation=cv2.INTER_LINEAR)
        return np.ascontiguousarray(full[step : step + h, step : step + w])

    def to_board(self, golden: np.ndarray, mapping: Mapping | None = None) -> np.ndarray:
        """uint8 ``golden`` ``[H, W]`` (registered into the frame; or, with ``mapping``, in its own pixels) at the board's
        levels: uint8 ``[H, W]``."""
        if self.is_identity:
            return golden
        golden = blur_golden(golden, self.blur)
        tone = (255.0 * (np.arange(256) / 255.0) ** self.gamma).astype(np.float32)
        out = cv2.LUT(golden, tone.reshape(1, 256)) if golden.flags.c_contiguous else tone[golden]
        out = out * self.light_map(golden.shape, mapping) + np.float32(self.offset)
        return np.clip(out + 0.5, 0, 255).astype(np.uint8)

    def to_golden(self, board: np.ndarray, mapping: Mapping | None = None) -> np.ndarray:
        """uint8 ``board`` ``[H, W]`` (the frame; or, with ``mapping``, warped into the golden image's pixels) at the
        golden image's levels: uint8 ``[H, W]``, the inverse of :meth:`to_board` (clipped)."""
        if self.is_identity:
            return board
        if self.blur < 0:
            board = cv2.GaussianBlur(board, (0, 0), -self.blur)
        light = np.maximum(self.light_map(board.shape, mapping), np.float32(1e-3))
        level = np.clip((board.astype(np.float32) - np.float32(self.offset)) / light + 0.5, 0, 255).astype(np.uint8)
        tone = np.clip(255.0 * (np.arange(256) / 255.0) ** (1.0 / self.gamma) + 0.5, 0, 255).astype(np.uint8)
        return cv2.LUT(level, tone.reshape(1, 256))

    def as_dict(self) -> dict[str, float]:
        """The record's ``registration.photometric``: gain, offset (levels), gamma, light_range (+- fraction), blur (the
        relative defocus, Gaussian sigma px; > 0: the board is the blurrier)."""
        return {
            "gain": round(self.gain, 4),
            "offset": round(self.offset, 2),
            "gamma": round(self.gamma, 4),
            "light_range": round(self.light_range, 4),
            "blur": round(self.blur, 2),
        }


BINARIZED_SHARE = 0.97
"""A golden image with at least this share of its pixels within 32 grey levels of 0 or 255 is a binarized scan."""


def is_binarized(image: np.ndarray) -> bool:
    """Whether uint8 ``image`` is a binarized scan (DeepPCB's look): :data:`BINARIZED_SHARE` of it at its two ends. Its
    whites clip at 255 and its blacks at 0, so no gain, gamma or light field can be read from it, and a fit on it only
    makes one up: the prepare stage takes the identity for its boards."""
    counts = cv2.calcHist([image], [0], None, [8], [0, 256]).ravel()
    return float(counts[0] + counts[-1]) >= BINARIZED_SHARE * float(image.size)


def photometric_reason(fit: Photometric, limits: PhotometricLimits) -> str:
    """Why ``fit`` lies outside the photometric range the weights were validated for (``core/limits.py``
    ``PhotometricLimits``), in words ("" when within). It is judged by what it does where the golden image has levels
    (``Photometric.span``: its 5th to 95th percentile ``lo``-``hi``, and their midpoint), not by its parameters, which
    trade off on a board of few levels."""
    lo, hi = fit.span
    levels = np.array([lo, (lo + hi) / 2, hi])
    mapped = fit.curve(levels)
    low, high = limits.envelope(levels)
    outside = (mapped < low) | (mapped > high)
    if outside[2] or (outside[1] and not outside[0]):
        which = 2 if outside[2] else 1
        ratio = mapped[which] / max(levels[which], 1.0)
        way, change = ("brighter", ratio - 1) if ratio > 1 else ("darker", 1 - ratio)
        where = "bright" if which == 2 else "middle"
        return (
            f"light {change:.0%} {way} than the golden image at its {where} levels ({levels[which]:.0f} -> {mapped[which]:.0f}; "
            f"at most {low[which]:.0f}-{high[which]:.0f}): check the light and the exposure"
        )
    if outside[0]:
        return (
            f"black level {mapped[0] - lo:+.0f} grey levels off the golden image's ({lo:.0f} -> {mapped[0]:.0f}; at most "
            f"{low[0]:.0f}-{high[0]:.0f}): check the camera's settings"
        )
    if fit.light_range > limits.max_light_range:
        side = _brighter_side(fit)
        return (
            f"light {2 * fit.light_range:.0%} brighter on the {side} than the golden image's light there "
            f"(at most +-{limits.max_light_range:.0%}): check the lamps"
        )
    return ""


def _brighter_side(fit: Photometric) -> str:
    h, w = fit.shape
    points = {"left": (0, h / 2), "right": (w - 1, h / 2), "top": (w / 2, 0), "bottom": (w / 2, h - 1)}
    values = {k: float(fit.light(np.array([x]), np.array([y]))[0]) for k, (x, y) in points.items()}
    return max(values, key=values.get)


def _normalised(xs: np.ndarray, ys: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    h, w = shape
    return (2.0 * np.asarray(xs, np.float64) / max(w - 1, 1) - 1.0, 2.0 * np.asarray(ys, np.float64) / max(h - 1, 1) - 1.0)


def _basis(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.stack([np.ones_like(u), u, v, u * u, u * v, v * v], -1)


def _samples(golden: np.ndarray, board: np.ndarray, valid: np.ndarray | None) -> tuple[np.ndarray, ...] | None:
    """``(g, b, u, v, clip)`` float64 samples of the area-averaged pair where both have data; ``clip`` +1 where more of
    the board's pixels than of the golden image's saturate (by over :data:`_CLIPPED`: ``b`` is a lower bound), -1 where
    more are crushed (an upper bound), else 0. None with fewer than 12 uncensored samples. The average is by a whole
    factor (the pair cut to a multiple of it: under a factor's pixels of its right and bottom edge left out), which
    OpenCV runs about 8x faster than a fractional one."""
    h, w = board.shape
    factor = max(1, -(-max(h, w) // FIT_SIDE))
    size = (max(1, w // factor), max(1, h // factor))
    crop = (slice(0, size[1] * factor), slice(0, size[0] * factor))
    g = cv2.resize(golden[crop], size, interpolation=cv2.INTER_AREA).astype(np.float64)
    b = cv2.resize(board[crop], size, interpolation=cv2.INTER_AREA).astype(np.float64)
    ok = np.ones(g.shape, bool)
    if valid is not None:
        ok = cv2.resize(valid[crop].view(np.uint8) * np.uint8(255), size, interpolation=cv2.INTER_AREA) >= 255
    golden_bright, golden_dark = _share(golden[crop] >= SATURATED, size), _share(golden[crop] <= CRUSHED, size)
    board_bright, board_dark = _share(board[crop] >= SATURATED, size), _share(board[crop] <= CRUSHED, size)
    clip = np.where(board_bright - golden_bright > _CLIPPED, 1.0, np.where(board_dark - golden_dark > _CLIPPED, -1.0, 0.0))
    flat = 1 - _CLIPPED
    both = ((golden_bright >= flat) & (board_bright >= flat)) | ((golden_dark >= flat) & (board_dark >= flat))
    ok &= ~both  # wholly clipped in both (a white table): a bound against a bound says nothing of the map
    if (ok & (clip == 0)).sum() < 12:
        return None
    ys, xs = np.nonzero(ok)
    u, v = _normalised((xs + 0.5) * factor - 0.5, (ys + 0.5) * factor - 0.5, (h, w))
    return g[ok], b[ok], u, v, clip[ok]


def _share(mask: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """float64: the share of bool ``mask`` set over each sample of the area-averaged grid of ``size`` ``(w, h)``."""
    return cv2.resize(mask.view(np.uint8) * np.uint8(255), size, interpolation=cv2.INTER_AREA) / 255.0


def _solve(tone: np.ndarray, b: np.ndarray, basis: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least squares of ``b ~ (basis * tone) @ c + offset`` by the normal equations: ``(c [6] then offset,
    residuals [n])``."""
    x = np.concatenate([basis * tone[:, None], np.ones((len(b), 1))], 1)
    xw = x * weights[:, None]
    normal = xw.T @ x + 1e-6 * np.eye(7)
    solution = np.linalg.solve(normal, xw.T @ b)
    return solution, b - x @ solution


def _loss(residual: np.ndarray, weights: np.ndarray) -> float:
    return float((weights * residual**2).sum() / max(weights.sum(), 1e-9))


def _met(residual: np.ndarray, clip: np.ndarray) -> np.ndarray:
    """bool: the censored samples the fit already reaches (at or above a saturated board's reading, at or below a
    crushed one's)."""
    return ((clip > 0) & (residual <= 0)) | ((clip < 0) & (residual >= 0))


def _short(residual: np.ndarray, clip: np.ndarray) -> np.ndarray:
    """``residual`` as far as the fit falls short: 0 at the censored samples it reaches (:func:`_met`)."""
    return np.where(_met(residual, clip), 0.0, residual)


def _tukey(residual: np.ndarray) -> np.ndarray:
    scale = max(1.4826 * float(np.median(np.abs(residual))), 2.0)
    r = residual / (4.685 * scale)
    return np.where(np.abs(r) < 1, (1 - r * r) ** 2, 0.0)


def _tone(g: np.ndarray, gamma: float) -> np.ndarray:
    return 255.0 * (g / 255.0) ** gamma


def _reweighted(
    g: np.ndarray, b: np.ndarray, basis: np.ndarray, clip: np.ndarray, gamma: float, weights: np.ndarray, rounds: int
) -> tuple[np.ndarray, np.ndarray]:
    solution = np.zeros(7)
    for _ in range(rounds):
        solution, residual = _censored_solve(_tone(g, gamma), b, basis, clip, weights)
        weights = _tukey(_short(residual, clip))  # a bound the fit reaches is no outlier
    return solution, weights


def _censored_solve(
    tone: np.ndarray, b: np.ndarray, basis: np.ndarray, clip: np.ndarray, weights: np.ndarray, rounds: int = 4
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_solve` with the censored samples (``clip`` != 0) counted only while the fit falls short of their bound:
    a few rounds, each leaving out those the last fit reached."""
    active = weights.copy()
    solution, residual = _solve(tone, b, basis, active)
    for _ in range(rounds):
        reached = _met(residual, clip)
        if not reached.any():
            break
        active = np.where(reached, 0.0, weights)
        solution, residual = _solve(tone, b, basis, active)
    return solution, residual


def _best_gamma(g: np.ndarray, b: np.ndarray, basis: np.ndarray, clip: np.ndarray, weights: np.ndarray) -> float:
    def loss(gamma: float) -> float:
        residual = _censored_solve(_tone(g, gamma), b, basis, clip, weights)[1]
        return _loss(_short(residual, clip), weights) + _PULL * math.log(gamma) ** 2

    losses = np.array([loss(gamma) for gamma in GAMMAS])
    k = int(np.clip(np.argmin(losses), 1, len(GAMMAS) - 2))
    x, y = np.log(GAMMAS[k - 1 : k + 2]), losses[k - 1 : k + 2]
    curvature = y[0] - 2 * y[1] + y[2]
    best = x[1] - (x[1] - x[0]) * (y[2] - y[0]) / (2 * curvature) if curvature > 1e-12 else x[int(np.argmin(y))]
    return float(np.exp(np.clip(best, x[0], x[2])))


BLUR_STEP = 0.25
"""The relative blur is read and applied in steps of this sigma (px), so that a line's steady focus keeps one blurred
golden image (and its model features) per design."""

BLURS = np.arange(0.0, 2.0 + BLUR_STEP / 2, BLUR_STEP)
"""The extra Gaussian sigmas (px) searched on either side."""

_BASE_BLUR = 0.8
"""Both sides are read under this common blur (px), so that sensor noise, which blurring the noisier side would hide,
does not pass for defocus."""

_BLUR_CROPS, _BLUR_CROP = 4, 160
"""The relative blur is read on this many crops of this side (px), where the golden image has the most edges."""


_BLUR_CAP = 24.0
"""Grey levels: a pixel of the relative blur's comparison counts at most this difference (squared). A defect on the
board differs by far more at any blur; a 40 px bright defect otherwise read as the golden image being blurrier and had
the board blurred over it."""


def _truncated(difference: np.ndarray) -> float:
    """Mean of the squared ``difference`` (float32 ``[h, w]``, 4 px border left out), each capped at :data:`_BLUR_CAP`."""
    return float(np.minimum(difference[4:-4, 4:-4] ** 2, _BLUR_CAP**2).mean())


def blur_golden(golden: np.ndarray, blur: float) -> np.ndarray:
    """uint8 ``golden`` blurred by a relative defocus ``blur`` > 0 (Gaussian sigma px); unchanged for ``blur`` <= 0."""
    return cv2.GaussianBlur(golden, (0, 0), blur) if blur > 0 else golden


def _crops(golden: np.ndarray, valid: np.ndarray | None) -> list[tuple[slice, slice]]:
    """Up to :data:`_BLUR_CROPS` windows of :data:`_BLUR_CROP` px where ``golden`` has the most edges (within ``valid``)."""
    side = _BLUR_CROP
    h, w = golden.shape
    if h < side or w < side:
        return [(slice(0, h), slice(0, w))]
    edges = cv2.Laplacian(golden, cv2.CV_32F, ksize=3) ** 2
    if valid is not None:
        edges *= valid
    energy = cv2.resize(edges, (w // side, h // side), interpolation=cv2.INTER_AREA)
    order = np.argsort(energy.ravel())[::-1][:_BLUR_CROPS]
    return [(slice(i * side, (i + 1) * side), slice(j * side, (j + 1) * side)) for i, j in zip(*np.unravel_index(order, energy.shape))]


def relative_blur(golden: np.ndarray, board: np.ndarray, valid: np.ndarray | None = None) -> float:
    """The relative defocus of uint8 ``board`` against uint8 ``golden`` (``[H, W]`` each, the golden image registered and
    at the board's levels): the sigma (px, in :data:`BLUR_STEP` steps) that blurs the sharper one to the other, > 0 when
    the board is the blurrier. Read on the golden image's busiest crops (:func:`_crops`), both under a common
    :data:`_BASE_BLUR`, as the extra blur on either side that leaves the least squared difference, each pixel's capped
    at :data:`_BLUR_CAP` (a defect, which no blur explains, weighs the same whatever the blur)."""
    windows = _crops(golden, valid)
    g = [golden[c].astype(np.float32) for c in windows]
    b = [board[c].astype(np.float32) for c in windows]
    base_g = [cv2.GaussianBlur(x, (0, 0), _BASE_BLUR) for x in g]
    base_b = [cv2.GaussianBlur(x, (0, 0), _BASE_BLUR) for x in b]
    best, best_error = 0.0, math.inf
    for extra in BLURS:
        sigma = math.hypot(_BASE_BLUR, extra)
        for sign, sharp, other in ((1.0, g, base_b), (-1.0, b, base_g)):
            error = sum(_truncated(cv2.GaussianBlur(x, (0, 0), sigma) - y) for x, y in zip(sharp, other))
            if error < best_error - 1e-9:
                best, best_error = sign * float(extra), error
    return best


def fit_photometric(golden: np.ndarray, board: np.ndarray, valid: np.ndarray | None = None) -> Photometric:
    """The :class:`Photometric` that maps uint8 ``golden`` ``[H, W]`` (registered into the board's pixels) to uint8
    ``board`` ``[H, W]``, over bool ``valid`` ``[H, W]`` (where the golden image has data; None: everywhere). A pair
    with too few usable samples, or a degenerate fit, gives the identity."""
    if golden.shape != board.shape:
        raise ValueError(f"fit_photometric: golden image {golden.shape} and board {board.shape} differ in shape")
    samples = _samples(golden, board, valid)
    if samples is None:
        return Photometric.identity(board.shape)
    g, b, u, v, clip = samples
    basis = _basis(u, v)
    _, weights = _reweighted(g, b, basis, clip, 1.0, np.ones_like(b), 3)
    gamma = _best_gamma(g, b, basis, clip, weights)
    _, weights = _reweighted(g, b, basis, clip, gamma, weights, 2)
    solution, _ = _censored_solve(_tone(g, gamma), b, basis, clip, weights)
    coeffs, offset = solution[:6], float(solution[6])
    grid = np.linspace(-1, 1, 9)
    uu, vv = np.meshgrid(grid, grid)
    field = _basis(uu.ravel(), vv.ravel()) @ coeffs
    gain = float(field.mean())
    if not np.isfinite(field).all() or gain <= 0.05:
        return Photometric.identity(board.shape)
    on = (weights > 0) | (clip != 0)
    read = _basis(u[on], v[on]) @ coeffs  # the field where the fit read the board, not extrapolated
    light_range = float((read.max() - read.min()) / (2 * gain)) if len(read) else 0.0
    span = tuple(float(x) for x in np.percentile(g, (5, 95)))
    shape = (int(board.shape[0]), int(board.shape[1]))
    fit = Photometric(coeffs, gamma, offset, shape, gain, light_range, float((weights > 0).mean()), span)
    return dataclasses.replace(fit, blur=relative_blur(fit.to_board(golden), board, valid))


def photometric_fit(context: StageContext, record: Prepared) -> Prepared:
    """The photometric-fit stage: ``record.matched``, its registered golden image at the frame's levels
    (:meth:`Photometric.to_board`), and the fit kept in its registration. A negligible fit (:attr:`Photometric.negligible`)
    is the identity, and so is the fit of a binarized design (:func:`is_binarized`, read once per design: a scan of two
    clipped levels). A single-image model's frame is handed on as it is."""
    if record.golden is None or record.registration is None:
        return record
    design, shape = record.design, record.frame.image.shape
    if design is not None and design.binarized is None:
        design.binarized = is_binarized(design.image)
    binarized = design is not None and design.binarized
    fit = Photometric.identity(shape) if binarized else fit_photometric(record.golden, record.frame.image, record.covered)
    if fit.negligible:
        fit = Photometric.identity(shape)
    fitted = dataclasses.replace(record.registration, photometric=fit)
    return dataclasses.replace(record, matched=fit.to_board(record.golden), registration=fitted)


def light_range(context: StageContext, record: Prepared) -> Prepared:
    """The light-range stage: the photometric fit within the range the weights (or the design) were validated for
    (:func:`photometric_reason`), else refused (``light unlike``); then ``golden`` is the matched golden image and
    ``captured`` the one as captured. A frame whose golden check refusal is pending (``record.mismatch``) is not judged
    for its light: the hidden-area screen decides it."""
    if record.matched is None:
        return dataclasses.replace(record, captured=record.golden)
    fit = record.registration.photometric
    light = "" if record.mismatch is not None else photometric_reason(fit, context.limits_for(record.golden_key).photometric)
    if light:
        return record.refuse(RefusalKind.LIGHT_UNLIKE, light, {"gain": fit.gain, "gamma": fit.gamma, "offset": fit.offset})
    return dataclasses.replace(record, golden=record.matched, captured=record.golden)
