"""The registration's mapping (align/mapping.py): what it calls a bend is what no camera explains."""

from __future__ import annotations

import numpy as np

from defect_detector.align.mapping import GridNodes, Lens, Mapping, apply_homography

SHAPE = (1280, 1280)


def _grid_against_lens(nodes: GridNodes, lens: Lens) -> np.ndarray:
    """float32 ``[ny, nx, 2]``: at each node (identity homography), the opposite of what ``lens`` adds there."""
    bx, by = lens.basis(*apply_homography(np.eye(3), *nodes.positions()))
    return -lens.k1 * np.stack([bx, by], axis=-1).astype(np.float32)


def test_a_lens_term_and_a_grid_that_undoes_it_are_no_bend() -> None:
    """Fitted one after another, the lens term and the grid trade with each other (a flat board at 2x read a lens of
    12 px at its corners and a grid of 9 px undoing it): their sum is flat, so its bend is zero, while the grid alone
    reads 9 px and more."""
    nodes = GridNodes.over(SHAPE, 96.0)
    lens = Lens.centred(-0.013, SHAPE)
    undone = Mapping(np.eye(3), SHAPE, _grid_against_lens(nodes, lens), nodes, lens)
    assert float(np.hypot(undone.grid[..., 0], undone.grid[..., 1]).max()) > 9.0
    assert undone.local_px()[0] < 0.01


def test_a_local_bump_is_a_bend_a_scale_is_not() -> None:
    """A grid holding a 0.5% scale about the centre is explained by the global part (no bend); a 6 px bump at one
    place stays a bend of about its height, however the global part is fitted."""
    nodes = GridNodes.over(SHAPE, 96.0)
    xs, ys = nodes.positions()
    c = (SHAPE[1] - 1) / 2
    scale = np.stack([0.005 * (xs - c), 0.005 * (ys - c)], axis=-1).astype(np.float32)
    assert Mapping(np.eye(3), SHAPE, scale, nodes, None).local_px()[0] < 0.01
    bump = np.zeros_like(scale)
    height = 6.0 * np.exp(-((xs - 900) ** 2 + (ys - 300) ** 2) / (2 * 100.0**2))
    bump[..., 1] = height
    largest = Mapping(np.eye(3), SHAPE, bump, nodes, None).local_px()[0]
    assert 5.0 < largest < 6.5
