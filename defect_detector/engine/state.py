"""What a run trains and its optimisation state: model, EMA, AdamW, warmup + cosine schedule, AMP scaler, and
their checkpoint (``checkpoint_dict`` / ``restore_training``, tensors and plain values only)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.optim.swa_utils import AveragedModel

from defect_detector.core.config import Config, config_from_dict
from defect_detector.engine.errors import TrainingError
from defect_detector.model.checkpoint import load_matching_weights, read_checkpoint
from defect_detector.model.detector import TinyDetector, build_model
from defect_detector.model.loss import DetectionLoss

log = logging.getLogger("defect_detector.train")

MIN_INIT_FRACTION = 0.9
"""``train.init_weights`` must fill at least this share of the model's tensors (class branches aside), else it
is another architecture and fine-tuning would train mostly from scratch."""


def is_main() -> bool:
    """Whether this is the process that writes the run's files (rank 0, or the only one)."""
    return not dist.is_initialized() or dist.get_rank() == 0


@dataclass
class StepState:
    """Counters that persist across epochs (and into checkpoints)."""

    bad_steps: int = 0
    optimizer_steps: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)


def resolve_amp(amp: str, device: torch.device) -> torch.dtype | None:
    """Autocast dtype: 'auto' = float16 on CUDA and off on CPU (bfloat16 measured slower
    than float32 for this depthwise model on a 2-core CPU); 'bf16'/'fp16' force it; 'off' = None."""
    if amp == "off":
        return None
    if amp == "bf16":
        return torch.bfloat16
    if amp == "fp16" or (amp == "auto" and device.type == "cuda"):
        return torch.float16
    return None


