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


class Template:
    """A reference level for inverse-compositional Gauss-Newton: blurred, zero-mean unit-variance ``t`` (float32
    [h, w]; ``flat``, ``flat2``: it and its square, flat), steepest-descent images ``sd`` (float32 [3, h*w]:
    rotation about the centre, x, y) and the inverse Hessian ``hinv`` (float64 [3, 3])."""

    def __init__(self, level: np.ndarray, blur: float) -> None:
        t = blurred(level, blur)
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


def refine(tpl: Template, image: np.ndarray, m3: np.ndarray, iterations: int, eps: float) -> np.ndarray:
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


class Scored:
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


def estimate(frame: FramePyramid, seed: np.ndarray, cfg: RegisterConfig) -> list[np.ndarray]:
    """Full-resolution 3x3 candidates: ``start`` (the better scoring of ``seed`` and ``seed`` corrected by phase
    correlation, at the coarsest level) refined level by level, then ``start`` if refining lowered the score."""
    ref_level, img_level = frame.ref.levels_f[0], frame.levels[0]
    m3 = frame.down(seed, 0)
    h, w = img_level.shape
    placed = cv2.warpAffine(ref_level, m3[:2], (w, h), flags=cv2.INTER_LINEAR, borderValue=float(ref_level.mean()))
    (dx, dy), _ = cv2.phaseCorrelate(placed, img_level.astype(np.float32), cv2.createHanningWindow((w, h), cv2.CV_32F))
    moved = np.array([[1, 0, dx], [0, 1, dy], [0, 0, 1]]) @ m3 if math.isfinite(dx) and math.isfinite(dy) else m3
    scores = [Scored(ref_level, m, img_level).score for m in (m3, moved)]
    start_score = max(scores)
    start = m3 = moved if scores[1] > scores[0] else m3
    for k, (tpl, level) in enumerate(zip(frame.ref.templates, frame.levels)):
        if k > 0:
            m3 = frame.down(frame.up(m3, k - 1), k)
        m3 = refine(tpl, blurred(level, cfg.blur), m3, cfg.iterations, cfg.eps)
    refined = frame.up(m3, len(frame.levels) - 1)
    return [refined] if Scored(ref_level, frame.down(refined, 0), img_level).score >= start_score else [refined, frame.up(start, 0)]


def residual_motion(frame: FramePyramid, m3: np.ndarray, cfg: RegisterConfig) -> float:
    """Image px by which one Gauss-Newton step at the coarsest level moves the reference's farthest corner from ``m3``."""
    stepped = frame.up(refine(frame.ref.templates[0], blurred(frame.levels[0], cfg.blur), frame.down(m3, 0), 1, 0.0), 0)
    h, w = frame.ref.image.shape
    corners = np.array([[0, w - 1, 0, w - 1], [0, 0, h - 1, h - 1], [1, 1, 1, 1]], dtype=np.float64)
    return float(np.hypot(*((stepped - m3)[:2] @ corners)).max())
