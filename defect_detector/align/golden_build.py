"""A golden image from several good boards, and a golden image checked against them (``golden build``, ``golden verify``).

A golden image photographed from one board carries that board's own defects, and every board inspected against it
passes there: the golden check reads the golden image against each frame, so a defect both share never shows (issue 44:
28 of 30 boards passed against a golden image with their defect; checking the golden image against itself cannot see
it). Several good boards agree on their design where any one of them may not:

- :func:`in_golden_pixels`: each board registered into an anchor image's pixels (``align/register.py``, the golden check
  included: a board of another design is left out) and its levels matched to the anchor's (``align/photometric.py``).
- :func:`build_golden`: the per-pixel median of the boards in the first board's pixels: a defect on fewer than half of
  them is outvoted.
- :func:`golden_disagreements`: the regions where a golden image differs from the median of the boards registered into
  it (``align/golden_check.py`` ``differing``: beyond tolerance, slivers removed), at least :data:`MIN_SIDE_PX` on a
  side: where it may carry a defect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from defect_detector.align.golden_check import differing
from defect_detector.align.photometric import fit_photometric
from defect_detector.align.register import register
from defect_detector.core.config_register import RegisterConfig

MIN_BOARDS = 3
"""Fewest good boards a median can outvote one defect with."""

MIN_SIDE_PX = 8
"""Smallest side (px) of a region where the golden image and the boards disagree that is reported (thinner is noise)."""


@dataclass(frozen=True)
class Aligned:
    """Boards in an anchor's pixels: ``images`` uint8 ``[N, H, W]`` at the anchor's levels, ``covered`` bool
    ``[N, H, W]`` where each has data, ``names`` of the boards used and ``left_out`` ``(name, why)`` of the others."""

    images: np.ndarray
    covered: np.ndarray
    names: list[str]
    left_out: list[tuple[str, str]]

    def median(self, anchor: np.ndarray) -> np.ndarray:
        """uint8 ``[H, W]``: the per-pixel median of the boards where at least half of them have data, else ``anchor``."""
        stack = np.where(self.covered, self.images.astype(np.float32), np.nan)
        enough = self.covered.sum(axis=0) * 2 >= len(self.images)
        median = np.nanmedian(np.where(enough[None], stack, 0.0), axis=0)
        return np.where(enough, np.rint(median), anchor).astype(np.uint8)


@dataclass(frozen=True)
class Disagreement:
    """A region where the golden image differs from what the boards agree on: box ``(x, y, w, h)`` in golden-image
    pixels and ``share`` of its box that differs."""

    box: tuple[int, int, int, int]
    share: float

    def words(self) -> str:
        x, y, w, h = self.box
        return f"x {x + w // 2}, y {y + h // 2} ({w}x{h} px)"


def places_words(found: Sequence[Disagreement], most: int) -> str:
    """The first ``most`` disagreements in words ("x 120, y 90 (19x19 px); ...; 2 more")."""
    return "; ".join(d.words() for d in found[:most]) + (f"; {len(found) - most} more" if len(found) > most else "")


def in_golden_pixels(
    anchor: np.ndarray, boards: Sequence[tuple[str, np.ndarray]], cfg: RegisterConfig | None = None
) -> Aligned:
    """Each ``(name, uint8 [H, W])`` board registered into ``anchor``'s pixels (uint8 ``[H, W]``) and matched to its
    levels; a board that does not register (another design, the golden check) is left out with the reason."""
    images, covered, names, left_out = [], [], [], []
    for name, board in boards:
        warped, reg = register(board, anchor, cfg)
        if not reg.ok:
            left_out.append((name, reg.reason))
            continue
        valid = reg.covered(anchor.shape)
        images.append(fit_photometric(warped, anchor, valid).to_board(warped))
        covered.append(valid)
        names.append(name)
    if not images:
        empty = (0, *anchor.shape)
        return Aligned(np.zeros(empty, np.uint8), np.zeros(empty, bool), names, left_out)
    return Aligned(np.stack(images), np.stack(covered), names, left_out)


def build_golden(boards: Sequence[tuple[str, np.ndarray]], cfg: RegisterConfig | None = None) -> tuple[np.ndarray, Aligned]:
    """The golden image of good ``boards`` (``(name, uint8 [H, W])``, :data:`MIN_BOARDS` or more of one design): their
    median in the first board's pixels. ``ValueError`` when fewer than :data:`MIN_BOARDS` register."""
    anchor = boards[0][1]
    aligned = in_golden_pixels(anchor, boards, cfg)
    _check_count(aligned)
    return aligned.median(anchor), aligned


def golden_disagreements(
    golden: np.ndarray, boards: Sequence[tuple[str, np.ndarray]], cfg: RegisterConfig | None = None
) -> tuple[list[Disagreement], Aligned]:
    """Where uint8 ``golden`` ``[H, W]`` differs from the median of good ``boards`` registered into it, largest first.
    ``ValueError`` when fewer than :data:`MIN_BOARDS` register."""
    aligned = in_golden_pixels(golden, boards, cfg)
    _check_count(aligned)
    consensus = aligned.median(golden)
    difference = differing(golden, consensus, aligned.covered.all(axis=0))
    if difference.differs is None:
        return [], aligned
    count, _, stats, _ = cv2.connectedComponentsWithStats(difference.differs.view(np.uint8), connectivity=8)
    found = [
        Disagreement((int(x), int(y), int(w), int(h)), float(area) / float(w * h))
        for x, y, w, h, area in stats[1:count]
        if max(w, h) >= MIN_SIDE_PX
    ]
    return sorted(found, key=lambda d: -d.box[2] * d.box[3]), aligned


def _check_count(aligned: Aligned) -> None:
    if len(aligned.names) < MIN_BOARDS:
        why = "; ".join(f"{name}: {reason}" for name, reason in aligned.left_out[:2])
        raise ValueError(
            f"{len(aligned.names)} boards registered, {MIN_BOARDS} or more needed to outvote a defect"
            + (f" (left out: {why})" if why else "")
        )
