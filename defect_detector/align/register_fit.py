"""The fit behind ``align/register.py``: image pyramids, inverse-compositional Gauss-Newton and ZNCC scoring.

A :class:`PreparedReference` holds a golden image's pyramid and one Gauss-Newton :class:`Template` per level (its
gradients computed once); a :class:`FramePyramid` is a frame's pyramid against it. :func:`estimate` seeds with phase
correlation at the coarsest level and refines level by level (:func:`refine`); :class:`Scored` is a matrix's ZNCC
and overlap on one level. Matrices are float64 3x3, reference px -> image px (pixel centres at integers).
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from defect_detector.align.mapping import Mapping
from defect_detector.core.config_register import RegisterConfig

_MIN_SIDE = 8  # smallest side (px) of the coarsest pyramid level
_MIN_VALID = 0.1  # Gauss-Newton stops when less of the reference than this still lands on the image
_HUBER = 0.5  # residuals (in standard deviations) are clipped to this: a defect pulls the fit less


def pyramid(image: np.ndarray, cfg: RegisterConfig, name: str) -> list[np.ndarray]:
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


def to_level(level: np.ndarray, full_shape: tuple[int, ...]) -> np.ndarray:
    """3x3 map from full-resolution pixel coordinates to ``level``'s (pixel centres stay centres)."""
    sx, sy = level.shape[1] / full_shape[1], level.shape[0] / full_shape[0]
    return np.array([[sx, 0, (sx - 1) / 2], [0, sy, (sy - 1) / 2], [0, 0, 1]])


def blurred(level: np.ndarray, blur: float) -> np.ndarray:
    """float32 copy of a uint8 level, Gaussian-blurred with sigma ``blur`` (level px; 0: not blurred)."""
    f = level.astype(np.float32)
    return cv2.GaussianBlur(f, (0, 0), blur) if blur > 0 else f


MODELS = ("rigid", "similarity", "affine", "homography")
"""The global models the fit climbs through, each a subspace of the homography's 8 parameters (:data:`_BASES`)."""


def _bases() -> dict[str, np.ndarray]:
    """float64 ``[8, k]`` per model: its parameters as columns of the homography's ``p`` (module ``Template``): rigid
    (rotation, x, y), similarity (+ scale), affine (``p0``-``p5``), homography (all 8)."""
    rigid = np.zeros((8, 3))
    rigid[1, 0], rigid[2, 0], rigid[4, 1], rigid[5, 2] = 1.0, -1.0, 1.0, 1.0
    scale = np.zeros((8, 1))
    scale[0, 0] = scale[3, 0] = 1.0
    eye = np.eye(8)
    return {"rigid": rigid, "similarity": np.hstack([rigid, scale]), "affine": eye[:, :6], "homography": eye}


_BASES = _bases()


class Template:
    """A reference level for inverse-compositional Gauss-Newton: blurred, zero-mean unit-variance ``t`` (float32
    [h, w]; ``flat``, ``flat2``: it and its square, flat), its gradients ``gx``, ``gy`` (float32 [h, w], level px), the
    steepest-descent images ``sd`` (float32 [8, h*w]) of the homography about the level's centre in coordinates
    normalised by ``radius`` (``p``: ``[[1 + p0, p2, p4], [p1, 1 + p3, p5], [p6, p7, 1]]``), and their Gauss-Newton
    Hessian ``hessian`` (float64 [8, 8]); :meth:`hinv` is a model's inverse Hessian (:data:`MODELS`)."""

    def __init__(self, level: np.ndarray, blur: float) -> None:
        t = blurred(level, blur)
        mean, std = cv2.meanStdDev(t)
        self.t = (t - np.float32(mean[0, 0])) / np.float32(max(std[0, 0], 1e-6))  # zero mean, unit variance
        self.flat = self.t.ravel()
        self.flat2 = self.flat * self.flat
        h, w = level.shape
        self.centre = ((w - 1) / 2, (h - 1) / 2)
        self.radius = math.hypot(w, h) / 2
        self.gx = cv2.Sobel(self.t, cv2.CV_32F, 1, 0, ksize=3, scale=1 / 8)
        self.gy = cv2.Sobel(self.t, cv2.CV_32F, 0, 1, ksize=3, scale=1 / 8)
        r = np.float32(self.radius)
        xs = ((np.arange(w, dtype=np.float32) - np.float32(self.centre[0])) / r)[None, :]
        ys = ((np.arange(h, dtype=np.float32) - np.float32(self.centre[1])) / r)[:, None]
        gx, gy = self.gx * r, self.gy * r  # gradients per normalised unit
        radial = gx * xs + gy * ys
        self.sd = np.empty((8, h * w), np.float32)
        for k, image in enumerate((gx * xs, gy * xs, gx * ys, gy * ys, gx, gy, -radial * xs, -radial * ys)):
            self.sd[k] = np.broadcast_to(image, (h, w)).ravel()
        self.hessian = (self.sd @ self.sd.T).astype(np.float64)
        self._hinv: dict[str, np.ndarray] = {}

    def hinv(self, model: str) -> np.ndarray:
        """float64 ``[k, k]``: the inverse Gauss-Newton Hessian of ``model``'s parameters (computed once per model)."""
        if model not in self._hinv:
            basis = _BASES[model]
            self._hinv[model] = np.linalg.pinv(basis.T @ self.hessian @ basis)
        return self._hinv[model]

    def inverse_step(self, dp: np.ndarray) -> np.ndarray:
        """3x3 inverse of the incremental homography ``p = dp`` (normalised coordinates, module docstring) in level px."""
        c, r = self.centre, self.radius
        norm = np.array([[1 / r, 0, -c[0] / r], [0, 1 / r, -c[1] / r], [0, 0, 1]])
        step = np.array([[1 + dp[0], dp[2], dp[4]], [dp[1], 1 + dp[3], dp[5]], [dp[6], dp[7], 1.0]])
        return np.linalg.inv(np.linalg.inv(norm) @ step @ norm)


