"""Anchor-free decoupled detection head: per-location class logits and box distances."""

from __future__ import annotations

import math

import torch
from torch import nn

from defect_detector.model.layers import DWSeparable

PRIOR_PROB = 0.01
INITIAL_DISTANCE = 2.0  # initial softplus(box) in units of the level's stride


class DecoupledHead(nn.Module):
    """One head per pyramid level with separate class and box branches.

    For each level ``[B, C, h, w]`` the class branch gives ``num_classes`` logits
    and the box branch 4 raw edge distances (softplus(raw) * stride = pixels,
    see ``postprocess.decode``). Output: ``[B, A, 4 + num_classes]`` with
    ``A = sum(h * w)`` over levels in stride order, locations row-major.
    """

    def __init__(self, channels: int, num_classes: int, num_levels: int, convs: int, box_convs: int | None = None) -> None:
        super().__init__()
        self.num_classes = num_classes
        box_convs = convs if box_convs is None else box_convs
        self.cls_branches = nn.ModuleList(
            nn.Sequential(*[DWSeparable(channels, channels) for _ in range(convs)], nn.Conv2d(channels, num_classes, 1))
            for _ in range(num_levels)
        )
        self.box_branches = nn.ModuleList(
            nn.Sequential(*[DWSeparable(channels, channels) for _ in range(box_convs)], nn.Conv2d(channels, 4, 1))
            for _ in range(num_levels)
        )
        for branch in self.cls_branches:
            nn.init.constant_(branch[-1].bias, -math.log((1 - PRIOR_PROB) / PRIOR_PROB))
        for branch in self.box_branches:
            nn.init.constant_(branch[-1].bias, math.log(math.expm1(INITIAL_DISTANCE)))

    def forward(self, feats: tuple[torch.Tensor, ...]) -> torch.Tensor:
        outputs = []
        for feat, cls_branch, box_branch in zip(feats, self.cls_branches, self.box_branches):
            level = torch.cat((box_branch(feat), cls_branch(feat)), dim=1)  # [B, 4 + C, h, w]
            outputs.append(level.flatten(2))  # [B, 4 + C, h * w]
        return torch.cat(outputs, dim=2).transpose(1, 2)  # [B, A, 4 + C]
