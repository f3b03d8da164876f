"""Shipped DeepPCB pairs (``data/samples/calib``) with golden images already in the board's pixels, as the C++ example
takes them: for the tests that pin where the C++ correlation check and Python's golden check agree and differ
(``deploy/cpp/README.md``, "Correlation check")."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from defect_detector.align.register import register

CALIB = Path(__file__).resolve().parents[1] / "data" / "samples" / "calib"
BOARDS = (("00041014", "13000044"), ("20085112", "44000113"), ("77000037", "00041070"))
"""(board, a board of another group) of the shipped samples."""
MISREGISTRATION = (6, -4)
"""The (x, y) px the "misregistered" golden image lies off its registration (``benchmarks/golden_check.py``)."""


def gray(path: Path) -> np.ndarray:
    """A shipped sample as uint8 ``[H, W]`` (a missing one fails the test, naming it)."""
    image = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    assert image is not None, f"missing sample {path}"
    return image


def paint_blobs(board: np.ndarray, seed: int = 0, blobs: int = 8, side: int = 60) -> np.ndarray:
    """``board`` with ``blobs`` irregular discs of about ``side`` px: copper (0) on substrate, substrate (255) on copper."""
    rng = np.random.default_rng(seed)
    out = board.copy()
    for _ in range(blobs):
        cx, cy = rng.integers(side, board.shape[1] - side), rng.integers(side, board.shape[0] - side)
        angles, radii = np.sort(rng.uniform(0, 2 * np.pi, 16)), side / 2 * rng.uniform(0.6, 1.3, 16)
        points = np.stack([cx + radii * np.cos(angles), cy + radii * np.sin(angles)], axis=1).astype(np.int32)
        blob = cv2.fillPoly(np.zeros_like(board), [points], 1) > 0
        out[blob] = 0 if board[blob].mean() > 127 else 255
    return out


def golden_pairs(board_id: str, other_id: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """uint8 board ``[H, W]`` and, by kind, golden images warped into its pixels (border 114): ``"true"`` its own,
    registered; ``"misregistered"`` the same moved by :data:`MISREGISTRATION`; ``"other design"`` the golden image of
    ``other_id`` (another group) where registration put it best (registration itself refuses it)."""
    board = gray(CALIB / f"{board_id}_test.jpg")
    warped, reg = register(gray(CALIB / f"{board_id}_temp.jpg"), board)
    assert reg.ok, reg.reason
    moved = cv2.warpAffine(warped, np.float32([[1, 0, MISREGISTRATION[0]], [0, 1, MISREGISTRATION[1]]]), board.shape[::-1], borderValue=114)
    other, other_reg = register(gray(CALIB / f"{other_id}_temp.jpg"), board)
    assert not other_reg.ok
    return board, {"true": warped, "misregistered": moved, "other design": other}


def textured(shape: tuple[int, int], seed: int) -> np.ndarray:
    """uint8 ``[H, W]``: a board-like texture with structure in every direction everywhere (pads, tracks at any angle,
    fine grain), so that a misregistration shows wherever it is measured."""
    rng = np.random.default_rng(seed)
    h, w = shape
    image = cv2.GaussianBlur(rng.normal(128, 40, shape).astype(np.float32), (0, 0), 1.5)
    for _ in range(120):
        x, y = int(rng.integers(0, w)), int(rng.integers(0, h))
        if rng.random() < 0.5:
            cv2.circle(image, (x, y), int(rng.integers(3, 14)), float(rng.integers(0, 255)), -1)
        else:
            end = (x + int(rng.integers(-60, 60)), y + int(rng.integers(-60, 60)))
            cv2.line(image, (x, y), end, float(rng.integers(0, 255)), int(rng.integers(2, 6)))
    return np.clip(image, 0, 255).astype(np.uint8)
