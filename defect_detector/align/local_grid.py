"""The local refinement of a registration: a smooth grid of displacements for what the homography leaves (lens
distortion, a bowed board).

On one level of the registration pyramid (the finest), with the golden image's level as the template and the frame's
level pulled into it through the mapping so far, each grid node reads the move that is left by phase correlation of the
two on a window around it (:func:`_round`): a gain, an offset or a light gradient do not move it, and its range is a
quarter of the window. What each node says is weighted by its window's gradient structure (a blank window says
nothing; parallel tracks say nothing along them) and the correlation's response; the field is then the smooth one
nearest those readings, by a robust thin-plate fit over the nodes (:func:`robust_fit`), so that a defect, glare or a
hand, which moves a few nodes' readings, pulls little. Rounds of read, fit and pull again run until no node moves by
``eps``; the displacements are bounded by ``bound``.

The grid is only added where a design needs it: :func:`needs_grid` reads one round first, and a board whose largest
residual move is under ``threshold`` keeps the homography alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import cv2
import numpy as np

from defect_detector.align.mapping import GridNodes, Lens, Mapping, apply_homography

_SMOOTHNESS = 0.1
"""Weight of the grid's bending energy against a node of median information (:func:`robust_fit`)."""

_PRIOR = 0.01
"""Weight, against a node of upper-quartile information, that pulls an unmeasured node's displacement to zero (the
homography alone): a blank area is not extrapolated into a bend."""

_HUBER = 0.5
"""Residuals (in the golden level's standard deviations) are clipped to this in :func:`refine_local`."""

_MIN_RESPONSE = 0.25
"""Phase correlation responses under this read no move: a window whose content the frame does not show (measured on
DeepPCB's calibration boards: a hand gives 0.05-0.22 and reads moves of 3-40 px; a good board 0.3-0.9; a line capture
of a real photograph 0.3-0.8)."""

_FLAT = 1e-4
"""Pixels whose squared gradient (of the unit-variance golden level, per px) is under this are left out of
:func:`refine_local`'s sums: they add nothing to them, and where only the frame has structure (a neighbouring board
beside the board, a hand, a defect on plain substrate) it is not the golden image's to match."""

_STRIDE = 2
""":func:`refine_local` sums every this-many-th pixel of each row and column (a node's cell holds thousands)."""

_LEAST = 0.5
"""Least scale (level px) of the robust fit's residuals: readings this close to the fit are never taken as outliers."""

_IRLS = 3
"""Reweighting rounds of :func:`robust_fit`."""


@dataclass(frozen=True)
class LevelPair:
    """A golden-image level and a frame level to refine a level mapping on: ``template`` float32 ``[h, w]`` (the golden
    level, blurred as the registration reads it), ``image`` float32 ``[H, W]`` (the frame level, likewise)."""

    template: np.ndarray
    image: np.ndarray


def _patch(image: np.ndarray, x: float, y: float, half: int) -> tuple[slice, slice]:
    """The ``2 * half`` px square of ``image`` centred nearest ``(x, y)``, moved inside the image (it must fit)."""
    h, w = image.shape
    x0 = int(min(max(round(x) - half, 0), w - 2 * half))
    y0 = int(min(max(round(y) - half, 0), h - 2 * half))
    return slice(y0, y0 + 2 * half), slice(x0, x0 + 2 * half)


