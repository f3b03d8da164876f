"""Test-time augmentation: orientations of a square batch and the merge back into the original frame."""

from __future__ import annotations

import pytest
import torch

from defect_detector.model.tta import IDENTITY, TTA_MODES, Orientation, merge_predictions, orient_images, orientations, tta_forward

STRIDES = (4, 8)
SIZE = 32


def equivariant_predictions(images: torch.Tensor) -> torch.Tensor:
    """A stand-in dense detector that commutes with flips and transposes: per grid cell of each stride, class
    probabilities are the cell's mean and one minus it, and the box is centred on the cell with a half-width
    from the variation of the cell's column means and a half-height from that of its row means.
    ``[B, 1, S, S]`` -> ``[B, A, 4 + 2]``, anchors level by level, row-major."""
    batch = images.shape[0]
    levels = []
    for stride in STRIDES:
        side = SIZE // stride
        cells = images[:, 0].reshape(batch, side, stride, side, stride)  # [B, row, y in cell, col, x in cell]
        mean = cells.mean(dim=(2, 4))  # [B, side, side]
        half_w = 1.0 + 20.0 * cells.mean(dim=2).var(dim=-1)  # column means vary along x: [B, side, side]
        half_h = 1.0 + 20.0 * cells.mean(dim=4).var(dim=2)  # row means vary along y: [B, side, side]
        centres = (torch.arange(side, dtype=torch.float32) + 0.5) * stride
        cy, cx = centres[:, None].expand(side, side), centres[None, :].expand(side, side)
        level = torch.stack((cx - half_w, cy - half_h, cx + half_w, cy + half_h, mean, 1 - mean), dim=-1)  # [B, side, side, 6]
        levels.append(level.reshape(batch, side * side, 6))
    return torch.cat(levels, dim=1)


@pytest.mark.parametrize("mode", list(TTA_MODES))
def test_merge_undoes_every_orientation(mode: str) -> None:
    images = torch.rand(3, 1, SIZE, SIZE)
    modes = orientations(mode)
    oriented = orient_images(images, modes)
    assert oriented.shape == (3 * len(modes), 1, SIZE, SIZE)
    assert torch.equal(oriented[:3], images)  # identity first: its rows are the frames as given
    merged = merge_predictions(equivariant_predictions(oriented), modes, STRIDES, SIZE)
    torch.testing.assert_close(merged, equivariant_predictions(images), atol=1e-5, rtol=1e-5)


def test_merge_averages_disagreeing_orientations() -> None:
    # A detector biased 2 px to the right in its own frame lands 2 px right on the image as given and,
    # mapped back from the mirrored image, 2 px left: the average is centred.
    modes = (IDENTITY, Orientation(False, True, False))
    images = torch.zeros(1, 1, SIZE, SIZE)
    pred = equivariant_predictions(orient_images(images, modes))
    pred[..., [0, 2]] += 2.0
    merged = merge_predictions(pred, modes, STRIDES, SIZE)
    torch.testing.assert_close(merged, equivariant_predictions(images))


def test_transpose_swaps_box_axes() -> None:
    # A wide box predicted on the transposed image is a tall box in the original frame.
    modes = (Orientation(True, False, False),)
    pred = torch.zeros(1, (SIZE // 4) ** 2 + (SIZE // 8) ** 2, 6)
    pred[0, 0, :4] = torch.tensor([1.0, 2.0, 9.0, 3.0])  # cell (row 0, col 0) of stride 4: transposed onto itself
    merged = merge_predictions(pred, modes, STRIDES, SIZE)
    assert merged[0, 0, :4].tolist() == [2.0, 1.0, 3.0, 9.0]


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="unknown TTA mode 'd4'.*none, flip2, flip4, d8"):
        orientations("d4")
    with pytest.raises(ValueError, match="square"):
        orient_images(torch.zeros(1, 1, 32, 64), orientations("flip2"))
    with pytest.raises(ValueError, match="multiple of 4 orientations"):
        merge_predictions(torch.zeros(6, 80, 6), orientations("flip4"), STRIDES, SIZE)


def test_tta_forward_in_one_batch_or_one_call_per_orientation() -> None:
    # A stand-in deployed model: an equivariant detector that also returns per-image statistics and counts its calls.
    calls: list[int] = []

    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(x.shape[0])
        return equivariant_predictions(x), x.flatten(1).mean(1, keepdim=True)  # [N, A, 6], [N, 1]

    images = torch.rand(2, 1, SIZE, SIZE)
    modes = orientations("d8")
    want = merge_predictions(equivariant_predictions(orient_images(images, modes)), modes, STRIDES, SIZE)
    for one_batch, expected_calls in ((True, [16]), (False, [2] * 8)):
        calls.clear()
        pred, (stats,) = tta_forward(forward, images, modes, STRIDES, SIZE, one_batch)
        assert calls == expected_calls
        torch.testing.assert_close(pred, want)
        torch.testing.assert_close(stats, images.flatten(1).mean(1, keepdim=True))  # the identity pass: images as given
    calls.clear()
    plain, extras = tta_forward(equivariant_predictions, images, orientations("none"), STRIDES, SIZE, one_batch=False)
    assert extras == () and torch.equal(plain, equivariant_predictions(images))  # one pass, output as is
