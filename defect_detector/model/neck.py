"""A light PAN neck: lateral 1x1, top-down then bottom-up fusion by addition."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from defect_detector.model.layers import ConvBNAct, DWSeparable


class TinyPAN(nn.Module):
    """Fuses ``(c3, c4, c5)`` at strides 8, 16, 32 into three maps of ``channels`` each.

    Top-down: ``p4 = block(l4 + up(l5))``, ``p3 = block(l3 + up(p4))``;
    bottom-up: ``n4 = block(p4 + down(p3))``, ``n5 = block(l5 + down(n4))``.
    Returns ``(p3 [B, C, H/8, W/8], n4 [B, C, H/16, W/16], n5 [B, C, H/32, W/32])``.
    """

    def __init__(self, in_channels: tuple[int, int, int], channels: int) -> None:
        super().__init__()
        self.lateral3 = ConvBNAct(in_channels[0], channels, 1)
        self.lateral4 = ConvBNAct(in_channels[1], channels, 1)
        self.lateral5 = ConvBNAct(in_channels[2], channels, 1)
        self.top_down4 = DWSeparable(channels, channels)
        self.top_down3 = DWSeparable(channels, channels)
        self.down3 = ConvBNAct(channels, channels, 3, stride=2, groups=channels)
        self.down4 = ConvBNAct(channels, channels, 3, stride=2, groups=channels)
        self.out3 = DWSeparable(channels, channels)
        self.out4 = DWSeparable(channels, channels)
        self.out5 = DWSeparable(channels, channels)

    def forward(self, feats: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        l3, l4, l5 = self.lateral3(feats[0]), self.lateral4(feats[1]), self.lateral5(feats[2])
        p4 = self.top_down4(l4 + F.interpolate(l5, size=l4.shape[-2:], mode="nearest"))
        p3 = self.out3(self.top_down3(l3 + F.interpolate(p4, size=l3.shape[-2:], mode="nearest")))
        n4 = self.out4(p4 + self.down3(p3))
        n5 = self.out5(l5 + self.down4(n4))
        return p3, n4, n5
