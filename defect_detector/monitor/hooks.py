"""Per-layer activation statistics gathered with forward hooks.

The statistics of a layer output ``[B, C, H, W]`` are its mean and standard
deviation over ``C, H, W`` per image (``layer_stats``; tall layers are read on
evenly spaced rows). They stay on the model's device as tensors; nothing is
copied to the host per layer or frame.

Hooks are Python code, so they also run while ``torch.jit.trace`` records the
model: the export wrapper (``deploy/export.py``) attaches the same monitor
during tracing and returns ``stats()`` as a second output, which is how the
deployed artifact reports numbers identical to the eager path.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

import torch
from torch import nn

DEFAULT_LAYERS = (
    "backbone.stem",
    "backbone.stage1",
    "backbone.stage2",
    "backbone.stage3",
    "backbone.stage4",
)
"""Monitored by default: the stem and every backbone stage. The neck outputs (``neck.out3``, ``neck.out4``,
``neck.out5``, or ``neck.out*``) can be added by name; they follow board content more than the camera,
and their statistics would cost more than the 3% of model time the monitor is allowed on a CPU."""

MAX_STAT_ROWS = 80
"""A layer taller than this is read on ``ceil(H / MAX_STAT_ROWS)``-th rows only (see :func:`layer_stats`)."""


def layer_stats(output: torch.Tensor) -> torch.Tensor:
    """``[B, C, H, W]`` activations (any memory format) -> float32 ``[B, 2]``: mean and (population) std per image.

    A layer taller than ``MAX_STAT_ROWS`` is read on every ``step``-th row (``step = ceil(H / MAX_STAT_ROWS)``),
    evenly spread over the image: at 640 px the stem (stride 2) is read every 8 input pixels, which keeps the
    statistics as sensitive to camera faults as the whole layer (measured with
    ``monitor/evaluate_drift.py``; every 50 pixels was not) at a quarter of the cost. Whole rows keep the
    reduction contiguous in both memory formats. The step depends only on the shape, so eager and traced
    models agree.
    """
    if output.dim() == 4 and output.shape[2] > MAX_STAT_ROWS:
        step = -(-output.shape[2] // MAX_STAT_ROWS)
        output = output[:, :, step // 2 :: step, :]  # [B, C, ~H/step, W]
    dims = tuple(range(1, output.dim()))
    n = output[0].numel()
    # Reduce over dims in place: flattening a channels_last tensor would copy it (~10x the cost here).
    # E[x^2] - E[x]^2 via a norm: one fast reduction each (torch.var_mean is ~20x slower on a CPU here).
    mean = output.sum(dims, dtype=torch.float32) / n
    var = (torch.linalg.vector_norm(output, dim=dims, dtype=torch.float32).square() / n - mean.square()).clamp(min=0)
    return torch.stack((mean, var.sqrt()), dim=1)


def resolve_layers(model: nn.Module, patterns: Sequence[str]) -> list[str]:
    """Module names matching ``patterns`` (exact names or ``fnmatch`` globs), in model order.

    Raises ``ValueError`` naming a pattern that matches nothing.
    """
    names = [name for name, _ in model.named_modules() if name]
    chosen: list[str] = []
    for pattern in patterns:
        matches = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not matches:
            raise ValueError(f"monitor layer {pattern!r} matches no module of {type(model).__name__}")
        chosen += [m for m in matches if m not in chosen]
    order = {n: i for i, n in enumerate(names)}
    return sorted(chosen, key=order.__getitem__)


class ActivationMonitor:
    """Records :func:`layer_stats` of chosen layers on every forward pass.

    Usage::

        monitor = ActivationMonitor(model)          # hooks attached
        raw = model(images)
        stats = monitor.stats()                      # [B, L, 2] on the model's device
        monitor.detach()                             # model exactly as before
    """

    def __init__(self, model: nn.Module, layers: Sequence[str] = DEFAULT_LAYERS) -> None:
        self.model = model
        self.layer_names = resolve_layers(model, layers)
        self._latest: dict[str, torch.Tensor] = {}
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self.attach()

    def attach(self) -> None:
        """Register the forward hooks (idempotent)."""
        if self._handles:
            return
        modules = dict(self.model.named_modules())
        for name in self.layer_names:
            self._handles.append(modules[name].register_forward_hook(self._hook(name)))

    def _hook(self, name: str):
        def record(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
            self._latest[name] = layer_stats(output)

        return record

    def stats(self) -> torch.Tensor:
        """float32 ``[B, L, 2]`` for the latest forward pass, layers in ``layer_names`` order."""
        missing = [n for n in self.layer_names if n not in self._latest]
        if missing:
            raise RuntimeError(f"no forward pass recorded yet for layers {missing}")
        return torch.stack([self._latest[n] for n in self.layer_names], dim=1)

    def detach(self) -> None:
        """Remove every hook and forget recorded values."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._latest.clear()

    @property
    def attached(self) -> bool:
        return bool(self._handles)
