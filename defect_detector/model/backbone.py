"""TinyBackbone: a grayscale stem (optionally fusing a golden reference) and four stages of blocks (depthwise-separable,
or re-parameterisable dense 3x3: ``model.blocks``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from defect_detector.model.layers import ConvBNAct, DWSeparable
from defect_detector.model.rep import RepConv

BLOCK_TYPES = {"depthwise": DWSeparable, "rep": RepConv}
"""``model.blocks`` names -> block classes ``(c_in, c_out, stride)``: :class:`DWSeparable` (depthwise 3x3 + pointwise 1x1,
residual) and :class:`RepConv` (3x3 + 1x1 + identity branches, one dense 3x3 convolution once re-parameterised)."""
STEM_STRIDES = {"conv3": 2, "patch4": 4}
"""``model.stem`` names -> the stem's stride: ``conv3`` a 3x3 stride-2 convolution (stage 1 then halves the
resolution to stride 4); ``patch4`` a 4x4 stride-4 convolution over non-overlapping patches (stride 4 at once:
nothing runs at stride 2, and stage 1 keeps the resolution)."""


def make_stem(kind: str, c_in: int, c_out: int) -> ConvBNAct:
    """``[B, c_in, H, W] -> [B, c_out, H / STEM_STRIDES[kind], W / STEM_STRIDES[kind]]``, conv + BN + SiLU."""
    if kind == "conv3":
        return ConvBNAct(c_in, c_out, 3, stride=2)
    if kind == "patch4":
        return ConvBNAct(c_in, c_out, 4, stride=4, padding=0)
    raise ValueError(f"unknown stem {kind!r}: one of {', '.join(STEM_STRIDES)}")


def make_stage(c_in: int, c_out: int, depth: int, block: str = "depthwise", stride: int = 2) -> nn.Sequential:
    """One ``stride`` block that changes width, then ``depth - 1`` residual blocks, all of kind ``block``
    (:data:`BLOCK_TYPES`): ``[B, c_in, H, W] -> [B, c_out, H/stride, W/stride]``."""
    cls = BLOCK_TYPES[block]
    blocks = [cls(c_in, c_out, stride=stride)]
    blocks += [cls(c_out, c_out) for _ in range(depth - 1)]
    return nn.Sequential(*blocks)


def make_trunk(
    c_in: int, widths: Sequence[int], depths: Sequence[int], stem_channels: int, stem: str, blocks: Sequence[str]
) -> tuple[ConvBNAct, list[nn.Sequential]]:
    """The stem and the four stages (strides 4, 8, 16, 32) of a backbone, created in that order (the parameter order of
    every checkpoint): ``make_stem(stem, c_in, stem_channels)``, then ``make_stage`` per stage, stage 1 of stride 1
    after a stride-4 stem."""
    first = make_stem(stem, c_in, stem_channels)
    ins = (stem_channels, *widths[:3])
    strides = (4 // STEM_STRIDES[stem], 2, 2, 2)
    return first, [make_stage(ins[i], widths[i], depths[i], blocks[i], strides[i]) for i in range(4)]


class TinyBackbone(nn.Module):
    """``[B, in_channels, H, W]`` float in [0, 1] -> features at strides 8, 16, 32.

    ``in_channels`` 1: the image; 2: the image and its registered reference, fused at the stem
    (early fusion: the first convolution sees both and can respond to their difference).
    ``diff_channel`` (needs ``in_channels`` 2): the stem also sees ``|image - reference|`` as a third
    channel, computed here from the two (``model.fusion: diff``).
    stem (``model.stem``, :func:`make_stem`): ``conv3`` Conv(in_channels (+1) -> stem_channels, 3x3, stride 2) + BN +
    SiLU, or ``patch4`` (4x4, stride 4); then stage1..stage4 reach strides 4, 8, 16, 32 with ``widths[i]`` channels
    and ``depths[i]`` blocks of kind ``blocks[i]`` (:data:`BLOCK_TYPES`). Returns
    ``(c3 [B, widths[1], H/8, W/8], c4 [B, widths[2], H/16, W/16], c5 [B, widths[3], H/32, W/32])``.
    """

    def __init__(  # noqa: PLR0913 - one argument per model config key
        self,
        widths: tuple[int, int, int, int],
        depths: tuple[int, int, int, int],
        stem_channels: int = 32,
        in_channels: int = 1,
        diff_channel: bool = False,
        stem: str = "conv3",
        blocks: Sequence[str] = ("depthwise",) * 4,
    ) -> None:
        super().__init__()
        if diff_channel and in_channels != 2:
            raise ValueError(f"diff_channel needs in_channels 2 (image and reference), got {in_channels}")
        self.in_channels = in_channels
        self.diff_channel = diff_channel
        self.stem, stages = make_trunk(in_channels + int(diff_channel), widths, depths, stem_channels, stem, blocks)
        self.stage1, self.stage2, self.stage3, self.stage4 = stages
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
