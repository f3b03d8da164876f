"""Choosing the torch device: one rule for train, predict, export and bench."""

from __future__ import annotations

import os

import torch


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"`` -> CUDA when available (under torchrun, the local rank's GPU), else the CPU; otherwise
    ``torch.device(device)``. ``ValueError`` for a device other than ``cpu`` / ``cuda[:N]``, or CUDA asked for
    where there is none."""
    name = str(device)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and "LOCAL_RANK" in os.environ:
        name = f"cuda:{os.environ['LOCAL_RANK']}"
    try:
        resolved = torch.device(name)
    except RuntimeError as exc:
        raise ValueError(f"device must be auto, cpu or cuda[:N], got {device!r}") from exc
    if resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda[:N], got {device!r}")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available")
    return resolved
