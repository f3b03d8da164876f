"""The capture step of pair augmentation: the board as a line's day delivers it, then brought back to the golden
image's levels by the photometric registration, as the golden view does at inspection.

A line camera never sees a board as its golden image was captured (issue 42): gain and gamma drift, an offset, a
light gradient across the board, defocus, sensor noise and JPEG. :class:`LineCapture` draws those on the board of a
training pair (uint8 ``[H, W]``, the pair's frame; boxes are untouched: nothing moves), then fits the golden image's
levels to the board's (:func:`~defect_detector.align.photometric.fit_photometric`) and maps the board back with
:meth:`~defect_detector.align.photometric.Photometric.to_golden`. So the model trains on what inspection hands it: the
fit's residual, not the raw change.

Moves are not drawn as such: registration removes them, and the pair's rigid residual (``augment.ref_shift``,
``ref_rotate``) stands in for what it leaves. What a move of up to 25 px does leave is a band along the frame's edge
that the moved board does not cover, where the golden view shows the golden image itself: with probability
``seam_p`` such a band (3-25 px deep, slanted up to 1.5 degrees, on one or two sides clear of every box) is filled
with the golden image, so the model learns that the seam is not a defect. With probability ``hidden_p`` a glare spot
(saturated) or a dark occluder (a hand's edge, a shadow) covers a part of the board clear of every box, unlabelled:
inspection refuses large hidden area (``screens/hidden.py``); below its limit the model must not call it.
"""

from __future__ import annotations

import cv2
import numpy as np

from defect_detector.align.photometric import fit_photometric

GAIN = (0.85, 1.15)
GAMMA = (0.85, 1.15)
OFFSET = 10.0
"""Grey levels, +-."""
GRADIENT = 0.12
"""Largest half range of the linear light gradient across the image, as a fraction of the mean light."""
DEFOCUS = 1.2
"""Largest Gaussian sigma, pixels (half of the captures are defocused)."""
NOISE = 4.0
"""Largest sensor noise sigma, grey levels."""
JPEG_QUALITY = (85, 95)
"""JPEG quality range (half of the captures are compressed)."""
SEAM_DEPTH = (3, 25)
"""Depth range of the uncovered band of a move, pixels."""
SEAM_SLANT = 1.5
"""Largest slant of the band's inner edge, degrees."""
HIDDEN_RADIUS = (12, 60)
"""Radius range of a glare spot or an occluder, pixels."""
CLEARANCE = 12
"""Pixels kept between a box and a seam band or hidden spot."""


MOVE_SHIFT, MOVE_DEGREES, MOVE_SCALE = 25.0, 1.5, 0.005
"""A line's moves: up to 25 px, 1.5 degrees and 0.5% of scale (issue 42)."""


def line_move(shape: tuple[int, int], rng: np.random.Generator, shift: float = MOVE_SHIFT) -> np.ndarray:
    """float64 ``[2, 3]``: a random move of a frame of ``shape`` (old px -> new px), up to ``shift`` px."""
    h, w = shape
    angle, scale = float(rng.uniform(-MOVE_DEGREES, MOVE_DEGREES)), float(1 + rng.uniform(-MOVE_SCALE, MOVE_SCALE))
    matrix = cv2.getRotationMatrix2D((w / 2, h / 2), angle, scale)
    matrix[:, 2] += rng.uniform(-shift, shift, size=2)
    return matrix


