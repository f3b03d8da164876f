"""Parity checks of an exported graph against the unfused float32 eager model: inputs, differences, tolerances."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from defect_detector.core.constants import PAD_VALUE
from defect_detector.data.images import to_gray_uint8
from defect_detector.data.letterbox import letterbox
from defect_detector.data.synth import generate_board, generate_board_pair
from defect_detector.export.deploy_model import GOLDEN_FEATURES, DeployModel, ExportError
from defect_detector.model.checkpoint import LoadedModel

FP32_TOLERANCE = 1e-3
FP16_BOX_TOLERANCE = 2.0  # pixels
FP16_TOLERANCE = 2e-2  # probabilities, and stats relative to their magnitude
PARITY_REFERENCE_SHIFT = (3, 2)  # (dx, dy) original pixels: the parity reference is a slightly misaligned copy


def shifted_copy(image: np.ndarray, dx: int, dy: int, fill: int = PAD_VALUE) -> np.ndarray:
    """uint8 ``[H, W]`` ``image`` moved by ``dx, dy`` >= 0 pixels (right, down), uncovered pixels ``fill``: same size and frame."""
    out = np.full_like(image, fill)
    h, w = image.shape
    dx, dy = min(dx, w), min(dy, h)
    out[dy:, dx:] = image[: h - dy, : w - dx]
    return out


def parity_inputs(imgsz: int, check_images: Sequence[np.ndarray] | None = None, seed: int = 0, channels: int = 1) -> torch.Tensor:
    """Letterboxed float32 ``[N, channels, imgsz, imgsz]`` in [0, 1] from ``check_images`` (any size, gray or colour),
    or from two synthetic non-square boards when None.

    ``channels`` 2 (a reference model): channel 1 is each image's reference in the image's pixel frame,
    letterboxed with the image's geometry: a copy of the image shifted by :data:`PARITY_REFERENCE_SHIFT`
    (for the synthetic boards, their defect-free template shifted so), so the two channels differ.
    """
    if channels not in (1, 2):
        raise ValueError(f"channels must be 1 or 2, got {channels}")
    rng = np.random.default_rng(seed)
    pairs: list[tuple[np.ndarray, np.ndarray]]
    if check_images is None and channels == 1:
        check_images = [generate_board(imgsz * 3 // 4, imgsz, rng, n_defects=(4, 6))[0] for _ in range(2)]
    if check_images is None:
        boards = [generate_board_pair(imgsz * 3 // 4, imgsz, rng, n_defects=(4, 6))[:2] for _ in range(2)]
        pairs = [(image, shifted_copy(template, *PARITY_REFERENCE_SHIFT)) for image, template in boards]
    else:
        grays = [to_gray_uint8(image)[0] for image in check_images]
        pairs = [(gray, shifted_copy(gray, *PARITY_REFERENCE_SHIFT)) for gray in grays]
    stacks = []
    for image, reference in pairs:
        planes = [letterbox(image, imgsz)[0]] + ([letterbox(reference, imgsz)[0]] if channels == 2 else [])
        stacks.append(np.stack(planes))  # uint8 [channels, S, S]
    return torch.from_numpy(np.stack(stacks)).float().div_(255.0)


def max_diffs(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> dict[str, float]:
    """Max abs differences of ``(pred [B, A, 4 + C], stats [B, L, 2])`` pairs: boxes (px), scores, all of pred,
    stats, and stats relative to their magnitude (at least 1)."""
    pred, stats = (t.detach().float().cpu() for t in got)
    ref_pred, ref_stats = (t.detach().float().cpu() for t in want)
    stats_abs = (stats - ref_stats).abs()
    return {
        "boxes": float((pred[..., :4] - ref_pred[..., :4]).abs().max()),
        "scores": float((pred[..., 4:] - ref_pred[..., 4:]).abs().max()),
        "pred": float((pred - ref_pred).abs().max()),
        "stats": float(stats_abs.max()) if stats_abs.numel() else 0.0,
        "stats_relative": float((stats_abs / ref_stats.abs().clamp_min(1.0)).max()) if stats_abs.numel() else 0.0,
    }


def check_parity(diffs: dict[str, float], half: bool, what: str) -> None:
    """Raise :class:`ExportError` when ``diffs`` (from a parity run) exceed the tolerance of the precision."""
    if half:
        limits = {"boxes": FP16_BOX_TOLERANCE, "scores": FP16_TOLERANCE, "stats_relative": FP16_TOLERANCE}
    else:
        limits = {"pred": FP32_TOLERANCE, "stats": FP32_TOLERANCE}
    failed = {k: diffs[k] for k, limit in limits.items() if not diffs[k] <= limit}
    if failed:
        raise ExportError(f"{what} parity check failed: max abs diff {failed} exceeds {limits}")


def reference_outputs(loaded: LoadedModel, imgsz: int, layers: Sequence[str], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs of the unfused, float32, CPU eager model on ``x`` float32 ``[N, C, imgsz, imgsz]`` (the ground truth)."""
    reference = DeployModel(loaded.model, imgsz, layers, fuse=False, channels_last=False).float().cpu()
    with torch.no_grad():
        return reference(x)


def cached_outputs(
    golden: Callable[[torch.Tensor], Sequence[torch.Tensor]],
    frame: Callable[..., Sequence[torch.Tensor]],
    x: torch.Tensor,
    broadcast: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(pred, stats)`` of the cached golden path on ``x`` float ``[N, 2, S, S]`` (image, registered golden image):
    ``frame(x[:, :1], *golden(x[:, 1:2]))``, every frame with its own golden features, which a graph should give as
    its ``forward`` gives them for ``x``. ``golden`` and ``frame``: an artifact's graphs (tensors in, tensors out, on
    ``x``'s device and dtype). ``broadcast`` False: features passed contiguous (a ``.pt2`` frame graph's layout)."""
    with torch.no_grad():
        outputs = golden(x[:, 1:2].contiguous())[: len(GOLDEN_FEATURES)]  # the features; stats are checked apart
        features = [f if broadcast else f.contiguous() for f in outputs]
        pred, stats = frame(x[:, :1].contiguous(), *features)
    return pred, stats
