"""Re-parameterisable convolution (RepVGG / MobileOne): three branches to train, one plain 3x3 convolution to deploy.

A :class:`RepConv` trains with a 3x3 convolution, a 1x1 convolution and (when the shape allows) an identity, each
followed by its own BatchNorm, summed, then SiLU. In eval mode every branch is linear, so their sum is one 3x3
convolution with a bias: :func:`reparameterize` replaces each ``RepConv`` of a model, in place, by that convolution
as a :class:`~defect_detector.model.layers.ConvBNAct` whose BatchNorm is already folded (``nn.Identity``), the form
the exporters' fusers (``export.fuse_conv_bn``, ``export.onednn.fuse_conv_silu``) and every artifact already know.
A dense 3x3 convolution runs much nearer the CPU's peak than a depthwise one (more FLOPs, fewer bytes per FLOP).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_weights
from torchvision.ops import Conv2dNormActivation

from defect_detector.model.layers import ConvBNAct


class RepConv(nn.Module):
    """``SiLU(BN(conv3x3(x)) + BN(conv1x1(x)) [+ BN(x)])``: ``[B, Cin, H, W] -> [B, Cout, H/stride, W/stride]``.

    The identity branch exists when ``stride`` is 1 and ``c_in == c_out`` (it is the block's residual). Trained as
    three branches; :meth:`fused` gives the equivalent single convolution of an eval-mode block."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.c_in, self.c_out, self.stride = c_in, c_out, stride
        self.conv3 = Conv2dNormActivation(c_in, c_out, 3, stride, activation_layer=None)
        self.conv1 = Conv2dNormActivation(c_in, c_out, 1, stride, activation_layer=None)
        self.identity = nn.BatchNorm2d(c_in) if stride == 1 and c_in == c_out else None
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv3(x) + self.conv1(x)
        if self.identity is not None:
            y = y + self.identity(x)
        return self.act(y)

    def fused_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The single convolution of this eval-mode block: ``(weight [Cout, Cin, 3, 3], bias [Cout])``, float32 like
        the block. The 1x1 kernel is padded to 3x3 at its centre; the identity is a 3x3 kernel with 1 at the centre of
        channel i -> i. Each branch's BatchNorm is folded with its running statistics first."""
        if self.training:
            raise ValueError("RepConv.fused_weights needs an eval-mode block (BatchNorm running statistics)")
        w3, b3 = _fold(self.conv3[0].weight, self.conv3[1])
        w1, b1 = _fold(self.conv1[0].weight, self.conv1[1])
        weight, bias = w3 + F.pad(w1, [1, 1, 1, 1]), b3 + b1
        if self.identity is not None:
            eye = torch.zeros_like(w3)
            eye[torch.arange(self.c_in), torch.arange(self.c_in), 1, 1] = 1.0
            wi, bi = _fold(eye, self.identity)
            weight, bias = weight + wi, bias + bi
        return weight, bias

    @torch.no_grad()
    def fused(self) -> ConvBNAct:
        """The deployable block: a :class:`ConvBNAct` ``(Conv2d 3x3 with bias, Identity, SiLU)`` giving this eval-mode
        block's outputs (to float rounding), on the block's device and dtype."""
        weight, bias = self.fused_weights()
        block = ConvBNAct(self.c_in, self.c_out, 3, self.stride)
        conv = nn.Conv2d(self.c_in, self.c_out, 3, self.stride, padding=1, bias=True)
        conv.weight.copy_(weight)
        conv.bias.copy_(bias)
        block[0], block[1] = conv, nn.Identity()
        return block.to(device=weight.device, dtype=weight.dtype).eval()


def _fold(weight: torch.Tensor, bn: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """A bias-free convolution ``weight [Cout, Cin, k, k]`` followed by the eval-mode BatchNorm ``bn`` -> the one
    convolution's ``(weight, bias [Cout])`` (``torch.nn.utils.fusion.fuse_conv_bn_weights``)."""
    assert isinstance(bn, nn.BatchNorm2d) and bn.running_mean is not None and bn.running_var is not None
    w, b = fuse_conv_bn_weights(weight, None, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)
    return w.detach(), b.detach()


def reparameterize(model: nn.Module) -> int:
    """Replace every :class:`RepConv` of the eval-mode ``model`` by its :meth:`RepConv.fused` block, in place.

    Module names stay the same, so monitored layers still resolve (``model`` itself, the root, is never replaced); the
    state dict changes, so fuse deploy copies only (a fused model no longer loads training checkpoints). Returns the
    number of blocks replaced (0: nothing to do)."""
    if model.training:
        raise ValueError("reparameterize needs an eval-mode model (BatchNorm running statistics)")
    targets = [(name, module) for name, module in model.named_modules() if name and isinstance(module, RepConv)]
    for name, module in targets:
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, module.fused())
    return len(targets)