def pull(image: np.ndarray, m3: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """float32 ``image`` read at ``m3`` (3x3, reference level px -> image level px) of every pixel of a ``size`` ``(w, h)``
    reference level: ``[h, w]``, NaN where it falls outside the image."""
    flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
    if np.array_equal(m3[2], [0.0, 0.0, 1.0]):
        return cv2.warpAffine(image, m3[:2], size, flags=flags, borderValue=float("nan"))
    return cv2.warpPerspective(image, m3, size, flags=flags, borderValue=float("nan"))


def place(level: np.ndarray, m3: np.ndarray, size: tuple[int, int], border: float) -> np.ndarray:
    """float32 reference ``level`` moved by ``m3`` (3x3, reference level px -> image level px) into an image level of
    ``size`` ``(w, h)``, ``border`` where it has no data."""
    if np.array_equal(m3[2], [0.0, 0.0, 1.0]):
        return cv2.warpAffine(level, m3[:2], size, flags=cv2.INTER_LINEAR, borderValue=border)
    return cv2.warpPerspective(level, m3, size, flags=cv2.INTER_LINEAR, borderValue=border)


def refine(  # noqa: PLR0913 - the level pair, the start, the stop, the model and the local part kept
    tpl: Template, image: np.ndarray, m3: np.ndarray, iterations: int, eps: float, model: str = "rigid", local: Mapping | None = None
) -> np.ndarray:
    """``m3`` (3x3, reference level px -> image level px) refined within ``model`` (:data:`MODELS`) so that ``image``
    (float32 level) pulled into the reference frame matches ``tpl`` up to gain and offset over the overlap; ``local``: a
    level mapping whose lens term and grid are kept with each ``m3`` (None: the homography alone). Stops once an update
    moves no pixel by ``eps`` or more, or is not finite, or the overlap collapses (keeping the last estimate)."""
    h, w = tpl.t.shape
    basis, hinv = _BASES[model], tpl.hinv(model)
    sd = tpl.sd if model == "homography" else (basis.T @ tpl.sd.astype(np.float64)).astype(np.float32)
    for _ in range(iterations):
        if local is None or local.is_homography:
            pulled = pull(image, m3, (w, h)).ravel()
        else:
            map_x, map_y = Mapping(m3, (h, w), local.grid, local.nodes, local.lens).golden_map()
            pulled = cv2.remap(image, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=float("nan")).ravel()
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
        dp = basis @ (hinv @ (sd @ err).astype(np.float64))
        if not np.all(np.isfinite(dp)):
            break
        m3 = m3 @ tpl.inverse_step(dp)
        m3 = m3 / m3[2, 2]
        moved = (abs(dp[0]) + abs(dp[1]) + abs(dp[2]) + abs(dp[3]) + 2 * (abs(dp[6]) + abs(dp[7]))) * tpl.radius
        if moved + math.hypot(dp[4], dp[5]) * tpl.radius < eps:
            break
    return m3


class Scored:
    """A matrix's (3x3, or a level :class:`~defect_detector.align.mapping.Mapping`) quality on one level: the float32
    reference level warped into the image level's frame (flat,
    minus 128, 0 outside), the 0/1 mask it covers, its mean/std there, ``score``/``overlap`` against one image
    level; :meth:`against` scores another image level (uint8) with three dot products."""

    def __init__(self, ref_level: np.ndarray, m3: np.ndarray | Mapping, image_level: np.ndarray) -> None:
        h, w = image_level.shape
        if isinstance(m3, Mapping):  # a level mapping with its local grid
            warped = m3.golden_into_frame(ref_level, (h, w), cv2.INTER_LINEAR, float("nan")).ravel()
        else:
            warped = place(ref_level, m3, (w, h), float("nan")).ravel()
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


class PreparedReference:
    """A reference prepared once: uint8 and float32 copies, its pyramid and one :class:`Template` per level."""

    def __init__(self, reference: np.ndarray, cfg: RegisterConfig) -> None:
        self.image = reference
        self.image_f = reference.astype(np.float32)  # OpenCV warps float32 about 2x faster than uint8 here
        self.levels = pyramid(reference, cfg, "reference")
        self.levels_f = [level.astype(np.float32) for level in self.levels]
        self.templates = [Template(level, cfg.blur) for level in self.levels]


class FramePyramid:
    """An image's pyramid against a prepared reference; converts 3x3 matrices between full resolution and level k."""

    def __init__(self, ref: PreparedReference, image: np.ndarray, cfg: RegisterConfig) -> None:
        self.ref, self.shape, self.image = ref, image.shape, image
        self.levels = pyramid(image, cfg, "image")
        self._maps = [(to_level(img, image.shape), to_level(r, ref.image.shape)) for img, r in zip(self.levels, ref.levels)]

    def down(self, m3: np.ndarray, k: int) -> np.ndarray:
        to_img, to_ref = self._maps[k]
        return to_img @ m3 @ np.linalg.inv(to_ref)

    def up(self, m3: np.ndarray, k: int) -> np.ndarray:
        to_img, to_ref = self._maps[k]
        return np.linalg.inv(to_img) @ m3 @ to_ref

    def golden_full(self, x: float, y: float, k: int) -> tuple[float, float]:
        """Reference level-``k`` px ``(x, y)`` in full-resolution reference px."""
        to_ref = self._maps[k][1]
        return (x - to_ref[0, 2]) / to_ref[0, 0], (y - to_ref[1, 2]) / to_ref[1, 1]

    def level_mapping(self, mapping: Mapping, k: int) -> Mapping:
        """``mapping`` (full resolution) between the reference's and the image's level ``k``: its homography scaled down,
        its lens term and its grid's nodes and displacements with it."""
        to_img, to_ref = self._maps[k]
        lens = mapping.lens.rescaled(to_img[0, 0], to_img[1, 1]) if mapping.lens is not None else None
        grid, nodes = mapping.grid, mapping.nodes
        if grid is not None:
            grid, nodes = grid * np.array([to_img[0, 0], to_img[1, 1]], np.float32), nodes.rescaled(to_ref[0, 0], to_ref[1, 1])
        return Mapping(self.down(mapping.homography, k), self.ref.levels[k].shape, grid, nodes, lens)

    def full_mapping(self, level: Mapping, k: int) -> Mapping:
        """The full-resolution :class:`Mapping` of a level-``k`` mapping (:meth:`level_mapping`'s inverse)."""
        to_img, to_ref = self._maps[k]
        lens = level.lens.rescaled(1 / to_img[0, 0], 1 / to_img[1, 1]) if level.lens is not None else None
        grid, nodes = level.grid, level.nodes
        if grid is not None:
            grid, nodes = grid / np.array([to_img[0, 0], to_img[1, 1]], np.float32), nodes.rescaled(1 / to_ref[0, 0], 1 / to_ref[1, 1])
        return Mapping(self.up(level.homography, k), self.ref.image.shape, grid, nodes, lens)


PLAUSIBLE = {"scale": 0.1, "anisotropy": 1.05, "perspective": 0.02}
"""What a richer model may do beyond a rigid move, at most: change the scale by 10% (a board placed by hand: 2.6% seen),
stretch one axis 5% over the other (a line-scan's speed), and move a corner 2% of the side out of the affine's plane
(the capture model's perspective is 0.3%). Beyond them it fits a golden image of another board, not a camera."""


def _plausible(m3: np.ndarray, shape: tuple[int, int]) -> bool:
    """Whether the 3x3 level matrix ``m3`` over a level of ``shape`` stays within :data:`PLAUSIBLE`."""
    singular = np.linalg.svd(m3[:2, :2] / m3[2, 2], compute_uv=False)
    h, w = shape
    return bool(
        abs(math.sqrt(singular[0] * singular[1]) - 1) <= PLAUSIBLE["scale"]
        and singular[0] <= PLAUSIBLE["anisotropy"] * singular[1]
        and (abs(m3[2, 0]) * w + abs(m3[2, 1]) * h) / abs(m3[2, 2]) <= PLAUSIBLE["perspective"]
    )


def _climb(tpl: Template, image: np.ndarray, m3: np.ndarray, frame: FramePyramid, cfg: RegisterConfig) -> np.ndarray:
    """``m3`` (3x3, finest level px) refined rigidly, then through each richer model up to ``cfg.model``; a richer model is
    kept only where it fits the finest level better than the last one kept (``RegisterConfig.better``: a sparse board
    leaves directions that a richer model wanders along without fitting better) and stays :func:`_plausible`."""
    k = len(frame.levels) - 1
    ref_level, img_level = frame.ref.levels_f[k], frame.levels[k]
    best = refine(tpl, image, m3, cfg.iterations, cfg.eps, "rigid")
    best_score = Scored(ref_level, best, img_level).score
    for model in MODELS[1 : MODELS.index(cfg.model) + 1]:
        richer = refine(tpl, image, best, cfg.iterations, cfg.eps, model)
        score = Scored(ref_level, richer, img_level).score
        if _plausible(richer, tpl.t.shape) and cfg.better(score, best_score):
            best, best_score = richer, score
    return best


def estimate(frame: FramePyramid, seed: np.ndarray, cfg: RegisterConfig) -> list[np.ndarray]:
    """Full-resolution 3x3 candidates: ``start`` (the better scoring of ``seed`` and ``seed`` corrected by phase
    correlation, at the coarsest level) refined rigidly level by level and through the richer models at the finest
    (:func:`_climb`), then ``start`` if refining lowered the score."""
    ref_level, img_level = frame.ref.levels_f[0], frame.levels[0]
    m3 = frame.down(seed, 0)
    h, w = img_level.shape
    placed = place(ref_level, m3, (w, h), float(ref_level.mean()))
    (dx, dy), _ = cv2.phaseCorrelate(placed, img_level.astype(np.float32), cv2.createHanningWindow((w, h), cv2.CV_32F))
    moved = np.array([[1, 0, dx], [0, 1, dy], [0, 0, 1]]) @ m3 if math.isfinite(dx) and math.isfinite(dy) else m3
    scores = [Scored(ref_level, m, img_level).score for m in (m3, moved)]
    start_score = max(scores)
    start = m3 = moved if scores[1] > scores[0] else m3
    finest = len(frame.levels) - 1
    for k, (tpl, level) in enumerate(zip(frame.ref.templates, frame.levels)):
        if k > 0:
            m3 = frame.down(frame.up(m3, k - 1), k)
        image = blurred(level, cfg.blur)
        m3 = _climb(tpl, image, m3, frame, cfg) if k == finest else refine(tpl, image, m3, cfg.iterations, cfg.eps)
    refined = frame.up(m3, finest)
    return [refined] if Scored(ref_level, frame.down(refined, 0), img_level).score >= start_score else [refined, frame.up(start, 0)]


def residual_motion(frame: FramePyramid, mapping: Mapping, cfg: RegisterConfig) -> float:
    """Image px by which one Gauss-Newton step at the coarsest level moves the reference's farthest corner from
    ``mapping``'s homography (its lens term and grid kept). The step stays within the global model that states
    ``mapping`` (:attr:`Mapping.model`), no richer than ``cfg.model``: a richer step on a coarse level moves corners
    by pixels that no camera moved."""
    m3 = mapping.homography
    level = frame.level_mapping(mapping, 0)
    image = blurred(frame.levels[0], cfg.blur)
    model = MODELS[min(MODELS.index(mapping.model.split("+")[0]), MODELS.index(cfg.model))]
    stepped = frame.up(refine(frame.ref.templates[0], image, level.homography, 1, 0.0, model, level), 0)
    h, w = frame.ref.image.shape
    corners = np.array([[0, w - 1, 0, w - 1], [0, 0, h - 1, h - 1], [1, 1, 1, 1]], dtype=np.float64)
    a, b = stepped @ corners, m3 @ corners
    return float(np.hypot(*(a[:2] / a[2] - b[:2] / b[2])).max())
