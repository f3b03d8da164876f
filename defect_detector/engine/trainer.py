"""Training: ``train_one_epoch`` and ``fit`` (checkpoints, validation, resume, DDP)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.optim.swa_utils import AveragedModel
from torch.utils.data.distributed import DistributedSampler
from tqdm import tqdm

from defect_detector.config import Config, save_config
from defect_detector.data.collate import build_loader
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.data.transforms import build_pair_transforms, build_transforms
from defect_detector.devices import resolve_device
from defect_detector.engine import plots
from defect_detector.engine.evaluate import evaluate_predictions, predict_dataset
from defect_detector.io import atomic_torch_save, atomic_write_text
from defect_detector.model.checkpoint import load_matching_weights
from defect_detector.model.detector import TinyDetector, build_model
from defect_detector.model.loss import DetectionLoss
from defect_detector.model.postprocess import make_anchor_points

log = logging.getLogger("defect_detector.train")


class NonFiniteLossError(RuntimeError):
    """Raised when more than ``train.max_bad_steps`` steps had a non-finite loss or gradient."""


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
    """AdamW; weight decay on conv/linear weights only (not on BatchNorm or biases)."""
    decay, no_decay = [], []
    for param in model.parameters():
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


def train_one_epoch(
    model: torch.nn.Module,
    loader: torch.utils.data.DataLoader,
    criterion: DetectionLoss,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    ema: AveragedModel,
    state: StepState,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    accumulate: int,
    grad_clip: float,
    max_bad_steps: int,
    desc: str = "train",
    progress: bool = True,
) -> dict[str, float]:
    """One pass over ``loader``. AMP order: scale -> backward -> unscale_ -> clip -> step -> update.

    A step whose loss or gradient norm is not finite is skipped and counted in
    ``state.bad_steps``; more than ``max_bad_steps`` raises :class:`NonFiniteLossError`.
    Returns the mean ``loss``, ``box``, ``cls`` and the throughput ``images_per_s``.
    """
    model.train()
    strides = model.module.strides if isinstance(model, DistributedDataParallel) else model.strides
    sums: dict[str, float] = defaultdict(float)
    num_batches = num_images = 0
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    bar = tqdm(loader, desc=desc, leave=False, disable=not progress, dynamic_ncols=True)
    for i, (images, targets) in enumerate(bar):
        images = images.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
        points, point_strides = make_anchor_points(images.shape[-2], images.shape[-1], strides, device)
        with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            raw = model(images)
        loss, parts = criterion(raw, targets, points, point_strides)
        if not torch.isfinite(loss):
            _count_bad_step(state, max_bad_steps, f"non-finite loss {float(loss.detach())}")
            optimizer.zero_grad(set_to_none=True)
            continue
        scaler.scale(loss / accumulate).backward()
        if (i + 1) % accumulate == 0 or i + 1 == len(loader):
            scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            if not scaler.is_enabled() and not torch.isfinite(grad_norm):
                _count_bad_step(state, max_bad_steps, f"non-finite gradient norm {float(grad_norm)}")
            else:
                scaler.step(optimizer)
                ema.update_parameters(model.module if isinstance(model, DistributedDataParallel) else model)
                state.optimizer_steps += 1
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
        num_batches += 1
        num_images += images.shape[0]
        sums["loss"] += float(loss.detach())
        sums["box"] += parts["box"]
        sums["cls"] += parts["cls"]
        rate = num_images / (time.perf_counter() - start)
        bar.set_postfix(loss=f"{sums['loss'] / num_batches:.3f}", lr=f"{optimizer.param_groups[0]['lr']:.2e}", img_s=f"{rate:.1f}")
    elapsed = time.perf_counter() - start
    means = {k: v / max(1, num_batches) for k, v in sums.items()}
    return {
        "loss": means.get("loss", float("nan")),
        "box": means.get("box", float("nan")),
        "cls": means.get("cls", float("nan")),
        "images_per_s": num_images / max(elapsed, 1e-9),
        "seconds": elapsed,
    }


def _count_bad_step(state: StepState, max_bad_steps: int, why: str) -> None:
    state.bad_steps += 1
    log.warning("skipped step: %s (%d bad steps so far)", why, state.bad_steps)
    if state.bad_steps > max_bad_steps:
        raise NonFiniteLossError(f"{state.bad_steps} steps with non-finite loss or gradients (train.max_bad_steps={max_bad_steps})")


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch."""
    import random

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _is_main() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def _init_distributed() -> bool:
    """Join the process group when launched by torchrun (``WORLD_SIZE`` > 1)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return dist.is_initialized()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend)
    return True


def checkpoint_dict(
    model: TinyDetector,
    ema: AveragedModel,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    epoch: int,
    cfg: Config,
    state: StepState,
    metrics: dict,
    best_map: float,
) -> dict[str, Any]:
    """A checkpoint of tensors and plain values only, readable with ``torch.load(weights_only=True)``."""
    return {
        "model": model.state_dict(),
        "ema": ema.module.state_dict(),
        "ema_updates": int(ema.n_averaged),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict(),
        "scheduler": scheduler.state_dict(),
        "epoch": epoch,
        "config": cfg.to_dict(),
        "class_names": list(cfg.data.class_names),
        "metrics": metrics,
        "best_map50_95": best_map,
        "bad_steps": state.bad_steps,
        "optimizer_steps": state.optimizer_steps,
        "history": state.history,
    }


def _build_datasets(cfg: Config) -> tuple[CocoDetectionDataset, CocoDetectionDataset | None]:
    """Training and (if configured) validation datasets; reference models read image + reference pairs."""
    train_size = cfg.augment.crop_size or cfg.data.imgsz
    pairs = cfg.model.in_channels == 2
    transform = build_pair_transforms(cfg.augment, train=True) if pairs else build_transforms(cfg.augment, train=True)
    train_set = CocoDetectionDataset(
        cfg.data.train,
        cfg.data.train_images,
        cfg.data.class_names,
        train_size,
        transform,
        cfg.data.on_bad_sample,
        reference=pairs,
        register=pairs and cfg.data.register_train,
    )
    val_set = None
    if cfg.data.val:
        val_set = CocoDetectionDataset(
            cfg.data.val,
            cfg.data.val_images,
            cfg.data.class_names,
            cfg.data.imgsz,
            None,
            cfg.data.on_bad_sample,
            reference=pairs,
            register=pairs and cfg.data.register_val,
        )
    return train_set, val_set


def with_pixel_scale(cfg: Config, sizes: Sequence[tuple[int, int]]) -> Config:
    """``cfg`` with ``data.pixel_scale`` resolved when it is None: the scale (model input pixels per original pixel)
    at which training samples reach the model. With ``augment.crop_size`` crops are cut at full resolution and
    letterboxed to their own size: 1.0. Otherwise the median over the training images' ``(height, width)`` ``sizes``
    of the letterbox scale ``min(imgsz / h, imgsz / w)``. Unchanged when already set or without images."""
    if cfg.data.pixel_scale is not None or not sizes:
        return cfg
    scale = 1.0 if cfg.augment.crop_size > 0 else float(np.median([min(cfg.data.imgsz / h, cfg.data.imgsz / w) for h, w in sizes]))
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, pixel_scale=scale))


def validate(
    model: TinyDetector,
    loader: torch.utils.data.DataLoader,
    val_set: CocoDetectionDataset,
    cfg: Config,
    device: torch.device,
    progress: bool = True,
) -> tuple[dict, dict]:
    """Predict on the validation set and compute all metrics. Returns ``(metrics, predictions)``."""
    predictions = predict_dataset(model, loader, device, cfg.eval.conf, cfg.eval.nms_iou, cfg.eval.max_det, progress)
    metrics = evaluate_predictions(val_set.coco, predictions, val_set.label_to_cat_id, cfg.data.class_names, cfg.eval.f1_conf)
    return metrics, predictions


def fit(cfg: Config, resume: bool = False, exist_ok: bool = False, progress: bool = True, stop_after_epochs: int | None = None) -> Path:
    """Train per ``cfg``; writes ``<out_dir>/<name>/`` and returns that folder.

    ``resume`` continues from ``weights/last.pt`` (model, EMA, optimizer,
    scaler, scheduler, epoch and counters restored); epochs are seeded with
    ``seed + epoch`` so a resumed run matches an uninterrupted one.
    A new run refuses a folder that already holds a run unless ``exist_ok``
    (then its metrics and weights are replaced). ``stop_after_epochs`` ends
    early (as an interruption would), for tests.
    """
    distributed = _init_distributed()
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    device = resolve_device(cfg.train.device)
    amp_dtype = resolve_amp(cfg.train.amp, device)
    run_dir = Path(cfg.out_dir) / cfg.name
    weights_dir = run_dir / "weights"
    if _is_main():
        if not resume and (weights_dir / "last.pt").exists():
            if not exist_ok:
                raise FileExistsError(f"{run_dir} already holds a run: pass --resume to continue it, --exist-ok to replace it, or name=NEW")
            (run_dir / "metrics.jsonl").unlink(missing_ok=True)
        weights_dir.mkdir(parents=True, exist_ok=True)

    seed_everything(cfg.seed)
    train_set, val_set = _build_datasets(cfg)
    cfg = with_pixel_scale(cfg, [(img["height"], img["width"]) for img in train_set.coco.imgs.values()])
    if _is_main():
        save_config(cfg, run_dir / "config.yaml")
        log.info("train: %d images (%s); val: %d images", len(train_set), train_set.report(), len(val_set) if val_set else 0)
    sampler = (
        DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=cfg.seed, drop_last=True) if distributed else None
    )
    train_loader = build_loader(
        train_set, cfg.train.batch_size, train=True, workers=cfg.data.workers, seed=cfg.seed, device_type=device.type, sampler=sampler
    )

    val_loader = None
    if val_set is not None and _is_main():
        val_loader = build_loader(
            val_set, cfg.train.batch_size, train=False, workers=cfg.data.workers, seed=cfg.seed, device_type=device.type
        )

    model = build_model(cfg.model, len(cfg.data.class_names))
    if cfg.train.init_weights and not resume:
        loaded, skipped = load_matching_weights(model, cfg.train.init_weights)
        if _is_main():
            log.info(
                "initialised %d tensors from %s; %d kept fresh (shape or name differs)", len(loaded), cfg.train.init_weights, len(skipped)
            )
    model = model.to(device).to(memory_format=torch.channels_last)
    ema = make_ema(model, cfg.train.ema_decay)
    optimizer = build_optimizer(model, cfg.train.lr, cfg.train.weight_decay)
    steps_per_epoch = math.ceil(len(train_loader) / cfg.train.accumulate)
    total_steps = steps_per_epoch * cfg.train.epochs
    warmup_steps = int(cfg.train.warmup_epochs * steps_per_epoch)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, total_steps, warmup_steps, cfg.train.min_lr_ratio))
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
    criterion = DetectionLoss(len(cfg.data.class_names))
    state = StepState()
    start_epoch, best_map = 0, -1.0

    last_path, best_path = weights_dir / "last.pt", weights_dir / "best.pt"
    if resume:
        if not last_path.is_file():
            raise FileNotFoundError(f"--resume: {last_path} does not exist")
        ckpt = torch.load(last_path, map_location=device, weights_only=True)
        model.load_state_dict(ckpt["model"])
        ema.module.load_state_dict(ckpt["ema"])
        ema.n_averaged.fill_(ckpt["ema_updates"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scaler.load_state_dict(ckpt["scaler"])
        scheduler.load_state_dict(ckpt["scheduler"])
        start_epoch, best_map = ckpt["epoch"] + 1, ckpt["best_map50_95"]
        state = StepState(ckpt["bad_steps"], ckpt["optimizer_steps"], list(ckpt["history"]))
        if _is_main():
            log.info("resumed from %s at epoch %d", last_path, start_epoch)

    train_model: torch.nn.Module = DistributedDataParallel(model) if distributed else model
    run_start = time.perf_counter()
    unreadable_before = 0
    for epoch in range(start_epoch, cfg.train.epochs):
        if stop_after_epochs is not None and epoch - start_epoch >= stop_after_epochs:
            break
        seed_everything(cfg.seed + epoch)
        train_loader.generator.manual_seed(cfg.seed + epoch)
        if sampler is not None:
            sampler.set_epoch(epoch)
        if hasattr(train_set.transform, "set_random_seed"):
            train_set.transform.set_random_seed(cfg.seed + epoch)
        stats = train_one_epoch(
            train_model,
            train_loader,
            criterion,
            optimizer,
            scaler,
            scheduler,
            ema,
            state,
            device,
            amp_dtype,
            cfg.train.accumulate,
            cfg.train.grad_clip,
            cfg.train.max_bad_steps,
            desc=f"epoch {epoch + 1}/{cfg.train.epochs}",
            progress=progress and _is_main(),
        )
        record: dict[str, Any] = {
            "epoch": epoch,
            "train_loss": stats["loss"],
            "train_box": stats["box"],
            "train_cls": stats["cls"],
            "lr": optimizer.param_groups[0]["lr"],
            "images_per_s": stats["images_per_s"] * world,
            "epoch_seconds": stats["seconds"],
            "bad_steps": state.bad_steps,
            "unreadable_images": train_set.skipped["unreadable image"],
        }
        if record["unreadable_images"] > unreadable_before and _is_main():
            log.warning("%d training images are unreadable; each was replaced by its next readable neighbour", record["unreadable_images"])
        unreadable_before = record["unreadable_images"]
        metrics: dict[str, Any] = {}
        is_last = epoch + 1 == cfg.train.epochs
        if val_loader is not None and ((epoch + 1) % cfg.train.val_every == 0 or is_last):
            metrics, predictions = validate(ema.module, val_loader, val_set, cfg, device, progress)
            record.update({k: metrics[k] for k in ("map50", "map50_95", "f1_iou033", "precision", "recall")})
            record["per_class"] = metrics["per_class"]
        if _is_main():
            state.history.append(record)
            _append_jsonl(run_dir / "metrics.jsonl", record)
            plain_metrics = {k: v for k, v in metrics.items() if k not in ("pr_curve", "confusion")}
            improved = bool(metrics) and metrics["map50_95"] > best_map
            if improved:
                best_map = metrics["map50_95"]
            ckpt = checkpoint_dict(model, ema, optimizer, scaler, scheduler, epoch, cfg, state, plain_metrics, best_map)
            atomic_torch_save(ckpt, last_path)
            if improved or (val_set is None and is_last):
                atomic_torch_save(ckpt, best_path)
                if metrics:
                    write_eval_plots(run_dir / "plots", metrics, predictions, val_set, cfg.data.class_names, cfg.eval.f1_conf)
            if metrics or is_last:
                plots.plot_training_curves(state.history, run_dir / "plots" / "curves.png")
            log.info("epoch %d: %s", epoch + 1, _summary(record))
        if distributed:
            dist.barrier()
    if _is_main():
        log.info("training took %.1f s", time.perf_counter() - run_start)
    if distributed:
        dist.destroy_process_group()
    return run_dir


def _summary(record: dict[str, Any]) -> str:
    keys = ("train_loss", "map50", "map50_95", "f1_iou033", "images_per_s")
    return ", ".join(f"{k}={record[k]:.4f}" for k in keys if k in record)


def _append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line; the whole file is rewritten atomically so a crash never truncates it."""
    existing = path.read_text() if path.exists() else ""
    atomic_write_text(path, existing + json.dumps(record) + "\n")


