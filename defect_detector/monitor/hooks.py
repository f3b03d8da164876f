"""Per-layer activation statistics gathered with forward hooks.

The statistics of a layer output ``[B, C, H, W]`` are its mean and standard
deviation over ``C, H, W`` per image (``layer_sums`` and ``stats_from_sums``; tall layers are read on
evenly spaced rows). They stay on the model's device as tensors; nothing is
copied to the host per layer or frame.

Hooks are Python code, so they also run while ``torch.jit.trace`` records the
model: the export wrapper (``export/deploy_model.py``) attaches the same monitor
during tracing and returns ``stats()`` as a second output, which is how the
deployed artifact reports numbers identical to the eager path.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence

import torch
from torch import nn

from defect_detector.core.constants import DEFAULT_LAYERS

MAX_STAT_ROWS = 40
"""A layer taller than this is read on ``ceil(H / MAX_STAT_ROWS)``-th rows only (see :func:`layer_sums`)."""


def _rows(output: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``[B, C, H, W]`` -> (``[B * R, K]`` image rows, ``R``): ``R = H`` rows of ``K = W * C`` values per image
    (channels_last storage) or ``R = C * H`` rows of ``K = W`` (contiguous storage). A view when the strides
    allow it, row-sliced layers included; otherwise reshape copies. ``R`` is a Python int, so a traced
    graph keeps its batch dimension dynamic."""
    channels, height, width = (int(d) for d in output.shape[1:])
    if channels > 1 and output.stride(1) == 1:
        return output.permute(0, 2, 3, 1).reshape(-1, width * channels), height  # [B*H, W*C]
    return output.reshape(-1, width), channels * height  # [B*C*H, W]


def _sampled(output: torch.Tensor) -> torch.Tensor:
    """The part of a ``[B, C, H, W]`` layer output that the statistics read: every ``ceil(H / MAX_STAT_ROWS)``-th
    row of a layer taller than :data:`MAX_STAT_ROWS`, starting half a step in (all of a shorter layer)."""
    height = int(output.shape[2])
    if height <= MAX_STAT_ROWS:
        return output
    step = -(-height // MAX_STAT_ROWS)
    return output[:, :, step // 2 :: step, :]  # [B, C, ~H/step, W]


def layer_sums(output: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``[B, C, H, W]`` activations (any memory format) -> (float32 ``[B, 2]``: sum and sum of squares per
    image, ``n``: how many values per image they add up).

    A layer taller than ``MAX_STAT_ROWS`` is read on every ``step``-th row (``step = ceil(H / MAX_STAT_ROWS)``),
    evenly spread over the image: at 640 px the stem (stride 2) and stages 1-3 are all read every 16 input
    pixels. That caught the simulated camera faults as reading every 8 pixels did (``benchmarks/evaluate_drift.py``:
    the same 8 of 8 onsets per fault, median delays within half a frame, no false alert; every 50 pixels
    missed faults) for 20-25% less statistics time. The sums run along
    contiguous rows in either memory format: flattening a channels_last tensor would copy it (~10x the
    cost), and one norm over the strided 4-D view of the stem is ~5x slower than a norm per row. The
    step depends only on the shape, so eager and traced models agree.
    """
    sampled = _sampled(output)
    rows, per_image = _rows(sampled)
    per_row = torch.stack(
        (rows.sum(1, dtype=torch.float32), torch.linalg.vector_norm(rows, dim=1, dtype=torch.float32).square()), dim=1
    )  # [B*R, 2]
    count = math.prod(int(d) for d in sampled.shape[1:])  # a Python int: a constant in a traced graph
    return per_row.reshape(-1, per_image, 2).sum(1), count  # [B, R, 2] -> [B, 2]


def stats_from_sums(sums: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """float32 ``[..., 2]`` sums and sums of squares of ``counts`` values (broadcast against ``sums[..., 0]``)
    -> float32 ``[..., 2]``: their mean and population std, ``sqrt(E[x^2] - E[x]^2)`` (clamped at 0;
    ``torch.var_mean`` is ~20x slower on a CPU here)."""
    mean = sums[..., 0] / counts
    var = (sums[..., 1] / counts - mean.square()).clamp(min=0)
    return torch.stack((mean, var.sqrt()), dim=-1)


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
    """Records the mean and std of chosen layers on every forward pass (each hook keeps the layer's
    :func:`layer_sums`; :meth:`stats` turns all of them into means and stds at once, which keeps the
    traced graph short).

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
        self._counts: dict[str, int] = {}
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
            self._latest[name], self._counts[name] = layer_sums(output)

        return record

    def stats(self) -> torch.Tensor:
        """float32 ``[B, L, 2]`` for the latest forward pass, layers in ``layer_names`` order."""
        missing = [n for n in self.layer_names if n not in self._latest]
        if missing:
            raise RuntimeError(f"no forward pass recorded yet for layers {missing}")
        sums = torch.stack([self._latest[n] for n in self.layer_names], dim=1)  # [B, L, 2]
        counts = torch.tensor([float(self._counts[n]) for n in self.layer_names], device=sums.device)  # [L]
        return stats_from_sums(sums, counts)

    def detach(self) -> None:
        """Remove every hook and forget recorded values."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._latest.clear()
        self._counts.clear()

