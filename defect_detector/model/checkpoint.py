"""Loading checkpoints into models, and the bundled default weights."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from defect_detector.config import Config, config_from_dict
from defect_detector.model.detector import TinyDetector, build_model

DEFAULT_WEIGHTS = Path(__file__).resolve().parent.parent / "weights" / "deeppcb.pt"


@dataclass
class LoadedModel:
    """An eval-mode model with the config and class names it was trained with."""

    model: TinyDetector
    config: Config
    class_names: tuple[str, ...]
    metrics: dict[str, Any]
    path: Path


def load_checkpoint(path: str | Path | None = None, device: torch.device | str = "cpu", use_ema: bool = True) -> LoadedModel:
    """Load a training checkpoint (``.pt``) with ``weights_only=True``.

    ``path`` None means the bundled DeepPCB model. The EMA weights are used when
    present (they are what validation scored). Raises ``FileNotFoundError`` or
    ``ValueError`` with the path and the problem.
    """
    path = Path(path) if path is not None else DEFAULT_WEIGHTS
    if not path.is_file():
        raise FileNotFoundError(f"{path}: weights file not found")
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:
        raise ValueError(f"{path}: not a readable checkpoint ({type(exc).__name__}: {exc})") from exc
    if not isinstance(ckpt, dict) or "config" not in ckpt or "model" not in ckpt:
        raise ValueError(f"{path}: not a defect_detector checkpoint (needs 'model' and 'config' entries)")
    cfg = config_from_dict(ckpt["config"])
    class_names = tuple(ckpt.get("class_names", cfg.data.class_names))
    model = build_model(cfg.model, len(class_names))
    state = ckpt["ema"] if use_ema and "ema" in ckpt else ckpt["model"]
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise ValueError(f"{path}: weights do not fit the model its config describes: {exc}") from exc
    return LoadedModel(model.to(device).eval(), cfg, class_names, dict(ckpt.get("metrics", {})), path)


def strip_checkpoint(ckpt: dict[str, Any]) -> dict[str, Any]:
    """Inference-only checkpoint: EMA weights as ``model``, config, class names, metrics (no optimizer state)."""
    return {
        "model": ckpt.get("ema", ckpt["model"]),
        "config": ckpt["config"],
        "class_names": ckpt["class_names"],
        "metrics": ckpt.get("metrics", {}),
        "epoch": ckpt.get("epoch", -1),
    }
