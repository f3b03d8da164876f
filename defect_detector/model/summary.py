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


def model_summary(model: torch.nn.Module, imgsz: int) -> dict[str, float]:
    """``{"params": int, "gflops": float, "imgsz": int}``."""
    return {"params": count_parameters(model), "gflops": count_flops(model, imgsz) / 1e9, "imgsz": imgsz}
