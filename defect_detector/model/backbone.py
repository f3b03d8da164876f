"""TinyBackbone: a grayscale stem (optionally fusing a golden reference) and four stages of depthwise-separable blocks."""

from __future__ import annotations

import torch
from torch import nn

from defect_detector.model.layers import ConvBNAct, DWSeparable


def make_stage(c_in: int, c_out: int, depth: int) -> nn.Sequential:
    """One stride-2 block that changes width, then ``depth - 1`` residual blocks."""
    blocks = [DWSeparable(c_in, c_out, stride=2)]
    blocks += [DWSeparable(c_out, c_out) for _ in range(depth - 1)]
    return nn.Sequential(*blocks)


class TinyBackbone(nn.Module):
    """``[B, in_channels, H, W]`` float in [0, 1] -> features at strides 8, 16, 32.

    ``in_channels`` 1: the image; 2: the image and its registered reference, fused at the stem
    (early fusion: the first convolution sees both and can respond to their difference).
    ``diff_channel`` (needs ``in_channels`` 2): the stem also sees ``|image - reference|`` as a third
    channel, computed here from the two (``model.fusion: diff``).
    stem: Conv(in_channels (+1) -> stem_channels, 3x3, stride 2) + BN + SiLU (stride 2), then
    stage1..stage4 each halve the resolution (strides 4, 8, 16, 32) with
    ``widths[i]`` channels and ``depths[i]`` blocks. Returns
    ``(c3 [B, widths[1], H/8, W/8], c4 [B, widths[2], H/16, W/16], c5 [B, widths[3], H/32, W/32])``.
    """

    def __init__(
        self,
        widths: tuple[int, int, int, int],
        depths: tuple[int, int, int, int],
        stem_channels: int = 32,
        in_channels: int = 1,
        diff_channel: bool = False,
    ) -> None:
        super().__init__()
        if diff_channel and in_channels != 2:
            raise ValueError(f"diff_channel needs in_channels 2 (image and reference), got {in_channels}")
        self.in_channels = in_channels
        self.diff_channel = diff_channel
        self.stem = ConvBNAct(in_channels + int(diff_channel), stem_channels, 3, stride=2)
        self.stage1 = make_stage(stem_channels, widths[0], depths[0])
        self.stage2 = make_stage(widths[0], widths[1], depths[1])
        self.stage3 = make_stage(widths[1], widths[2], depths[2])
        self.stage4 = make_stage(widths[2], widths[3], depths[3])
        self.out_channels = (widths[1], widths[2], widths[3])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.diff_channel:
            x = with_abs_difference(x)
        x = self.stage1(self.stem(x))
        c3 = self.stage2(x)
        c4 = self.stage3(c3)
        c5 = self.stage4(c4)
        return c3, c4, c5


def with_abs_difference(x: torch.Tensor) -> torch.Tensor:
    """``[B, 2, H, W]`` (image, registered reference) -> ``[B, 3, H, W]``: the two, then ``|image - reference|``."""
    return torch.cat((x, (x[:, 0:1] - x[:, 1:2]).abs()), dim=1)