def moved_boxes(boxes: np.ndarray, matrix: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """COCO xywh ``boxes`` ``[N, 4]`` moved by ``matrix``: the boxes around their moved corners, clipped to the frame,
    and which were kept (at least half of each box still in the frame)."""
    h, w = shape
    out, keep = [], []
    for x, y, bw, bh in boxes:
        corners = np.array([[x, y, 1], [x + bw, y, 1], [x, y + bh, 1], [x + bw, y + bh, 1]]) @ matrix.T
        x0, y0 = corners.min(0)
        x1, y1 = corners.max(0)
        cx0, cy0, cx1, cy1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
        inside = max(cx1 - cx0, 0) * max(cy1 - cy0, 0) / max((x1 - x0) * (y1 - y0), 1e-9)
        keep.append(inside >= 0.5)
        out.append([cx0, cy0, cx1 - cx0, cy1 - cy0])
    return np.asarray(out, np.float64).reshape(-1, 4), np.asarray(keep, bool)


def line_captured(image: np.ndarray, matrix: np.ndarray, line: LineCapture) -> np.ndarray:
    """uint8 ``image`` moved by ``matrix`` (the edge reflected: the board goes on beyond the frame) and captured."""
    h, w = image.shape
    return line.capture(cv2.warpAffine(image, matrix, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101))


def _light(shape: tuple[int, int], amplitude: float, angle: float, gain: float) -> np.ndarray:
    """float32 ``[H, W]``: ``gain * (1 + amplitude * t)``, ``t`` in [-1, 1] along direction ``angle`` (radians)."""
    h, w = shape
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    t = (xs / max(w - 1, 1) * 2 - 1) * np.cos(angle) + (ys / max(h - 1, 1) * 2 - 1) * np.sin(angle)
    t /= max(abs(np.cos(angle)) + abs(np.sin(angle)), 1e-6)
    return (gain * (1 + amplitude * t)).astype(np.float32)


def _clear_of(boxes: np.ndarray, mask: np.ndarray) -> bool:
    """Whether bool ``mask`` ``[H, W]`` keeps :data:`CLEARANCE` px away from every xyxy box of ``boxes`` ``[N, 4]``."""
    h, w = mask.shape
    for x0, y0, x1, y1 in np.asarray(boxes, np.float32).reshape(-1, 4):
        xa, ya = max(0, int(x0) - CLEARANCE), max(0, int(y0) - CLEARANCE)
        xb, yb = min(w, int(np.ceil(x1)) + CLEARANCE), min(h, int(np.ceil(y1)) + CLEARANCE)
        if xa < xb and ya < yb and mask[ya:yb, xa:xb].any():
            return False
    return True


def seam_band(shape: tuple[int, int], side: int, depth: float, slant: float) -> np.ndarray:
    """bool ``[H, W]``: the band along ``side`` (0 left, 1 top, 2 right, 3 bottom) that a board moved by ``depth`` px
    does not cover, its inner edge slanted by ``slant`` degrees."""
    h, w = shape
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    across, along, length = [(xs, ys, h), (ys, xs, w), (w - 1 - xs, ys, h), (h - 1 - ys, xs, w)][side]
    return across < depth + np.tan(np.radians(slant)) * (along - length / 2)


def hidden_spot(shape: tuple[int, int], rng: np.random.Generator) -> tuple[np.ndarray, bool]:
    """float32 ``[H, W]`` weight in [0, 1] of a random hidden spot (an ellipse of :data:`HIDDEN_RADIUS`, soft-edged),
    and whether it is glare (else a dark occluder)."""
    h, w = shape
    weight = np.zeros(shape, np.float32)
    axes = tuple(int(rng.uniform(*HIDDEN_RADIUS)) for _ in range(2))
    centre = (int(rng.uniform(0, w)), int(rng.uniform(0, h)))
    cv2.ellipse(weight, centre, axes, float(rng.uniform(0, 180)), 0, 360, 1.0, -1)
    weight = cv2.GaussianBlur(weight, (0, 0), float(rng.uniform(1.0, 6.0)))
    return weight, bool(rng.random() < 0.5)


class LineCapture:
    """Draw a line capture on the board, then match it back to the golden image's levels (module docstring).
    ``__call__(image, reference, boxes) -> image``: uint8 ``[H, W]`` each, in the same frame, boxes float32 ``[N, 4]``
    xyxy px (kept clear of seams and hidden spots); with probability ``p``, a seam band with ``seam_p`` and a hidden
    spot with ``hidden_p`` of those."""

    def __init__(self, p: float = 1.0, seam_p: float = 0.0, hidden_p: float = 0.0) -> None:
        self.p, self.seam_p, self.hidden_p = p, seam_p, hidden_p
        self.rng = np.random.default_rng()

    def set_random_state(self, rng: np.random.Generator) -> None:
        """Draw from ``rng`` from now on (``data/collate.py`` seeds each sample through ``PairTransform``)."""
        self.rng = rng

    def capture(self, board: np.ndarray) -> np.ndarray:
        """uint8 ``board`` ``[H, W]`` as one random line capture: uint8 ``[H, W]``."""
        rng = self.rng
        light = _light(board.shape, rng.uniform(0, GRADIENT), rng.uniform(0, 2 * np.pi), rng.uniform(*GAIN))
        gamma, offset = rng.uniform(*GAMMA), rng.uniform(-OFFSET, OFFSET)
        out = light * 255.0 * (board.astype(np.float32) / 255.0) ** gamma + offset
        if rng.random() < 0.5:
            out = cv2.GaussianBlur(out, (0, 0), rng.uniform(0.3, DEFOCUS))
        out += rng.normal(0.0, rng.uniform(0, NOISE), out.shape).astype(np.float32)
        out = np.clip(out + 0.5, 0, 255).astype(np.uint8)
        if rng.random() < 0.5:
            quality = int(rng.integers(JPEG_QUALITY[0], JPEG_QUALITY[1] + 1))
            ok, data = cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, quality])
            if ok:
                out = cv2.imdecode(data, cv2.IMREAD_GRAYSCALE)
        return out

    def hide(self, board: np.ndarray, boxes: np.ndarray) -> np.ndarray:
        """``board`` with a glare spot or a dark occluder clear of ``boxes`` (unchanged when no draw of 4 is clear)."""
        for _ in range(4):
            weight, glare = hidden_spot(board.shape, self.rng)
            if weight.max() > 0 and _clear_of(boxes, weight > 0.05):
                level = 255.0 if glare else float(self.rng.uniform(10, 80))
                out = board.astype(np.float32) * (1 - weight) + level * weight
                return np.clip(out + 0.5, 0, 255).astype(np.uint8)
        return board

    def seam(self, board: np.ndarray, reference: np.ndarray, boxes: np.ndarray) -> np.ndarray:
        """``board`` whose uncovered band of a move (1 or 2 sides clear of ``boxes``) shows ``reference``."""
        out = board
        for side in self.rng.permutation(4)[: int(self.rng.integers(1, 3))]:
            depth, slant = self.rng.uniform(*SEAM_DEPTH), self.rng.uniform(-SEAM_SLANT, SEAM_SLANT)
            band = seam_band(board.shape, int(side), depth, slant)
            if _clear_of(boxes, band):
                out = np.where(band, reference, out)
        return out

    def __call__(self, image: np.ndarray, reference: np.ndarray, boxes: np.ndarray | None = None) -> np.ndarray:
        if self.p <= 0 or self.rng.random() >= self.p:
            return image
        boxes = np.zeros((0, 4), np.float32) if boxes is None else boxes
        board = self.capture(image)
        if self.rng.random() < self.hidden_p:
            board = self.hide(board, boxes)
        board = fit_photometric(reference, board).to_golden(board)
        return self.seam(board, reference, boxes) if self.rng.random() < self.seam_p else board
