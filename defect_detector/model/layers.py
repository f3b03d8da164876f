"""Building blocks: conv + BN + SiLU, and the depthwise-separable block."""

from __future__ import annotations

import torch
from torch import nn
from torchvision.ops import Conv2dNormActivation


class ConvBNAct(Conv2dNormActivation):
    """torchvision's ``Conv2d(k, stride, groups, padding (k - 1) // 2 unless given, no bias) -> BatchNorm2d -> SiLU``,
    children ``0, 1, 2``; ``[B, Cin, H, W] -> [B, Cout, H/s, W/s]``."""

    def __init__(self, c_in: int, c_out: int, kernel: int = 3, stride: int = 1, groups: int = 1, padding: int | None = None) -> None:
        super().__init__(c_in, c_out, kernel, stride, padding, groups=groups, activation_layer=nn.SiLU)


class DWSeparable(nn.Module):
    """Depthwise 3x3 (``groups=c_in``) then pointwise 1x1, each with BN + SiLU.

    ``[B, Cin, H, W] -> [B, Cout, H/stride, W/stride]``; adds the input back
    (residual) when the stride is 1 and the channel count is unchanged.
    """

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.depthwise = ConvBNAct(c_in, c_in, 3, stride, groups=c_in)
        self.pointwise = ConvBNAct(c_in, c_out, 1)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pointwise(self.depthwise(x))
        return x + y if self.residual else y