def build_optimizer(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW over the parameters that train (``requires_grad``); weight decay on conv/linear weights only (not on
    BatchNorm or biases)."""
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.ndim > 1 else no_decay).append(param)
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=lr)


def lr_factor(step: int, total_steps: int, warmup_steps: int, min_ratio: float) -> float:
    """Linear warmup from ~0 to 1 over ``warmup_steps``, then cosine decay to ``min_ratio``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def make_ema(model: torch.nn.Module, decay: float) -> AveragedModel:
    """Exponential moving average of weights and buffers, with the usual warm-up
    ``min(decay, (1 + n) / (10 + n))`` so early averages are not dominated by the initial weights."""

    def ema_update(ema_params: list[torch.Tensor], params: list[torch.Tensor], num_averaged: torch.Tensor) -> None:
        n = float(num_averaged)
        beta = min(decay, (1 + n) / (10 + n))
        floats = [(e, p) for e, p in zip(ema_params, params) if e.is_floating_point()]
        if floats:
            torch._foreach_lerp_([e for e, _ in floats], [p for _, p in floats], 1.0 - beta)
        for e, p in zip(ema_params, params):
            if not e.is_floating_point():
                e.copy_(p)

    return AveragedModel(model, multi_avg_fn=ema_update, use_buffers=True)


@dataclass
class Training:
    """What a run trains and its optimisation state: the model, its EMA, optimizer, LR schedule, AMP scaler,
    loss, counters, the best validation mAP so far and the first epoch to train."""

    model: TinyDetector
    ema: AveragedModel
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    criterion: DetectionLoss
    state: StepState = field(default_factory=StepState)
    best_map: float = -1.0
    start_epoch: int = 0
    frozen: list[torch.nn.Module] = field(default_factory=list)

    def train_mode(self, model: torch.nn.Module) -> None:
        """``model.train()`` (``model``: this run's model or its DDP wrapper), with the ``train.freeze`` modules kept in
        eval mode: their BatchNorm layers keep the running statistics of the weights they came from."""
        model.train()
        for module in self.frozen:
            module.eval()


def freeze_modules(model: torch.nn.Module, names: tuple[str, ...]) -> list[torch.nn.Module]:
    """The modules of ``model`` that ``train.freeze`` names (dotted names, e.g. ``backbone.stem``), their parameters
    set to ``requires_grad=False``. :class:`TrainingError` naming a name the model does not have."""
    modules = dict(model.named_modules())
    frozen = []
    for name in names:
        if name not in modules or not name:
            top = ", ".join(n for n in modules if n and "." not in n)
            inner = ", ".join(n for n in modules if n.count(".") == 1 and n.startswith("backbone."))
            raise TrainingError(f"train.freeze: this model has no module {name!r} (modules: {top}; in the backbone: {inner})")
        for param in modules[name].parameters():
            param.requires_grad_(False)
        frozen.append(modules[name])
    if frozen and is_main():
        kept, total = sum(p.numel() for m in frozen for p in m.parameters()), sum(p.numel() for p in model.parameters())
        log.info("train.freeze: %s kept as they are (%d of %d parameters)", ", ".join(names), kept, total)
    return frozen


def adopt_init_architecture(cfg: Config) -> Config:
    """``cfg`` with the ``model`` section of the checkpoint ``train.init_weights`` names (unchanged without one):
    fine-tuning starts from those weights' own architecture. ``TrainingError`` for an unreadable checkpoint."""
    if not cfg.train.init_weights:
        return cfg
    try:
        raw = read_checkpoint(cfg.train.init_weights)
    except (OSError, ValueError) as exc:
        raise TrainingError(f"train.init_weights={exc}") from None
    try:
        model = config_from_dict({"model": raw["config"]["model"]}).model
    except (KeyError, TypeError, ValueError) as exc:
        raise TrainingError(f"train.init_weights={cfg.train.init_weights}: not a readable defect_detector checkpoint ({exc})") from exc
    if model != cfg.model and is_main():
        log.info("train.init_weights: adopting its architecture (%s)", model)
    return cfg.model_copy(update={"model": model})


CARRIED_EVAL_KEYS = (
    "nms_iou",
    "f1_conf",
    "cross_class_iou",
    "cross_class_factor",
    "merge_ios",
    "hidden_max_area",
    "exposure_min_light",
    "exposure_min_contrast",
    "exposure_max_clipped",
    "exposure_max_highlights",
    "exposure_max_midtones",
)
"""The operating point a fine-tune takes from ``train.init_weights`` unless its config names the key: the NMS IoU,
cross-class demotion and exposure range the weights were validated with, and their ``f1_conf`` until the run's own
validation measures one (:func:`~defect_detector.data.evaluate.f_optimal_conf`)."""


def adopt_init_operating_point(cfg: Config, named: set[str]) -> Config:
    """``cfg`` with the ``eval`` keys of :data:`CARRIED_EVAL_KEYS` taken from the checkpoint ``train.init_weights``
    names, except those in ``named`` (dotted keys the config file or an override sets, e.g. ``eval.nms_iou``) and those
    the checkpoint does not record. Unchanged without ``train.init_weights``; logs what it carried."""
    if not cfg.train.init_weights:
        return cfg
    try:
        saved = read_checkpoint(cfg.train.init_weights)["config"].get("eval", {})
    except (OSError, ValueError) as exc:
        raise TrainingError(f"train.init_weights={exc}") from None
    except (KeyError, TypeError, AttributeError) as exc:
        raise TrainingError(f"train.init_weights={cfg.train.init_weights}: not a readable defect_detector checkpoint ({exc})") from exc
    carried = {k: saved[k] for k in CARRIED_EVAL_KEYS if k in saved and f"eval.{k}" not in named}
    if not carried:
        return cfg
    merged = config_from_dict(cfg.to_dict() | {"eval": cfg.to_dict()["eval"] | carried})
    if is_main():
        log.info("train.init_weights: operating point carried from the weights: %s", ", ".join(f"eval.{k}={v}" for k, v in carried.items()))
    return merged


def build_training(cfg: Config, device: torch.device, steps_per_epoch: int, amp_dtype: torch.dtype | None, init: bool) -> Training:
    """A fresh :class:`Training` for ``cfg`` (``init``: from ``train.init_weights`` when set)."""
    model = build_model(cfg.model, len(cfg.data.class_names))
    if init and cfg.train.init_weights:
        loaded, skipped = load_matching_weights(model, cfg.train.init_weights)
        heads = [k for k in skipped if k.startswith("head.cls")]  # another class count: the class branches start fresh
        if len(loaded) < MIN_INIT_FRACTION * (len(loaded) + len(skipped) - len(heads)):
            raise TrainingError(
                f"train.init_weights={cfg.train.init_weights}: only {len(loaded)} of {len(loaded) + len(skipped)} tensors fit this "
                "config's model section; drop the model section to adopt the weights' architecture (as configs/default.yaml does), "
                "or start from the config they were trained with"
            )
        if is_main():
            log.info(
                "initialised %d tensors from %s; %d kept fresh (shape or name differs)", len(loaded), cfg.train.init_weights, len(skipped)
            )
    model = model.to(device).to(memory_format=torch.channels_last)
    frozen = freeze_modules(model, tuple(cfg.train.freeze))
    optimizer = build_optimizer(model, cfg.train.lr, cfg.train.weight_decay)
    total_steps = steps_per_epoch * cfg.train.epochs
    warmup_steps = int(cfg.train.warmup_epochs * steps_per_epoch)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, total_steps, warmup_steps, cfg.train.min_lr_ratio))
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
    criterion = DetectionLoss(len(cfg.data.class_names), box_bins=model.box_bins)
    return Training(model, make_ema(model, cfg.train.ema_decay), optimizer, scheduler, scaler, criterion, frozen=frozen)


