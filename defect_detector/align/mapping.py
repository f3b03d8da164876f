"""The mapping of a golden image into a frame: a homography, a radial lens term, then a smooth grid of local
displacements.

A golden-image pixel ``p`` (x, y; pixel centres at integers, as ``cv2.warpAffine``) lands in the frame at

    q = L(H(p)) + D(p)

where ``H`` is a float64 3x3 homography (a move, rotation, scale, shear and perspective: a camera not square to the
board), ``L`` a radial lens term about the frame's centre (:class:`Lens`: ``u -> u + k1 (u - c) |u - c|^2 / R^2``, ``R``
the frame's half-diagonal) and ``D`` a smooth field of local displacements in frame pixels (what is left: a bowed board),
bilinear between the nodes of a coarse grid laid over the golden image (``GridNodes``). A :class:`Mapping` with neither
is the homography alone, and one whose homography's last row is ``[0, 0, 1]`` is an affine move (``cv2.warpAffine``'s
2x3 ``matrix``).

Everything that reads the golden image and the frame together (the frame view, the golden view, the covered area, the
golden check, the photometric fit's light field, calls mapped back) reads it through one :class:`Mapping`, so none of
them assumes a rigid move. Dense maps are evaluated exactly every :data:`MAP_STEP` pixels and interpolated (bilinear)
in between: the field is smooth, so the interpolation stays within 0.01 px of the exact map.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import cv2
import numpy as np

MAP_STEP = 16
"""Dense maps are evaluated exactly at nodes this many pixels apart and interpolated in between."""

MODEL_PX = 0.1
"""A part of the mapping that moves no corner of the golden image by this many frame px is not named (:attr:`Mapping.model`)."""

_INVERSE_ROUNDS = 4
"""Fixed-point rounds that invert ``q = L(H(p)) + D(p)`` for ``p`` (each multiplies the error by the local part's slope,
under 0.1)."""


_BEND_ROUNDS = 4
"""Reweighting rounds of :meth:`Mapping.bend`'s fit of the global part."""

_BEND_HUBER = 0.5
"""Frame px beyond which a node counts less in :meth:`Mapping.bend`'s fit of the global part (Huber)."""


@dataclass(frozen=True)
class GridNodes:
    """Where a grid's nodes lie in golden-image pixels: node ``(i, j)`` at ``(x0 + j * dx, y0 + i * dy)``; ``shape``:
    ``(ny, nx)``."""

    x0: float
    dx: float
    y0: float
    dy: float
    shape: tuple[int, int]

    @classmethod
    def over(cls, golden_shape: tuple[int, int], step: float, margin: float = 0.0) -> GridNodes:
        """Nodes at most ``step`` px apart over a golden image of ``golden_shape`` ``(h, w)``, the outermost ``margin`` px
        inside its edges (at most a quarter of its side)."""
        h, w = golden_shape
        mx, my = min(margin, (w - 1) / 4), min(margin, (h - 1) / 4)
        nx, ny = max(2, math.ceil((w - 1 - 2 * mx) / step) + 1), max(2, math.ceil((h - 1 - 2 * my) / step) + 1)
        return cls(mx, (w - 1 - 2 * mx) / (nx - 1), my, (h - 1 - 2 * my) / (ny - 1), (ny, nx))

    def positions(self) -> tuple[np.ndarray, np.ndarray]:
        """float64 ``(xs [ny, nx], ys [ny, nx])``: the nodes in golden-image pixels."""
        ny, nx = self.shape
        return np.meshgrid(self.x0 + self.dx * np.arange(nx), self.y0 + self.dy * np.arange(ny))

    def rescaled(self, sx: float, sy: float) -> GridNodes:
        """The same nodes in an image ``sx`` x ``sy`` times this one's size (pixel centres kept: ``x' = (x + 0.5) sx - 0.5``)."""
        return GridNodes((self.x0 + 0.5) * sx - 0.5, self.dx * sx, (self.y0 + 0.5) * sy - 0.5, self.dy * sy, self.shape)


