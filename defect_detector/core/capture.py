"""The capture model: a board as a line's camera delivers it against its golden image (DESIGN.md "Captures"). Every
parameter of a capture lives here, once; training pairs (``data/line_capture.py``), ``teach``'s captures
(``jobs/teach_sets.py``) and the benchmarks (``line_captures``, ``photo_captures``, ``hidden_roc``) draw from it.

A capture is geometric, then photometric, every factor applied together:

- geometry (:class:`CaptureGeometry`, source px -> captured px; the source is the board in its golden image's pixels):
  the board bows (a smooth displacement field of up to 2 px), the camera sees it through a homography (a move of up
  to 25 px and 1.5 degrees, a scale within 0.5%, and perspective: the corners moved by up to 0.3% of the side), and
  the lens distorts radially about the image centre: ``r_d = r * (1 + k1 * (r / R)^2)``, ``R`` the half-diagonal,
  ``k1`` within +-0.02;
- light (:class:`CaptureLight`): ``gain * (1 + gradient * t) * 255 * (x / 255)^gamma + offset`` (``t`` in [-1, 1]
  along a random direction: a linear light gradient of up to +-12%), then defocus (Gaussian, sigma 0.3-1.2, half of
  the captures), sensor noise (sigma up to 4 levels), a binarized line's threshold (Otsu; ``CaptureLight.threshold``,
  for a binarized design only) and JPEG (quality 85-95, half of the captures);
- locally, a glare spot or a dark occluder (a hand's edge, a shadow): :func:`hidden_spot`.

:class:`CaptureModel` holds the ranges every factor is drawn from (uniformly): :data:`CAPTURE` is a line's day,
:data:`GENTLE` a gentle capture, :meth:`CaptureModel.only` one factor alone or at a fixed value, :func:`named_model`
reads a model's name (``line``, ``gentle``, ``scale``, ``scale-1.005``). Draws are made in one fixed order whatever
the model, so one seed draws the same value of a factor under every model that has its range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import cv2
import numpy as np

Range = tuple[float, float]


@dataclass(frozen=True)
class CaptureModel:
    """The ranges a capture's factors are drawn from, uniformly (module docstring); the defaults are a line's day.

    ``shift`` px (each axis), ``degrees``, ``scale``: the move of the homography, about the image centre;
    ``perspective``: how far each corner moves, as a share of the side (x of the width, y of the height), in a random
    direction; ``k1``: radial distortion over the half-diagonal; ``bow``: the bow field's largest displacement, px;
    ``gain``, ``offset`` (grey levels), ``gamma``; ``gradient``: the half range of the linear light gradient, a share of
    the light; ``defocus``: Gaussian sigma px, applied with probability ``defocus_p``; ``noise``: sensor noise sigma,
    grey levels; ``jpeg``: quality, applied with probability ``jpeg_p``. Local factors: ``hidden_radius`` px, the
    radii of a glare spot or an occluder; ``occluder``: the grey levels of a dark occluder."""

    shift: Range = (-25.0, 25.0)
    degrees: Range = (-1.5, 1.5)
    scale: Range = (0.995, 1.005)
    perspective: Range = (0.0, 0.003)
    k1: Range = (-0.02, 0.02)
    bow: Range = (0.0, 2.0)
    gain: Range = (0.85, 1.15)
    offset: Range = (-10.0, 10.0)
    gamma: Range = (0.85, 1.15)
    gradient: Range = (0.0, 0.12)
    defocus: Range = (0.3, 1.2)
    defocus_p: float = 0.5
    noise: Range = (0.0, 4.0)
    jpeg: Range = (85, 95)
    jpeg_p: float = 0.5
    hidden_radius: Range = (12.0, 60.0)
    occluder: Range = (10.0, 80.0)

    def __post_init__(self) -> None:
        for name in (*FACTORS, "hidden_radius", "occluder"):
            low, high = getattr(self, name)
            if not low <= high:
                raise ValueError(f"capture model: {name} must be a range (low, high) with low <= high, got {(low, high)}")
        for name, least in (("scale", 1e-3), ("gain", 1e-3), ("gamma", 1e-3), ("jpeg", 1), ("perspective", 0), ("bow", 0)):
            if getattr(self, name)[0] < least:
                raise ValueError(f"capture model: {name} must be at least {least}, got {getattr(self, name)}")
        if self.jpeg[1] > 100 or not 0 <= self.defocus_p <= 1 or not 0 <= self.jpeg_p <= 1:
            raise ValueError("capture model: jpeg quality within 1-100, defocus_p and jpeg_p within [0, 1]")

    @classmethod
    def only(cls, *names: str, **values: Range) -> CaptureModel:
        """Every factor off (the identity) but ``names`` (at a line's day ranges, :data:`CAPTURE`) and ``values``
        (``scale=(1.005, 1.005)``: that range, a fixed value when low equals high; always applied, so ``defocus`` and
        ``jpeg`` given a value get probability 1). ``ValueError`` names an unknown factor."""
        unknown = sorted((set(names) | set(values)) - set(FACTORS))
        if unknown:
            raise ValueError(f"unknown capture factor {', '.join(unknown)}: the factors are {', '.join(FACTORS)}")
        line, fields = cls(), dict(_OFF)
        for name in names:
            fields[name] = getattr(line, name)
            if name in _CHANCE:
                fields[_CHANCE[name]] = getattr(line, _CHANCE[name])
        for name, (low, high) in values.items():
            fields[name] = (float(low), float(high))
            if name in _CHANCE:
                fields[_CHANCE[name]] = 1.0
        return cls(**fields)


FACTORS = ("shift", "degrees", "scale", "perspective", "k1", "bow", "gain", "offset", "gamma", "gradient", "defocus", "noise", "jpeg")
"""The factors a capture draws, in :class:`CaptureModel`'s order."""
_OFF = {
    "shift": (0.0, 0.0), "degrees": (0.0, 0.0), "scale": (1.0, 1.0), "perspective": (0.0, 0.0), "k1": (0.0, 0.0),
    "bow": (0.0, 0.0), "gain": (1.0, 1.0), "offset": (0.0, 0.0), "gamma": (1.0, 1.0), "gradient": (0.0, 0.0),
    "defocus_p": 0.0, "noise": (0.0, 0.0), "jpeg_p": 0.0,
}  # fmt: skip
"""The identity of every factor."""
_CHANCE = {"defocus": "defocus_p", "jpeg": "jpeg_p"}

CAPTURE = CaptureModel()
"""A line's day (DESIGN.md "Captures")."""
GENTLE = CaptureModel(shift=(-8.0, 8.0), degrees=(-0.4, 0.4), scale=(1.0, 1.0), perspective=(0.0, 0.0), k1=(0.0, 0.0),
                      bow=(0.0, 0.0), gain=(0.9, 1.1))  # fmt: skip
"""A gentle capture (issue 55): moves up to 8 px and 0.4 degrees, gain 0.9-1.1, no scale, perspective, distortion or
bow; light, tone, defocus, noise and JPEG as a line's day."""


def named_model(name: str) -> CaptureModel:
    """The model ``name`` says: ``line`` (:data:`CAPTURE`), ``gentle`` (:data:`GENTLE`), ``off`` (no factor), a factor
    alone at a line's day range (``scale``), or at a fixed value (``scale-1.005``, ``k1--0.02``, ``jpeg-85``).
    ``ValueError`` in one line for any other name."""
    if name in ("line", "gentle", "off"):
        return {"line": CAPTURE, "gentle": GENTLE, "off": CaptureModel.only()}[name]
    factor, _, value = name.partition("-")
    try:
        return CaptureModel.only(factor) if not value else CaptureModel.only(**{factor: (float(value), float(value))})
    except ValueError as exc:
        raise ValueError(f"capture {name!r}: give line, gentle, off, a factor or factor-value (scale-1.005): {exc}") from exc


_BUMPS = 3
"""Smooth bumps summed into a bow field."""
_SAMPLES = 17
"""Samples a side of the coarse grid a field's largest displacement is read on."""
_ITERATIONS = 30
"""Most fixed-point steps of the inverse map (each shrinks the error by 10 or more for the model's factors); it stops
once no point is off by 1e-5 px."""


def _step(shape: tuple[int, int]) -> int:
    """Pixels between the knots of a map's coarse grid, 4-16 (a 128th of the shorter side): bilinear between them
    stays within 0.005 px of the map (a lens's k1 of 0.02 bends it most)."""
    return int(np.clip(min(shape) // 128, 4, 16))


def _apply_homography(matrix: np.ndarray, xy: np.ndarray) -> np.ndarray:
    """float64 ``xy`` ``[N, 2]`` through float64 ``matrix`` ``[3, 3]``: ``[N, 2]``."""
    out = xy @ matrix[:2, :2].T + matrix[:2, 2]
    return out / (xy @ matrix[2, :2] + matrix[2, 2])[:, None]


@dataclass(frozen=True)
class CaptureGeometry:
    """A drawn capture geometry, source px -> captured px (module docstring), for a frame of ``shape`` ``(H, W)``:
    ``homography`` float64 ``[3, 3]`` (move, rotation, scale, perspective), ``k1`` (radial distortion over the
    half-diagonal, about ``((W - 1) / 2, (H - 1) / 2)``), ``bow`` float64 ``[K, 5]``: the bow field's Gaussian bumps
    ``(x, y, sigma, dx, dy)`` px (the field at a point: the sum of ``(dx, dy) * exp(-d^2 / (2 sigma^2))``)."""

    homography: np.ndarray = field(repr=False)
    k1: float
    bow: np.ndarray = field(repr=False)
    shape: tuple[int, int]

    @classmethod
    def make(  # noqa: PLR0913 - one keyword per factor
        cls,
        shape: tuple[int, int],
        shift: tuple[float, float] = (0.0, 0.0),
        degrees: float = 0.0,
        scale: float = 1.0,
        corners: np.ndarray | None = None,
        k1: float = 0.0,
        bow: np.ndarray | None = None,
    ) -> CaptureGeometry:
        """The geometry of these factors: ``corners`` float64 ``[4, 2]``: how far (px) the frame's corners
        ``(0, 0), (W-1, 0), (W-1, H-1), (0, H-1)`` move by perspective (None: none); then a rotation by ``degrees``
        (counter-clockwise as seen, ``cv2.getRotationMatrix2D``) and ``scale`` about the centre, and ``shift`` (x, y)
        px; ``bow``: :attr:`bow` (None: flat)."""
        h, w = int(shape[0]), int(shape[1])
        frame = np.array([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]], np.float32)
        moved = frame + (np.zeros((4, 2)) if corners is None else np.asarray(corners, np.float64)).astype(np.float32)
        perspective = cv2.getPerspectiveTransform(frame, moved).astype(np.float64)
        move = np.eye(3)
        move[:2] = cv2.getRotationMatrix2D(((w - 1) / 2, (h - 1) / 2), float(degrees), float(scale))
        move[:2, 2] += np.asarray(shift, np.float64)
        bumps = np.zeros((0, 5)) if bow is None else np.asarray(bow, np.float64).reshape(-1, 5)
        return cls(move @ perspective, float(k1), bumps, (h, w))

    @property
    def _centre(self) -> np.ndarray:
        h, w = self.shape
        return np.array([(w - 1) / 2, (h - 1) / 2])

    def bow_at(self, xy: np.ndarray) -> np.ndarray:
        """The bow field at float64 source px ``xy`` ``[N, 2]``: float64 ``[N, 2]`` px."""
        out = np.zeros_like(xy, dtype=np.float64)
        for x, y, sigma, dx, dy in self.bow:
            weight = np.exp(-((xy[:, 0] - x) ** 2 + (xy[:, 1] - y) ** 2) / (2 * sigma**2))
            out += weight[:, None] * np.array([dx, dy])
        return out

    def points(self, xy: np.ndarray) -> np.ndarray:
        """float64 source px ``xy`` ``[N, 2]`` -> their captured px ``[N, 2]``: bowed, through the homography, then
        the lens."""
        xy = np.asarray(xy, np.float64).reshape(-1, 2)
        seen = _apply_homography(self.homography, xy + self.bow_at(xy))
        if self.k1 == 0:
            return seen
        h, w = self.shape
        off = seen - self._centre
        r2 = (off**2).sum(1) / ((w * w + h * h) / 4.0)
        return self._centre + off * (1 + self.k1 * r2)[:, None]

    def _jacobian(self) -> np.ndarray:
        """float64 ``[2, 2]``: the homography's derivative at the centre."""
        m, (x, y) = self.homography, self._centre
        z = m[2, 0] * x + m[2, 1] * y + m[2, 2]
        u, v = _apply_homography(m, self._centre[None])[0]
        return np.array([[m[0, 0] - m[2, 0] * u, m[0, 1] - m[2, 1] * u], [m[1, 0] - m[2, 0] * v, m[1, 1] - m[2, 1] * v]]) / z

    def inverse(self, xy: np.ndarray) -> np.ndarray:
        """float64 captured px ``xy`` ``[N, 2]`` -> the source px ``[N, 2]`` that :meth:`points` maps there (fixed-point
        steps from the homography's inverse, each corrected through the homography's derivative at the centre)."""
        target = np.asarray(xy, np.float64).reshape(-1, 2)
        source = _apply_homography(np.linalg.inv(self.homography), target)
        step = np.linalg.inv(self._jacobian()).T
        for _ in range(_ITERATIONS):
            error = target - self.points(source)
            source = source + error @ step
            if len(error) == 0 or np.abs(error).max() < 1e-5:
                break
        return source

    def _field(self, mapping: str, margin: int) -> tuple[np.ndarray, np.ndarray]:
        """float32 ``(x, y)`` ``[H + 2m, W + 2m]``: ``mapping`` (``points`` or ``inverse``) of every pixel of the frame
        grown by ``margin`` px on each side (pixel ``[i, j]`` is px ``(j - m, i - m)``), read on a coarse grid of
        knots (:func:`_step`) and bilinear between them."""
        h, w = self.shape[0] + 2 * margin, self.shape[1] + 2 * margin
        step = _step(self.shape)
        ny, nx = -(-h // step) + 2, -(-w // step) + 2  # one knot beyond each edge
        gy, gx = (np.mgrid[0:ny, 0:nx].astype(np.float64) - 0.5) * step - 0.5 - margin  # knots as cv2.resize reads them
        knots = np.stack([gx.ravel(), gy.ravel()], 1)
        moved = (getattr(self, mapping)(knots) - knots).reshape(ny, nx, 2).astype(np.float32)
        full = cv2.resize(moved, (nx * step, ny * step), interpolation=cv2.INTER_LINEAR)[step : step + h, step : step + w]
        xs = np.arange(w, dtype=np.float32)[None, :] - np.float32(margin)
        ys = np.arange(h, dtype=np.float32)[:, None] - np.float32(margin)
        return full[..., 0] + xs, full[..., 1] + ys

    def maps(self, margin: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """float32 ``(map_x, map_y)`` ``[H + 2m, W + 2m]`` for ``cv2.remap``: each captured pixel's source px (the
        inverse of :meth:`points`, within 0.01 px); ``margin``: the captured frame grown by that many px a side
        (pixel ``[i, j]`` is captured px ``(j - m, i - m)``)."""
        return self._field("inverse", margin)

    def forward_maps(self) -> tuple[np.ndarray, np.ndarray]:
        """float32 ``(map_x, map_y)`` ``[H, W]``: each source pixel's captured px (:meth:`points`, within 0.01 px)."""
        return self._field("points", 0)

    def warp(self, image: np.ndarray, border_mode: int = cv2.BORDER_REFLECT_101, margin: int = 0) -> np.ndarray:
        """``image`` ``[H, W]`` (source px) as captured: ``[H + 2m, W + 2m]`` (:meth:`maps`), bilinear; beyond the
        source, ``border_mode`` (reflected by default: the board goes on beyond the frame)."""
        map_x, map_y = self.maps(margin)
        return cv2.remap(image, map_x, map_y, cv2.INTER_LINEAR, borderMode=border_mode)

    def boxes(self, xyxy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Source boxes ``xyxy`` ``[N, 4]`` px as captured: float64 ``[N, 4]`` xyxy around each box's moved outline
        (16 points an edge), clipped to the frame; and bool ``[N]``, kept: at least half of the moved box in frame."""
        boxes = np.asarray(xyxy, np.float64).reshape(-1, 4)
        t = np.linspace(0.0, 1.0, 16)
        x0, y0, x1, y1 = (boxes[:, k : k + 1] for k in range(4))
        xs = np.concatenate([x0 + t * (x1 - x0), x0 + t * (x1 - x0), np.repeat(x0, 16, 1), np.repeat(x1, 16, 1)], 1)
        ys = np.concatenate([np.repeat(y0, 16, 1), np.repeat(y1, 16, 1), y0 + t * (y1 - y0), y0 + t * (y1 - y0)], 1)
        moved = self.points(np.stack([xs.ravel(), ys.ravel()], 1)).reshape(len(boxes), -1, 2)
        around = np.concatenate([moved.min(1), moved.max(1)], 1) if len(boxes) else np.zeros((0, 4))
        h, w = self.shape
        clipped = np.clip(around, 0, [w, h, w, h])
        area = (around[:, 2] - around[:, 0]) * (around[:, 3] - around[:, 1])
        inside = (clipped[:, 2] - clipped[:, 0]) * (clipped[:, 3] - clipped[:, 1])
        return clipped, inside >= 0.5 * np.maximum(area, 1e-9)

    def _grid(self) -> np.ndarray:
        """float64 ``[S*S, 2]``: :data:`_SAMPLES` a side over the frame, its edges included."""
        h, w = self.shape
        gy, gx = np.meshgrid(np.linspace(0, h - 1, _SAMPLES), np.linspace(0, w - 1, _SAMPLES), indexing="ij")
        return np.stack([gx.ravel(), gy.ravel()], 1)

    @property
    def reach(self) -> int:
        """The largest displacement of a source pixel over the frame, px, rounded up, plus 2: the margin a capture
        needs so that every source pixel is seen (:meth:`Capture.seen_back`)."""
        grid = self._grid()
        return int(math.ceil(np.linalg.norm(self.points(grid) - grid, axis=1).max())) + 2

    @property
    def scale(self) -> float:
        """The homography's scale at the centre: the square root of its derivative's determinant."""
        return float(math.sqrt(abs(np.linalg.det(self._jacobian()))))

    @property
    def perspective(self) -> float:
        """Px: how far the homography puts the frame's farthest corner from where the affine map nearest it (least
        squares over the four corners) puts it."""
        h, w = self.shape
        corners = np.array([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]], np.float64)
        seen = _apply_homography(self.homography, corners)
        design = np.concatenate([corners, np.ones((4, 1))], 1)
        affine, *_ = np.linalg.lstsq(design, seen, rcond=None)
        return float(np.linalg.norm(design @ affine - seen, axis=1).max())

    @property
    def bow_px(self) -> float:
        """The bow field's largest displacement over the frame, px."""
        return float(np.linalg.norm(self.bow_at(self._grid()), axis=1).max())


def _draw_bow(shape: tuple[int, int], rng: np.random.Generator, amplitude: float) -> np.ndarray:
    """float64 ``[K, 5]`` Gaussian bumps (:attr:`CaptureGeometry.bow`) of a random smooth field whose largest
    displacement over the frame is ``amplitude`` px: :data:`_BUMPS` bumps, centred anywhere within a quarter of the
    frame beyond it, sigma a quarter to half of the longer side (no bump shorter than half the board)."""
    h, w = shape
    side = max(h, w)
    centres = rng.uniform(-0.25, 1.25, (_BUMPS, 2)) * [w, h]
    sigmas = rng.uniform(0.25, 0.5, _BUMPS) * side
    angles, sizes = rng.uniform(0, 2 * np.pi, _BUMPS), rng.uniform(0.5, 1.0, _BUMPS)
    bumps = np.column_stack([centres, sigmas, sizes * np.cos(angles), sizes * np.sin(angles)])
    if amplitude <= 0:
        return np.zeros((0, 5))
    largest = CaptureGeometry.make(shape, bow=bumps).bow_px
    bumps[:, 3:] *= amplitude / max(largest, 1e-12)
    return bumps


def draw_geometry(shape: tuple[int, int], rng: np.random.Generator, model: CaptureModel = CAPTURE) -> CaptureGeometry:
    """A random :class:`CaptureGeometry` of ``model`` for a frame of ``shape`` ``(H, W)``."""
    h, w = shape
    shift, degrees, scale = rng.uniform(*model.shift, 2), rng.uniform(*model.degrees), rng.uniform(*model.scale)
    share, direction = rng.uniform(*model.perspective, 4), rng.uniform(0, 2 * np.pi, 4)
    corners = share[:, None] * np.column_stack([np.cos(direction), np.sin(direction)]) * [w, h]
    k1 = rng.uniform(*model.k1)
    bow = _draw_bow((h, w), rng, rng.uniform(*model.bow))
    return CaptureGeometry.make((h, w), tuple(shift), degrees, scale, corners, k1, bow)


def light_field(shape: tuple[int, int], gradient: float, direction: float) -> np.ndarray:
    """float32 ``[H, W]``: ``1 + gradient * t``, ``t`` in [-1, 1] along ``direction`` (radians) across the frame."""
    h, w = shape
    xs, ys = np.linspace(-1, 1, w, dtype=np.float32)[None, :], np.linspace(-1, 1, h, dtype=np.float32)[:, None]
    reach = max(abs(np.cos(direction)) + abs(np.sin(direction)), 1e-6)
    t = xs * np.float32(np.cos(direction) / reach) + ys * np.float32(np.sin(direction) / reach)
    return np.float32(1) + np.float32(gradient) * t


@dataclass(frozen=True)
class CaptureLight:
    """A drawn photometric capture (module docstring): ``gain``, ``gamma``, ``offset`` (levels), ``gradient`` (half
    range, share of the light) along ``direction`` (radians), ``defocus`` (Gaussian sigma px; 0: sharp), ``noise``
    (sigma, levels), drawn from ``seed``, ``jpeg`` (quality; 0: none), ``threshold``: a binarized line's, which
    thresholds each image (Otsu) before it is stored. The defaults change nothing."""

    gain: float = 1.0
    gamma: float = 1.0
    offset: float = 0.0
    gradient: float = 0.0
    direction: float = 0.0
    defocus: float = 0.0
    noise: float = 0.0
    seed: int = 0
    jpeg: int = 0
    threshold: bool = False

    def apply(self, image: np.ndarray) -> np.ndarray:
        """uint8 ``image`` ``[H, W]`` under this light: uint8 ``[H, W]``."""
        out = self.gain * 255.0 * (image.astype(np.float32) / 255.0) ** np.float32(self.gamma) + np.float32(self.offset)
        if self.gradient:
            out *= light_field(image.shape, self.gradient, self.direction)
        if self.defocus > 0:
            out = cv2.GaussianBlur(out, (0, 0), self.defocus)
        if self.noise > 0:
            out += np.random.default_rng(self.seed).normal(0.0, self.noise, out.shape).astype(np.float32)
        out = np.clip(out + 0.5, 0, 255).astype(np.uint8)
        if self.threshold:
            out = cv2.threshold(out, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)[1]
        if self.jpeg:
            ok, data = cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, self.jpeg])
            if ok:
                out = cv2.imdecode(data, cv2.IMREAD_GRAYSCALE)
        return out


def draw_light(rng: np.random.Generator, model: CaptureModel = CAPTURE) -> CaptureLight:
    """A random :class:`CaptureLight` of ``model``."""
    gradient, direction, gain = rng.uniform(*model.gradient), rng.uniform(0, 2 * np.pi), rng.uniform(*model.gain)
    gamma, offset = rng.uniform(*model.gamma), rng.uniform(*model.offset)
    blurred, sigma = rng.random() < model.defocus_p, rng.uniform(*model.defocus)
    noise, seed = rng.uniform(*model.noise), int(rng.integers(2**31))
    compressed, quality = rng.random() < model.jpeg_p, int(rng.integers(int(model.jpeg[0]), int(model.jpeg[1]) + 1))
    return CaptureLight(gain, gamma, offset, gradient, direction, sigma if blurred else 0.0, noise, seed, quality if compressed else 0)


@dataclass(frozen=True)
class Capture:
    """One drawn capture: its ``geometry`` (recorded, so that boxes and maps follow it) and ``light``."""

    geometry: CaptureGeometry
    light: CaptureLight = CaptureLight()

    def apply(self, image: np.ndarray, border_mode: int = cv2.BORDER_REFLECT_101) -> np.ndarray:
        """uint8 ``image`` ``[H, W]`` (source px) as captured: moved (:meth:`CaptureGeometry.warp`), then lit
        (:meth:`CaptureLight.apply`): uint8 ``[H, W]``."""
        return self.light.apply(self.geometry.warp(image, border_mode))

    def seen_back(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """uint8 ``image`` ``[H, W]`` captured, then resampled back into its own pixels through the geometry's exact
        inverse (the golden view of a perfect registration): uint8 ``[H, W]``, and bool ``[H, W]``, the uncovered
        area (source px whose captured px fall outside the captured frame). The capture is taken over the frame grown
        by :attr:`CaptureGeometry.reach` px a side, so that the uncovered area shows the board as if the camera saw
        further, under the same light."""
        margin = self.geometry.reach
        seen = self.light.apply(self.geometry.warp(image, cv2.BORDER_REFLECT_101, margin))
        map_x, map_y = self.geometry.forward_maps()
        back = cv2.remap(seen, map_x + np.float32(margin), map_y + np.float32(margin), cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101)
        h, w = image.shape
        return back, (map_x < 0) | (map_x > w - 1) | (map_y < 0) | (map_y > h - 1)


def draw_capture(shape: tuple[int, int], rng: np.random.Generator, model: CaptureModel = CAPTURE) -> Capture:
    """A random :class:`Capture` of ``model`` for a frame of ``shape`` ``(H, W)``: its geometry, then its light."""
    return Capture(draw_geometry(shape, rng, model), draw_light(rng, model))


def hidden_spot(shape: tuple[int, int], rng: np.random.Generator, model: CaptureModel = CAPTURE) -> tuple[np.ndarray, float]:
    """A random hidden spot on a frame of ``shape``: float32 ``[H, W]`` weight in [0, 1] (an ellipse of radii within
    ``model.hidden_radius``, soft-edged), and the level it shows: 255 for glare (half of the spots), else a dark
    occluder's (``model.occluder``: a hand's edge, a shadow)."""
    h, w = shape
    weight = np.zeros(shape, np.float32)
    axes = tuple(int(rng.uniform(*model.hidden_radius)) for _ in range(2))
    centre = (int(rng.uniform(0, w)), int(rng.uniform(0, h)))
    cv2.ellipse(weight, centre, axes, float(rng.uniform(0, 180)), 0, 360, 1.0, -1)
    weight = cv2.GaussianBlur(weight, (0, 0), float(rng.uniform(1.0, 6.0)))
    glare, level = rng.random() < 0.5, float(rng.uniform(*model.occluder))
    return weight, 255.0 if glare else level