def checkpoint_dict(training: Training, epoch: int, cfg: Config, metrics: dict) -> dict[str, Any]:
    """A checkpoint of tensors and plain values only, readable with ``torch.load(weights_only=True)``."""
    t = training
    return {
        "model": t.model.state_dict(),
        "ema": t.ema.module.state_dict(),
        "ema_updates": int(t.ema.n_averaged),
        "optimizer": t.optimizer.state_dict(),
        "scaler": t.scaler.state_dict(),
        "scheduler": t.scheduler.state_dict(),
        "epoch": epoch,
        "config": cfg.to_dict(),
        "class_names": list(cfg.data.class_names),
        "metrics": metrics,
        "best_map50_95": t.best_map,
        "bad_steps": t.state.bad_steps,
        "optimizer_steps": t.state.optimizer_steps,
        "history": t.state.history,
        "threads": torch.get_num_threads(),
    }


def restore_training(training: Training, ckpt: dict[str, Any], path: Path) -> None:
    """Load a ``--resume`` checkpoint into ``training``; the run goes on at the epoch after ``ckpt["epoch"]``."""
    t = training
    try:
        t.model.load_state_dict(ckpt["model"])
        t.ema.module.load_state_dict(ckpt["ema"])
        t.optimizer.load_state_dict(ckpt["optimizer"])
        t.scaler.load_state_dict(ckpt["scaler"])
        t.scheduler.load_state_dict(ckpt["scheduler"])
    except (RuntimeError, ValueError, KeyError) as exc:
        raise TrainingError(f"{path}: its state does not fit this run's model and optimizer ({str(exc).splitlines()[0]})") from exc
    t.ema.n_averaged.fill_(ckpt["ema_updates"])
    t.start_epoch, t.best_map = ckpt["epoch"] + 1, ckpt.get("best_map50_95", -1.0)
    t.state = StepState(ckpt.get("bad_steps", 0), ckpt.get("optimizer_steps", 0), list(ckpt["history"]))
    if ckpt.get("threads", torch.get_num_threads()) != torch.get_num_threads():
        log.warning(
            "%s was trained with %d threads, this run uses %d: results match an uninterrupted run only at the same count (--threads)",
            path,
            ckpt["threads"],
            torch.get_num_threads(),
        )