def _half(shape: tuple[int, int], step: float) -> int:
    """Half the side of a node's window (level px): the node spacing, at least 8, at most half the image's side."""
    return int(min(max(8, round(step)), shape[0] // 2, shape[1] // 2))


def _tensor(template: np.ndarray, window: tuple[slice, slice], weight: np.ndarray) -> tuple[float, float, float]:
    """The structure tensor ``(xx, xy, yy)`` of ``template``'s gradients over ``window``, per pixel, each pixel weighted
    by ``weight`` (float32, the window's shape): the Hanning window the correlation reads through, so structure only at
    a window's rim (a sliver of a board's edge in a frame of plain background, which the correlation misreads by
    several px) says little."""
    t = template[window]
    gx = cv2.Sobel(t, cv2.CV_32F, 1, 0, ksize=3, scale=1 / 8) * weight
    gy = cv2.Sobel(t, cv2.CV_32F, 0, 1, ksize=3, scale=1 / 8) * weight
    n = float(t.size)
    return float((gx * gx).sum()) / n, float((gx * gy).sum()) / n, float((gy * gy).sum()) / n


def _round(pair: LevelPair, level: Mapping, nodes: GridNodes) -> tuple[np.ndarray, np.ndarray]:
    """One round: ``(move [ny, nx, 2] in golden level px, tensor [ny, nx, 3])`` left at each of ``nodes`` by the level
    mapping ``level``. The move is read by phase correlation (``cv2.phaseCorrelate``, Hanning window, so a
    gain, an offset or a light gradient do not move it) of the golden level and the frame pulled through the mapping, on
    a window twice the node spacing around the node; the tensor ``(xx, xy, yy)`` is the window's gradient structure per
    pixel times the correlation's response, zero where the frame does not cover most of the window or the response is
    under :data:`_MIN_RESPONSE` (a hand, glare or another board there: nothing of the window matches): what the move says.
    The window is applied here, not by ``phaseCorrelate``'s ``window`` argument: OpenCV 5.0 multiplies its inputs by it in
    place."""
    map_x, map_y = level.golden_map()
    pulled = cv2.remap(pair.image, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=float("nan"))
    valid = pulled == pulled
    pulled = np.where(valid, pulled, pair.template)
    half = _half(pair.template.shape, min(nodes.dx, nodes.dy))
    hanning = cv2.createHanningWindow((2 * half, 2 * half), cv2.CV_32F)
    xs, ys = nodes.positions()
    move = np.zeros((*nodes.shape, 2), np.float32)
    tensor = np.zeros((*nodes.shape, 3))
    for (i, j), x in np.ndenumerate(xs):
        window = _patch(pair.template, x, ys[i, j], half)
        if valid[window].mean() < 0.5:
            continue
        (dx, dy), response = cv2.phaseCorrelate(pair.template[window] * hanning, pulled[window] * hanning)
        if not (math.isfinite(dx) and math.isfinite(dy)) or max(abs(dx), abs(dy)) >= half / 2 or response < _MIN_RESPONSE:
            continue
        move[i, j] = (dx, dy)
        tensor[i, j] = np.array(_tensor(pair.template, window, hanning)) * max(float(response), 0.0)
    return move, tensor


def _to_frame(mapping: Mapping, nodes: GridNodes, move: np.ndarray) -> np.ndarray:
    """float32 ``[ny, nx, 2]``: ``move`` (golden level px at ``nodes``) through the homography's local linear part."""
    xs, ys = nodes.positions()
    h = mapping.homography
    w = h[2, 0] * xs + h[2, 1] * ys + h[2, 2]
    qx, qy = (h[0, 0] * xs + h[0, 1] * ys + h[0, 2]) / w, (h[1, 0] * xs + h[1, 1] * ys + h[1, 2]) / w
    jxx, jxy = (h[0, 0] - qx * h[2, 0]) / w, (h[0, 1] - qx * h[2, 1]) / w
    jyx, jyy = (h[1, 0] - qy * h[2, 0]) / w, (h[1, 1] - qy * h[2, 1]) / w
    mx, my = move[..., 0], move[..., 1]
    return np.stack([jxx * mx + jxy * my, jyx * mx + jyy * my], -1).astype(np.float32)


def bending(shape: tuple[int, int]) -> np.ndarray:
    """float64 ``[N, N]`` (``N = ny * nx``): the thin-plate bending energy of a field over a ``shape`` ``(ny, nx)`` node grid,
    from its second differences along x and y and its mixed difference (``d^T B d``)."""
    ny, nx = shape
    index = np.arange(ny * nx).reshape(ny, nx)
    rows = []
    for i, j, coeffs in (
        *((i, j, ((0, 0, 1), (0, 1, -2), (0, 2, 1))) for i in range(ny) for j in range(nx - 2)),
        *((i, j, ((0, 0, 1), (1, 0, -2), (2, 0, 1))) for i in range(ny - 2) for j in range(nx)),
        *((i, j, ((0, 0, 2**0.5), (0, 1, -(2**0.5)), (1, 0, -(2**0.5)), (1, 1, 2**0.5))) for i in range(ny - 1) for j in range(nx - 1)),
    ):
        row = np.zeros(ny * nx)
        for di, dj, c in coeffs:
            row[index[i + di, j + dj]] = c
        rows.append(row)
    d = np.array(rows).reshape(-1, ny * nx)
    return d.T @ d


def _tukey(residual: np.ndarray, scale: float) -> np.ndarray:
    r = residual / (4.685 * scale)
    return np.where(np.abs(r) < 1, (1 - r * r) ** 2, 0.0)


def robust_fit(
    observed: np.ndarray, tensor: np.ndarray, energy: np.ndarray, lens: np.ndarray, grid: bool = True
) -> tuple[float, np.ndarray]:
    """``(k1, grid)``: the lens term's ``k1`` and the smooth field (float32 ``[ny, nx, 2]``) whose sum (``k1 * lens +
    grid``; ``lens``: float ``[ny, nx, 2]``, the lens term's basis at the nodes, ``Lens.basis``) is nearest ``observed``
    (float ``[ny, nx, 2]``) where the nodes' ``tensor`` (``[ny, nx, 3]``: ``xx``, ``xy``, ``yy``) says they were measured,
    the grid bending little (``energy``: :func:`bending`, times :data:`_SMOOTHNESS`) and staying near zero where nothing
    was measured (:data:`_PRIOR`). Each axis's grid is solved on its own, weighted by its tensor's diagonal over the upper
    quartile node's, and ``k1`` in closed form over both (its Schur complement); :data:`_IRLS` rounds of Tukey's biweight
    on the distance to the fit (scale: 1.4826 MAD, at least :data:`_LEAST` px) let no few nodes (a defect, glare) pull
    it. ``grid`` False: the lens term alone (the grid stays zero)."""
    ny, nx = observed.shape[:2]
    n = ny * nx
    info = np.stack([tensor[..., 0], tensor[..., 2]], -1).reshape(n, 2)
    info = info / _typical(info.sum(1))
    obs, basis = observed.reshape(n, 2).astype(np.float64), lens.reshape(n, 2).astype(np.float64)
    robust, k1, fit = np.ones(n), 0.0, np.zeros((n, 2))
    measured = info.sum(1) > 0.05
    for _ in range(_IRLS):
        solved, num, den = [], 0.0, 0.0
        for axis in range(2):
            w = info[:, axis] * robust
            if not grid:
                solved.append(np.zeros((n, 2)))
                num, den = num + float((w * basis[:, axis]) @ obs[:, axis]), den + float((w * basis[:, axis]) @ basis[:, axis])
                continue
            both = np.linalg.solve(np.diag(w + _PRIOR) + _SMOOTHNESS * energy, np.stack([w * obs[:, axis], w * basis[:, axis]], 1))
            rest_o, rest_b = w * (obs[:, axis] - both[:, 0]), w * (basis[:, axis] - both[:, 1])  # W - W M^-1 W applied
            num, den = num + float(basis[:, axis] @ rest_o), den + float(basis[:, axis] @ rest_b)
            solved.append(both)
        k1 = num / den if den > 1e-12 else 0.0
        fit = np.stack([both[:, 0] - k1 * both[:, 1] for both in solved], 1)
        distance = np.hypot(*(obs - fit - k1 * basis).T)
        spread = 1.4826 * float(np.median(distance[measured])) if measured.any() else _LEAST
        robust = _tukey(distance, max(spread, _LEAST))
    return k1, fit.reshape(ny, nx, 2).astype(np.float32)


def _lens_basis(pair: LevelPair, mapping: Mapping, nodes: GridNodes) -> tuple[Lens, np.ndarray]:
    """The lens term (``k1`` 0) about the frame level's centre, and its basis at the nodes' places in the frame level
    (float ``[ny, nx, 2]``)."""
    lens = Lens.centred(0.0, pair.image.shape)
    xs, ys = nodes.positions()
    qx, qy = apply_homography(mapping.homography, xs, ys)
    return lens, np.stack(lens.basis(qx, qy), -1)


def fit_local(  # noqa: PLR0913 - the pair, its mapping, the grid's spacing and the rounds' stop and bound
    pair: LevelPair, mapping: Mapping, step: float, rounds: int, eps: float, bound: float
) -> Mapping:
    """The level ``mapping``'s homography with the lens term and the local grid (nodes ``step`` level px apart over the
    golden level) that best register ``pair`` (module docstring), each grid displacement at most ``bound`` level px;
    started from ``mapping``'s own where its grid has these nodes. The first half of the ``rounds`` fit the lens term
    alone, the rest both."""
    nodes = GridNodes.over(mapping.golden_shape, step, _half(mapping.golden_shape, step))
    energy = bending(nodes.shape)
    lens, basis = _lens_basis(pair, mapping, nodes)
    current = mapping if mapping.nodes == nodes else mapping.with_local(None, None, None)
    for round_ in range(rounds):
        move, tensor = _round(pair, current, nodes)
        dx, dy = current.local(*nodes.positions())
        lens_only = round_ < rounds // 2  # the lens term first: the grid would take up its smooth field as well
        k1, grid = robust_fit(np.stack([dx, dy], -1) + _to_frame(current, nodes, move), tensor, energy, basis, not lens_only)
        norms = np.hypot(grid[..., 0], grid[..., 1])
        grid *= np.minimum(1.0, bound / np.maximum(norms, 1e-9))[..., None].astype(np.float32)
        fitted = current.with_local(Lens(k1, lens.cx, lens.cy, lens.radius), grid, nodes)
        fx, fy = fitted.local(*nodes.positions())
        change = float(np.hypot(fx - dx, fy - dy).max())
        current = fitted
        if change < eps and not lens_only:
            break
    return current


@dataclass(frozen=True)
class Residual:
    """What a mapping leaves unexplained, read by one round of :func:`_round` over the nodes that say something (a tensor
    of a twentieth of the upper quartile node's or more): ``largest`` and ``median`` move (px) and where the largest is
    (``x``, ``y``, golden px); ``coherent``: the largest move its neighbouring nodes also read (the second largest of its
    3x3 nodes): a bend or a move spans windows, a defect moves one window's reading. ``determined``: ``coherent`` of the
    moves' parts each window's structure determines (:func:`_determined`), and ``x``, ``y`` its place (golden px): what
    the mapping really leaves, which ``register.max_residual`` bounds. All in the level's px until :meth:`scaled`.
    ``read``: bool ``[ny, nx]``, the nodes that said something (None: none was read), where a board's bend is read
    (``Mapping.bend``)."""

    largest: float = 0.0
    median: float = 0.0
    coherent: float = 0.0
    x: float = math.nan
    y: float = math.nan
    determined: float = 0.0
    read: np.ndarray | None = field(default=None, repr=False, compare=False)

    def scaled(self, factor: float, at: tuple[float, float]) -> Residual:
        """This residual's moves times ``factor`` and its place ``at``."""
        moves = (self.largest * factor, self.median * factor, self.coherent * factor)
        return Residual(*moves, *at, self.determined * factor, self.read)


def residual(pair: LevelPair, level: Mapping, step: float) -> Residual:
    """The :class:`Residual` the level mapping ``level`` leaves on ``pair``, over nodes ``step`` level px apart."""
    nodes = GridNodes.over(level.golden_shape, step, _half(level.golden_shape, step))
    move, tensor = _round(pair, level, nodes)
    info = tensor[..., 0] + tensor[..., 2]
    sure = info >= 0.05 * _typical(info)
    if not sure.any():
        return Residual()
    moved = np.where(sure, np.hypot(move[..., 0], move[..., 1]), -1.0)
    determined = np.where(sure, _determined(move, tensor), -1.0)
    i, j = np.unravel_index(int(np.argmax(determined)), determined.shape)
    xs, ys = nodes.positions()
    values = moved[sure]
    place = float(xs[i, j]), float(ys[i, j])
    return Residual(float(values.max()), float(np.median(values)), _coherent(moved), *place, _coherent(determined), sure)


def _typical(info: np.ndarray) -> float:
    """The upper quartile of the nodes' information ``info`` (their tensors' traces) over the nodes that read something:
    a board in a frame of plain background leaves most windows blank, and their zeros set no scale (a quartile of zero
    took a window with a sliver of board edge for a measured one, and its 6 px misreading refused a board that had
    only moved)."""
    read = info[info > 0]
    return max(float(np.percentile(read, 75)), 1e-12) if read.size else 1e-12


def _coherent(lengths: np.ndarray) -> float:
    """The largest of ``lengths`` (``[ny, nx]``, -1 where nothing was read) that a neighbouring node also reads: the
    second largest of the 3x3 nodes around the largest."""
    i, j = np.unravel_index(int(np.argmax(lengths)), lengths.shape)
    around = np.sort(lengths[max(i - 1, 0) : i + 2, max(j - 1, 0) : j + 2].ravel())[::-1]
    return float(max(around[1], 0.0)) if around.size > 1 else 0.0


def _determined(move: np.ndarray, tensor: np.ndarray) -> np.ndarray:
    """float64 ``[ny, nx]``: the length of each node's ``move`` (``[ny, nx, 2]``) along what its window's structure
    ``tensor`` (``[ny, nx, 3]``: xx, xy, yy) determines, ``sqrt(m^T T m / lambda_max)``: the whole move in a textured
    window, only its part across the edge on a straight edge. Along an edge a phase correlation reads any slide (a
    DeepPCB board's long copper edge read 40 px along itself, and a board registered within a pixel was refused)."""
    xx, xy, yy = tensor[..., 0], tensor[..., 1], tensor[..., 2]
    mx, my = move[..., 0].astype(np.float64), move[..., 1].astype(np.float64)
    largest = (xx + yy) / 2 + np.sqrt(((xx - yy) / 2) ** 2 + xy**2)
    energy = xx * mx * mx + 2 * xy * mx * my + yy * my * my
    return np.sqrt(np.maximum(energy, 0.0) / np.maximum(largest, 1e-12))


def _cells(nodes: GridNodes, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each pixel of a golden level of ``shape``: its cell (flat index of the node at the cell's top left, ``[h*w]``),
    and the flat indices ``[4, h*w]`` and bilinear weights ``[4, h*w]`` of the four nodes around it (as
    :func:`~defect_detector.align.mapping.sample_grid` reads the grid)."""
    ny, nx = nodes.shape
    h, w = shape
    u = np.clip((np.arange(w, dtype=np.float64) - nodes.x0) / nodes.dx, 0, nx - 1)
    v = np.clip((np.arange(h, dtype=np.float64) - nodes.y0) / nodes.dy, 0, ny - 1)
    j, i = np.minimum(u.astype(np.int64), nx - 2), np.minimum(v.astype(np.int64), ny - 2)
    fu, fv = u - j, v - i
    cell = (i[:, None] * nx + j[None, :]).ravel()
    uu, vv = np.broadcast_to(fu[None, :], (h, w)).ravel(), np.broadcast_to(fv[:, None], (h, w)).ravel()
    index = np.stack([cell, cell + 1, cell + nx, cell + nx + 1])
    weight = np.stack([(1 - uu) * (1 - vv), uu * (1 - vv), (1 - uu) * vv, uu * vv])
    return cell, index, weight


def _normal(cell: np.ndarray, weight: np.ndarray, nodes: GridNodes, g: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The Gauss-Newton normal matrix ``[2n + 1, 2n + 1]`` and right-hand side ``[2n + 1]`` of the grid's ``n`` nodes
    (x then y displacement each) and the lens term's ``k1`` (last), from the per-pixel frame gradients ``fx``, ``fy``,
    the lens column ``fk`` and the residual ``err`` (``g``), summed cell by cell (``np.bincount``)."""
    fx, fy, fk, err = g
    ny, nx = nodes.shape
    n = ny * nx
    corners = np.array([0, 1, nx, nx + 1])
    cells = (np.arange(ny - 1)[:, None] * nx + np.arange(nx - 1)[None, :]).ravel()  # each cell by its top left node
    normal, rhs = np.zeros((2 * n + 1, 2 * n + 1)), np.zeros(2 * n + 1)
    columns = (fx, fy)
    products = {(0, 0): fx * fx, (0, 1): fx * fy, (1, 1): fy * fy}

    def per_cell(values: np.ndarray) -> np.ndarray:
        return np.bincount(cell, values, n)[cells]

    for a in range(4):
        ia = cells + corners[a]
        for ca in range(2):
            wa = weight[a] * columns[ca]
            rhs[2 * ia + ca] += per_cell(wa * err)
            normal[2 * n, 2 * ia + ca] += per_cell(wa * fk)
        for b in range(a, 4):
            ib = cells + corners[b]
            both = weight[a] * weight[b]
            for (ca, cb), product in products.items():
                block = per_cell(both * product)
                normal[2 * ia + ca, 2 * ib + cb] += block
                if (a, ca) != (b, cb):
                    normal[2 * ib + cb, 2 * ia + ca] += block
                if ca != cb and a != b:
                    normal[2 * ia + cb, 2 * ib + ca] += block
                    normal[2 * ib + ca, 2 * ia + cb] += block
    normal[: 2 * n, 2 * n] = normal[2 * n, : 2 * n]
    normal[2 * n, 2 * n], rhs[2 * n] = float(fk @ fk), float(fk @ err)
    return normal, rhs


def refine_local(pair: LevelPair, level: Mapping, iterations: int, eps: float, bound: float) -> Mapping:
    """``level``'s lens term and grid refined by Gauss-Newton on every pixel of the level (as ``register_fit.refine``
    refines the homography): the frame pulled through the mapping matches the golden level up to gain and offset, the
    residuals clipped (Huber), the grid's bending and size held by :data:`_SMOOTHNESS` and :data:`_PRIOR` relative to a
    node's mean information. Stops once no node moves by ``eps`` level px."""
    nodes = level.nodes
    n = nodes.shape[0] * nodes.shape[1]
    cell, _, weight = _cells(nodes, level.golden_shape)
    h, w = level.golden_shape
    sampled = ((np.arange(h)[:, None] % _STRIDE == 0) & (np.arange(w)[None, :] % _STRIDE == 0)).ravel()
    energy = np.kron(bending(nodes.shape), np.eye(2))
    lens = level.lens or Lens.centred(0.0, pair.image.shape)
    t = pair.template.ravel()
    tgx = cv2.Sobel(pair.template, cv2.CV_32F, 1, 0, ksize=3, scale=1 / 8).ravel()
    tgy = cv2.Sobel(pair.template, cv2.CV_32F, 0, 1, ksize=3, scale=1 / 8).ravel()
    jac = np.linalg.inv(level.affine[:, :2]).T  # golden gradients -> frame gradients
    textured = sampled & (tgx * tgx + tgy * tgy > _FLAT)  # the golden image's own structure: not a neighbour's, a hand's
    current = level
    for _ in range(iterations):
        map_x, map_y = current.golden_map()
        pulled = cv2.remap(pair.image, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=float("nan"))
        valid = (pulled == pulled).ravel()
        if valid.mean() < 0.1:
            break
        cv2.patchNaNs(pulled, 0.0)
        p = pulled.ravel()
        gain = float(t[valid].std()) / max(float(p[valid].std()), 1e-6)
        err = np.clip((p - float(p[valid].mean())) * gain - (t - float(t[valid].mean())), -_HUBER, _HUBER) * valid
        pgx = cv2.Sobel(pulled, cv2.CV_32F, 1, 0, ksize=3, scale=1 / 8).ravel() * gain
        pgy = cv2.Sobel(pulled, cv2.CV_32F, 0, 1, ksize=3, scale=1 / 8).ravel() * gain
        gx, gy = 0.5 * (tgx + pgx) * valid, 0.5 * (tgy + pgy) * valid  # the symmetric (ESM) gradient
        fx, fy = jac[0, 0] * gx + jac[0, 1] * gy, jac[1, 0] * gx + jac[1, 1] * gy
        used = np.flatnonzero(textured & (fx * fx + fy * fy > _FLAT))  # plain pixels add nothing to the sums
        fx, fy, err = fx[used], fy[used], err[used]
        bx, by = lens.basis(map_x.ravel()[used], map_y.ravel()[used])
        normal, rhs = _normal(cell[used], weight[:, used], nodes, (fx, fy, fx * bx + fy * by, err))
        scale = max(float(np.diag(normal)[: 2 * n].mean()), 1e-12)
        grid = np.array(current.grid, np.float64).reshape(-1) if current.grid is not None else np.zeros(2 * n)
        k1 = current.lens.k1 if current.lens is not None else 0.0
        penalty = scale * (_SMOOTHNESS * energy + _PRIOR * np.eye(2 * n))
        normal[: 2 * n, : 2 * n] += penalty
        rhs[: 2 * n] += penalty @ grid
        step = -np.linalg.solve(normal + 1e-9 * scale * np.eye(2 * n + 1), rhs)
        grid = (grid + step[: 2 * n]).reshape(*nodes.shape, 2).astype(np.float32)
        norms = np.hypot(grid[..., 0], grid[..., 1])
        grid *= np.minimum(1.0, bound / np.maximum(norms, 1e-9))[..., None].astype(np.float32)
        current = current.with_local(Lens(k1 + float(step[2 * n]), lens.cx, lens.cy, lens.radius), grid, nodes)
        if float(np.abs(step[: 2 * n]).max()) < eps:
            break
    return current
