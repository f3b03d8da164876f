"""Anchor-free decoupled detection head: per-location class logits and box distances."""

from __future__ import annotations

import math

import torch
from torch import nn

from defect_detector.model.layers import DWSeparable

PRIOR_PROB = 0.01
INITIAL_DISTANCE = 2.0  # initial softplus(box) in units of the level's stride
DFL_BIAS = 1.0  # initial logit of every bin of a distribution (box_bins > 0): uniform distributions


class DecoupledHead(nn.Module):
    """One head per pyramid level with separate class and box branches.

    For each level ``[B, C, h, w]`` the class branch gives ``num_classes`` logits
    and the box branch ``R = box_channels(box_bins)`` raw box values: with ``box_bins`` 0, 4 raw edge
    distances (softplus(raw) * stride = pixels); with ``box_bins`` n > 0, 4 groups of n logits, a distribution
    per edge over 0..n-1 strides (edge order l, t, r, b; see ``postprocess.decode``). Output:
    ``[B, A, R + num_classes]`` with ``A = sum(h * w)`` over levels in stride order, locations row-major.
    """

    def __init__(
        self, channels: int, num_classes: int, num_levels: int, convs: int, box_convs: int | None = None, box_bins: int = 0
    ) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.box_bins = box_bins
        box_out = box_channels(box_bins)
        box_convs = convs if box_convs is None else box_convs
        self.cls_branches = nn.ModuleList(
            nn.Sequential(*[DWSeparable(channels, channels) for _ in range(convs)], nn.Conv2d(channels, num_classes, 1))
            for _ in range(num_levels)
        )
        self.box_branches = nn.ModuleList(
            nn.Sequential(*[DWSeparable(channels, channels) for _ in range(box_convs)], nn.Conv2d(channels, box_out, 1))
            for _ in range(num_levels)
        )
        for branch in self.cls_branches:
            nn.init.constant_(branch[-1].bias, -math.log((1 - PRIOR_PROB) / PRIOR_PROB))
        for branch in self.box_branches:
            nn.init.constant_(branch[-1].bias, DFL_BIAS if box_bins else math.log(math.expm1(INITIAL_DISTANCE)))

    def forward(self, feats: tuple[torch.Tensor, ...]) -> torch.Tensor:
        outputs = []
        for feat, cls_branch, box_branch in zip(feats, self.cls_branches, self.box_branches):
            level = torch.cat((box_branch(feat), cls_branch(feat)), dim=1)  # [B, R + C, h, w]
            outputs.append(level.flatten(2))  # [B, R + C, h * w]
        return torch.cat(outputs, dim=2).transpose(1, 2)  # [B, A, R + C]


def box_channels(box_bins: int) -> int:
    """Raw box values per location: 4 direct distances (``box_bins`` 0) or 4 distributions of ``box_bins`` logits."""
    return 4 * box_bins if box_bins else 4
