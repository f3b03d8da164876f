"""Parameter and FLOP counts (``torch.utils.flop_counter``)."""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode


def count_parameters(model: torch.nn.Module) -> int:
    """Number of parameters (trainable or not)."""
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def count_flops(model: torch.nn.Module, imgsz: int) -> int:
    """FLOPs of one forward pass on a ``[1, C, imgsz, imgsz]`` input (C: the model's ``in_channels``, default 1;
    a multiply-add counts as 2)."""
    was_training = model.training
    model.eval()
    param = next(model.parameters())
    with FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, getattr(model, "in_channels", 1), imgsz, imgsz, device=param.device, dtype=param.dtype))
    model.train(was_training)
    return int(counter.get_total_flops())


@torch.no_grad()
def count_flops_cached_frame(model: torch.nn.Module, imgsz: int) -> int:
    """FLOPs of one frame of a siamese model (``model.fusion: siamese``) against golden features computed once
    outside the count (``forward_cached`` on ``[1, 1, imgsz, imgsz]``: the board's trunk pass, fusion, neck, head)."""
    was_training = model.training
    model.eval()
    param = next(model.parameters())
    x = torch.zeros(1, 1, imgsz, imgsz, device=param.device, dtype=param.dtype)
    golden = model.golden_features(x)
    with FlopCounterMode(display=False) as counter:
        model.forward_cached(x, golden)
    model.train(was_training)
    return int(counter.get_total_flops())


def model_summary(model: torch.nn.Module, imgsz: int) -> dict[str, float | str]:
    """``{"params": int, "gflops": float, "imgsz": int}`` (``gflops``: one pass of the whole input), plus for a
    reference model ``fusion`` and ``box_head``, and for a siamese one ``gflops_cached_frame`` (per frame with the
    golden image's trunk features cached, :func:`count_flops_cached_frame`)."""
    out: dict[str, float | str] = {"params": count_parameters(model), "gflops": count_flops(model, imgsz) / 1e9, "imgsz": imgsz}
    if getattr(model, "in_channels", 1) == 2:
        out["fusion"] = str(getattr(model, "fusion", "early"))
        out["box_head"] = "dfl" if getattr(model, "box_bins", 0) else "distance"
    if getattr(model, "fusion", "early") == "siamese":
        out["gflops_cached_frame"] = count_flops_cached_frame(model, imgsz) / 1e9
    return out
