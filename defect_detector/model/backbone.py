"""TinyBackbone: a grayscale stem (optionally fusing a golden reference) and four stages of depthwise-separable blocks."""

from __future__ import annotations

import torch
from torch import nn

from defect_detector.model.layers import ConvBNAct, DWSeparable


def _stage(c_in: int, c_out: int, depth: int) -> nn.Sequential:
    """One stride-2 block that changes width, then ``depth - 1`` residual blocks."""
    blocks = [DWSeparable(c_in, c_out, stride=2)]
    blocks += [DWSeparable(c_out, c_out) for _ in range(depth - 1)]
    return nn.Sequential(*blocks)


class TinyBackbone(nn.Module):
    """``[B, in_channels, H, W]`` float in [0, 1] -> features at strides 8, 16, 32.

    ``in_channels`` 1: the image; 2: the image and its registered reference, fused at the stem
    (early fusion: the first convolution sees both and can respond to their difference).
    stem: Conv(in_channels -> stem_channels, 3x3, stride 2) + BN + SiLU (stride 2), then
    stage1..stage4 each halve the resolution (strides 4, 8, 16, 32) with
    ``widths[i]`` channels and ``depths[i]`` blocks. Returns
    ``(c3 [B, widths[1], H/8, W/8], c4 [B, widths[2], H/16, W/16], c5 [B, widths[3], H/32, W/32])``.
    """

    def __init__(
        self, widths: tuple[int, int, int, int], depths: tuple[int, int, int, int], stem_channels: int = 32, in_channels: int = 1
    ) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.stem = ConvBNAct(in_channels, stem_channels, 3, stride=2)
        self.stage1 = _stage(stem_channels, widths[0], depths[0])
        self.stage2 = _stage(widths[0], widths[1], depths[1])
        self.stage3 = _stage(widths[1], widths[2], depths[2])
        self.stage4 = _stage(widths[2], widths[3], depths[3])
        self.out_channels = (widths[1], widths[2], widths[3])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.stage1(self.stem(x))
        c3 = self.stage2(x)
        c4 = self.stage3(c3)
        c5 = self.stage4(c4)
        return c3, c4, c5