def write_eval_plots(
    plots_dir: Path, metrics: dict, predictions: dict, val_set: CocoDetectionDataset, names: Sequence[str], conf: float
) -> None:
    """``pr_curves.png``, ``confusion_matrix.png`` and ``val_predictions.png`` (the first 8 images, detections
    at score >= ``conf``) in ``plots_dir`` from ``evaluate_predictions`` ``metrics`` and ``predict_dataset`` output."""
    from defect_detector.data.images import load_image_gray
    from defect_detector.engine.evaluate import ground_truth

    plots.plot_pr_curves(metrics["pr_curve"], names, plots_dir / "pr_curves.png")
    plots.plot_confusion_matrix(metrics["confusion"], names, plots_dir / "confusion_matrix.png")
    cat_to_label = {c: label for label, c in val_set.label_to_cat_id.items()}
    image_ids = sorted(predictions)[:8]
    images, preds, gts = [], [], []
    for image_id in image_ids:
        info = val_set.coco.loadImgs([image_id])[0]
        images.append(load_image_gray(val_set.images_root / info["file_name"]))
        preds.append({k: v for k, v in predictions[image_id].items()})
        keep = preds[-1]["scores"] >= conf
        preds[-1] = {k: v[keep] for k, v in preds[-1].items()}
        gts.append(ground_truth(val_set.coco, image_id, cat_to_label))
    plots.plot_prediction_grid(images, preds, gts, names, plots_dir / "val_predictions.png")