@dataclass(frozen=True)
class Lens:
    """A radial lens term in frame pixels: ``u -> u + k1 (u - c) |u - c|^2 / radius^2``, ``c = (cx, cy)``."""

    k1: float
    cx: float
    cy: float
    radius: float

    @classmethod
    def centred(cls, k1: float, frame_shape: tuple[int, ...]) -> Lens:
        """``k1`` about the centre of a frame of ``frame_shape`` ``(H, W)``, over its half-diagonal."""
        h, w = frame_shape[:2]
        return cls(float(k1), (w - 1) / 2, (h - 1) / 2, math.hypot(w - 1, h - 1) / 2)

    def basis(self, xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """float64 ``(bx, by)``: the term's displacement per unit ``k1`` at frame pixels ``(xs, ys)``."""
        dx, dy = np.asarray(xs, np.float64) - self.cx, np.asarray(ys, np.float64) - self.cy
        r2 = (dx * dx + dy * dy) / (self.radius * self.radius)
        return dx * r2, dy * r2

    def rescaled(self, sx: float, sy: float) -> Lens:
        """The same term in an image ``sx`` x ``sy`` times this one's size (``k1`` is relative to the radius)."""
        return Lens(self.k1, (self.cx + 0.5) * sx - 0.5, (self.cy + 0.5) * sy - 0.5, self.radius * math.sqrt(sx * sy))


def sample_grid(grid: np.ndarray, nodes: GridNodes, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """float64 ``[..., C]``: ``grid`` (float ``[ny, nx, C]`` at ``nodes``) bilinear at golden pixels ``(xs, ys)`` (float
    arrays of one shape), held constant beyond the outermost nodes."""
    ny, nx = nodes.shape
    u = np.clip((np.asarray(xs, np.float64) - nodes.x0) / nodes.dx, 0, nx - 1)
    v = np.clip((np.asarray(ys, np.float64) - nodes.y0) / nodes.dy, 0, ny - 1)
    j, i = np.minimum(u.astype(np.int64), nx - 2), np.minimum(v.astype(np.int64), ny - 2)
    fu, fv = (u - j)[..., None], (v - i)[..., None]
    g = np.asarray(grid, np.float64)
    top = g[i, j] * (1 - fu) + g[i, j + 1] * fu
    bottom = g[i + 1, j] * (1 - fu) + g[i + 1, j + 1] * fu
    return top * (1 - fv) + bottom * fv


def apply_homography(h: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 ``(xs', ys')``: points ``(xs, ys)`` (float arrays of one shape) through the 3x3 homography ``h``."""
    xs, ys = np.asarray(xs, np.float64), np.asarray(ys, np.float64)
    w = h[2, 0] * xs + h[2, 1] * ys + h[2, 2]
    return (h[0, 0] * xs + h[0, 1] * ys + h[0, 2]) / w, (h[1, 0] * xs + h[1, 1] * ys + h[1, 2]) / w


def _map_nodes(shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """float64 ``(xs, ys)`` ``[ny, nx]``: the pixel centres that ``cv2.resize`` by :data:`MAP_STEP` reads its source at,
    one node beyond each edge (as ``_upsampled`` cuts them)."""
    h, w = shape
    ny, nx = -(-h // MAP_STEP) + 2, -(-w // MAP_STEP) + 2
    return np.meshgrid((np.arange(nx) - 1 + 0.5) * MAP_STEP - 0.5, (np.arange(ny) - 1 + 0.5) * MAP_STEP - 0.5)


def _upsampled(values: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """float32 ``[h, w]``: ``values`` (``[ny, nx]`` at :func:`_map_nodes` of ``shape``) interpolated to every pixel."""
    h, w = shape
    ny, nx = values.shape
    full = cv2.resize(values.astype(np.float32), (nx * MAP_STEP, ny * MAP_STEP), interpolation=cv2.INTER_LINEAR)
    return np.ascontiguousarray(full[MAP_STEP : MAP_STEP + h, MAP_STEP : MAP_STEP + w])


@dataclass(frozen=True, eq=False)
class Mapping:
    """Golden-image pixels -> frame pixels (module docstring). ``homography``: float64 ``[3, 3]`` (read-only);
    ``golden_shape``: ``(h, w)`` of the golden image; ``lens``: the radial lens term (None: none); ``grid``: float32
    ``[ny, nx, 2]`` local displacements in frame pixels at ``nodes`` (golden-image pixels), None: none."""

    homography: np.ndarray
    golden_shape: tuple[int, int]
    grid: np.ndarray | None = field(default=None, repr=False)
    nodes: GridNodes | None = None
    lens: Lens | None = None

    def __post_init__(self) -> None:
        h = np.array(self.homography, np.float64)
        h = np.vstack([h, [0.0, 0.0, 1.0]]) if h.shape == (2, 3) else h
        if h.shape != (3, 3) or not np.isfinite(h).all():
            raise ValueError(f"Mapping: expected a finite 2x3 or 3x3 matrix, got shape {np.shape(self.homography)}")
        h = h / h[2, 2]
        h.setflags(write=False)
        object.__setattr__(self, "homography", h)
        object.__setattr__(self, "golden_shape", (int(self.golden_shape[0]), int(self.golden_shape[1])))
        if (self.grid is None) != (self.nodes is None):
            raise ValueError("Mapping: a grid needs its nodes, and nodes their grid")
        if self.grid is not None:
            grid = np.array(self.grid, np.float32)
            grid.setflags(write=False)
            object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "_maps", {})  # dense maps and the bend, computed once per mapping (a line's reused one: once)

    def __eq__(self, other: object) -> bool:
        """Equal values: homography, shapes, lens term and grid (arrays compared by value)."""
        if not isinstance(other, Mapping):
            return NotImplemented
        same_grid = (self.grid is None and other.grid is None) or (
            self.grid is not None and other.grid is not None and np.array_equal(self.grid, other.grid)
        )
        return (
            np.array_equal(self.homography, other.homography)
            and self.golden_shape == other.golden_shape
            and self.lens == other.lens
            and self.nodes == other.nodes
            and same_grid
        )

    __hash__ = None  # type: ignore[assignment]

    @property
    def is_affine(self) -> bool:
        """No perspective, lens term or local grid: ``cv2.warpAffine`` with :attr:`affine` is exact."""
        return self.is_homography and bool(np.array_equal(self.homography[2], [0.0, 0.0, 1.0]))

    @property
    def is_homography(self) -> bool:
        """No lens term and no local grid: ``cv2.warpPerspective`` with :attr:`homography` is exact."""
        return self.grid is None and self.lens is None

    @property
    def affine(self) -> np.ndarray:
        """float64 ``[2, 3]``: the homography's best affine at the golden image's centre (exact when :attr:`is_affine`);
        the move, angle and scale a person reads."""
        h = self.homography
        if np.array_equal(h[2], [0.0, 0.0, 1.0]):
            out = h[:2].copy()
        else:
            cx, cy = (self.golden_shape[1] - 1) / 2, (self.golden_shape[0] - 1) / 2
            w = h[2, 0] * cx + h[2, 1] * cy + h[2, 2]
            qx, qy = apply_homography(h, np.array(cx), np.array(cy))
            jac = (h[:2, :2] - np.outer([qx, qy], h[2, :2])) / w
            out = np.hstack([jac, np.array([[qx - jac[0] @ (cx, cy)], [qy - jac[1] @ (cx, cy)]])])
        out.setflags(write=False)
        return out

    @property
    def scale(self) -> float:
        """The mean scale (frame px per golden px) at the golden image's centre: ``sqrt(|det|)`` of :attr:`affine`."""
        return float(math.sqrt(abs(np.linalg.det(self.affine[:, :2]))))

    @property
    def perspective_px(self) -> float:
        """Frame px by which the homography moves the golden image's corners away from :attr:`affine` (0: no perspective)."""
        h, w = self.golden_shape
        xs, ys = np.array([0.0, w - 1, 0.0, w - 1]), np.array([0.0, 0.0, h - 1, h - 1])
        qx, qy = apply_homography(self.homography, xs, ys)
        a = self.affine
        return float(np.hypot(qx - (a[0, 0] * xs + a[0, 1] * ys + a[0, 2]), qy - (a[1, 0] * xs + a[1, 1] * ys + a[1, 2])).max())

    @property
    def model(self) -> str:
        """The simplest model that states this mapping within :data:`MODEL_PX` at the golden image's corners: ``rigid``,
        ``similarity``, ``affine`` or ``homography``, with ``+lens`` and ``+grid`` for a lens term and a local grid."""
        a = self.affine[:, :2]
        h, w = self.golden_shape
        corners = np.array([[0, w - 1, 0, w - 1], [0, 0, h - 1, h - 1]], np.float64) - np.array([[(w - 1) / 2], [(h - 1) / 2]])
        mean, turn = (a[0, 0] + a[1, 1]) / 2, (a[1, 0] - a[0, 1]) / 2
        similar = np.array([[mean, -turn], [turn, mean]])
        scale = math.hypot(mean, turn)

        def off(m: np.ndarray) -> float:
            return float(np.hypot(*(m @ corners)).max())

        if self.perspective_px >= MODEL_PX:
            name = "homography"
        elif off(a - similar) >= MODEL_PX:
            name = "affine"
        elif off((1 - 1 / max(scale, 1e-9)) * similar) >= MODEL_PX:
            name = "similarity"
        else:
            name = "rigid"
        return name + ("+lens" if self.lens is not None else "") + ("+grid" if self.grid is not None else "")

    def bend(self, read: np.ndarray | None = None) -> np.ndarray:
        """float64 ``[ny, nx]`` frame px at the grid's nodes: what the lens term and the grid add to the homography
        there, less what a shift, a scale and the lens's radial shape explain (a robust fit over the nodes inside the golden
        image). The three parts trade with each other as they are fitted (on a flat board a lens term of 12 px at the
        corners and a grid of 9 px undoing it were read; on a pure lens, a grid holding a scale change), so a board's
        bend is read from their sum. ``read``: bool ``[ny, nx]``, the nodes whose windows the golden image's structure
        informs (``local_grid.Residual.read``): the fit and the bend are read there only, zero elsewhere (over a plain
        background round a board the grid is extrapolated, not measured: 8-9 px at a frame's corners far from a
        board that had only moved); None: every node inside the golden image. Zeros without a grid."""
        if self.grid is None or self.nodes is None:
            return np.zeros((1, 1))
        key = "bend" if read is None else ("bend", read.tobytes())
        if key in self._maps:  # read by the refusal and by the record: fitted once per mapping
            return self._maps[key]
        xs, ys = self.nodes.positions()
        qx, qy = apply_homography(self.homography, xs, ys)
        dx, dy = self.local(xs, ys)
        h, w = self.golden_shape
        inside = ((xs >= 0) & (xs <= w - 1) & (ys >= 0) & (ys <= h - 1)).ravel()
        if read is not None and read.shape == xs.shape and (inside & read.ravel()).sum() >= 9:
            inside = inside & read.ravel()
        inside = inside if inside.sum() >= 9 else np.ones_like(inside)
        ones, zeros = np.ones(qx.size), np.zeros(qx.size)
        cx, cy = float(qx[inside.reshape(qx.shape)].mean()), float(qy[inside.reshape(qy.shape)].mean())
        rows_x, rows_y = [ones, zeros, qx.ravel() - cx], [zeros, ones, qy.ravel() - cy]
        if self.lens is not None:
            bx, by = self.lens.basis(qx, qy)
            rows_x, rows_y = [*rows_x, bx.ravel()], [*rows_y, by.ravel()]
        design_x, design_y = np.stack(rows_x, 1), np.stack(rows_y, 1)
        design = np.concatenate([design_x[inside], design_y[inside]])
        target = np.concatenate([dx.ravel()[inside], dy.ravel()[inside]])
        weight = np.ones(target.size)
        for _ in range(_BEND_ROUNDS):  # Huber reweighting: a local bump is not taken for a global move
            coef = np.linalg.lstsq(design * weight[:, None], target * weight, rcond=None)[0]
            ex, ey = dx.ravel() - design_x @ coef, dy.ravel() - design_y @ coef
            off = np.tile(np.hypot(ex, ey)[inside], 2)
            weight = np.sqrt(1.0 / np.maximum(1.0, off / _BEND_HUBER))
        bend = np.where(inside, np.hypot(ex, ey), 0.0).reshape(xs.shape)
        bend.setflags(write=False)
        self._maps[key] = bend
        return bend

    def local_px(self, read: np.ndarray | None = None) -> tuple[float, float]:
        """``(largest, median)`` frame px of the grid's bend at the nodes ``read`` (:meth:`bend`; ``(0, 0)`` without a
        grid)."""
        if self.grid is None:
            return 0.0, 0.0
        norms = self.bend(read)
        within = norms if read is None or read.shape != norms.shape or not read.any() else norms[read]
        return float(within.max()), float(np.median(within))

    def with_local(self, lens: Lens | None, grid: np.ndarray | None, nodes: GridNodes | None) -> Mapping:
        """This homography with another lens term and local grid (None: none)."""
        return Mapping(self.homography, self.golden_shape, grid, nodes, lens)

    def local(self, xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """float64 ``(dx, dy)``: what the lens term and the grid add to the homography at golden pixels ``(xs, ys)``."""
        qx, qy = apply_homography(self.homography, xs, ys)
        dx, dy = np.zeros_like(qx), np.zeros_like(qy)
        if self.lens is not None:
            bx, by = self.lens.basis(qx, qy)
            dx, dy = dx + self.lens.k1 * bx, dy + self.lens.k1 * by
        if self.grid is not None:
            d = sample_grid(self.grid, self.nodes, xs, ys)
            dx, dy = dx + d[..., 0], dy + d[..., 1]
        return dx, dy

    def to_frame(self, xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """float64 ``(xs', ys')``: golden-image pixels ``(xs, ys)`` (float arrays of one shape) in frame pixels."""
        qx, qy = apply_homography(self.homography, xs, ys)
        if self.is_homography:
            return qx, qy
        dx, dy = self.local(xs, ys)
        return qx + dx, qy + dy

    def to_golden(self, xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """float64 ``(xs', ys')``: frame pixels in golden-image pixels (the inverse of :meth:`to_frame`, by fixed-point
        rounds through the lens term and the grid)."""
        inverse = np.linalg.inv(self.homography)
        xs, ys = np.asarray(xs, np.float64), np.asarray(ys, np.float64)
        px, py = apply_homography(inverse, xs, ys)
        if self.is_homography:
            return px, py
        for _ in range(_INVERSE_ROUNDS):
            dx, dy = self.local(px, py)
            px, py = apply_homography(inverse, xs - dx, ys - dy)
        return px, py

    def golden_map(self) -> tuple[np.ndarray, np.ndarray]:
        """float32 ``(map_x, map_y)`` ``[gh, gw]`` (read-only, kept with the mapping): each golden-image pixel's place in
        the frame (``cv2.remap`` reads the frame there: the golden view)."""
        if "golden" not in self._maps:
            xs, ys = _map_nodes(self.golden_shape)
            qx, qy = self.to_frame(xs, ys)
            self._maps["golden"] = _frozen(_upsampled(qx, self.golden_shape), _upsampled(qy, self.golden_shape))
        return self._maps["golden"]

    def frame_map(self, frame_shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """float32 ``(map_x, map_y)`` ``[H, W]`` (read-only, kept with the mapping per frame shape): each frame pixel's
        place in the golden image (``cv2.remap`` reads the golden image there: the frame view)."""
        key = ("frame", int(frame_shape[0]), int(frame_shape[1]))
        if key not in self._maps:
            xs, ys = _map_nodes(frame_shape)
            px, py = self.to_golden(xs, ys)
            self._maps[key] = _frozen(_upsampled(px, frame_shape), _upsampled(py, frame_shape))
        return self._maps[key]

    def golden_into_frame(
        self,
        golden: np.ndarray,
        frame_shape: tuple[int, int],
        interpolation: int = cv2.INTER_LINEAR,
        border_value: float = 0.0,
        border_mode: int = cv2.BORDER_CONSTANT,
    ) -> np.ndarray:
        """``golden`` (``[gh, gw]``, any OpenCV type) in the frame's pixels: ``[H, W]``; where it has no data,
        ``border_value`` (or OpenCV's ``border_mode``)."""
        size = (int(frame_shape[1]), int(frame_shape[0]))
        border = {"borderMode": border_mode, "borderValue": border_value}
        if self.is_affine:
            return cv2.warpAffine(golden, self.homography[:2], size, flags=interpolation, **border)
        if self.is_homography:
            return cv2.warpPerspective(golden, self.homography, size, flags=interpolation, **border)
        map_x, map_y = self.frame_map(frame_shape[:2])
        return cv2.remap(golden, map_x, map_y, interpolation, **border)

    def frame_into_golden(self, frame: np.ndarray, interpolation: int = cv2.INTER_LINEAR, border_value: float = 0.0) -> np.ndarray:
        """``frame`` (``[H, W]``, any OpenCV type) in the golden image's pixels: ``[gh, gw]``, ``border_value`` where the frame
        has no data."""
        size = (self.golden_shape[1], self.golden_shape[0])
        flags = interpolation | cv2.WARP_INVERSE_MAP
        if self.is_affine:
            return cv2.warpAffine(frame, self.homography[:2], size, flags=flags, borderValue=border_value)
        if self.is_homography:
            return cv2.warpPerspective(frame, self.homography, size, flags=flags, borderValue=border_value)
        map_x, map_y = self.golden_map()
        return cv2.remap(frame, map_x, map_y, interpolation, borderMode=cv2.BORDER_CONSTANT, borderValue=border_value)


def _frozen(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    for array in arrays:
        array.setflags(write=False)
    return arrays


def identity_mapping(shape: tuple[int, int]) -> Mapping:
    """The identity of a golden image of ``shape`` ``(h, w)`` onto a frame of its size."""
    return Mapping(np.eye(3), shape)
