"""Training: ``train_one_epoch`` and ``fit`` (checkpoints, validation, resume, DDP).

Errors that stop a run are :class:`TrainingError` (a ``ValueError``; :class:`NonFiniteLossError` is one), with
a one-line message naming the file or key and what to do; the run folder's files: engine/run_files.py."""

from __future__ import annotations

import logging
import math
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from defect_detector.core.config import Config, TrainConfig
from defect_detector.core.devices import default_threads, resolve_device
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.engine import plots
from defect_detector.engine.budget import Budget, pass_seconds
from defect_detector.engine.errors import NonFiniteLossError, TrainingError
from defect_detector.engine.run_data import build_datasets, build_train_loader, has_ground_truth, with_pixel_scale
from defect_detector.engine.run_files import (
    check_resume_config,
    check_resume_data,
    commit_epoch,
    data_digests,
    prepare_run_dir,
    read_resume_checkpoint,
    save_best,
)
from defect_detector.engine.state import (
    StepState,
    Training,
    build_training,
    checkpoint_dict,
    is_main,
    lr_factor,
    resolve_amp,
    restore_training,
)
from defect_detector.engine.validation import Validator, validate
from defect_detector.model.postprocess import make_anchor_points

__all__ = ["NonFiniteLossError", "TrainingError", "fit", "lr_factor", "train_one_epoch", "with_pixel_scale"]

log = logging.getLogger("defect_detector.train")


def train_one_epoch(
    model: torch.nn.Module,
    loader: torch.utils.data.DataLoader,
    training: Training,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    settings: TrainConfig,
    desc: str = "train",
    progress: bool = True,
) -> dict[str, float]:
    """One pass over ``loader`` (batches of float32 ``[B, C, S, S]`` images and their targets) with ``training``'s
    loss, optimizer, AMP scaler, schedule and EMA; ``model`` is ``training.model``, or its DDP wrapper. ``settings``
    gives ``accumulate``, ``grad_clip`` and ``max_bad_steps``. AMP order per step: scale -> backward -> unscale_ ->
    clip -> step -> update (:func:`_step`). A loss or gradient norm that is not finite is a skipped step counted in
    ``training.state.bad_steps``; more than ``max_bad_steps`` raises :class:`NonFiniteLossError`.
    Returns the mean ``loss``, ``box``, ``cls``, the throughput ``images_per_s`` and the ``seconds`` taken.
    """
    training.train_mode(model)
    strides = model.module.strides if isinstance(model, DistributedDataParallel) else model.strides
    sums: dict[str, float] = defaultdict(float)
    num_batches = num_images = 0
    start = time.perf_counter()
    training.optimizer.zero_grad(set_to_none=True)
    bar = tqdm(loader, desc=desc, leave=False, disable=not progress, dynamic_ncols=True)
    for i, (images, targets) in enumerate(bar):
        images = images.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
        points, point_strides = make_anchor_points(images.shape[-2], images.shape[-1], strides, device)
        with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            raw = model(images)
        loss, parts = training.criterion(raw, targets, points, point_strides)
        if not torch.isfinite(loss):
            _count_bad_step(training.state, settings.max_bad_steps, f"non-finite loss {float(loss.detach())}")
            training.optimizer.zero_grad(set_to_none=True)
            continue
        training.scaler.scale(loss / settings.accumulate).backward()
        if (i + 1) % settings.accumulate == 0 or i + 1 == len(loader):
            _step(model, training, settings)
        num_batches += 1
        num_images += images.shape[0]
        sums["loss"] += float(loss.detach())
        sums["box"] += parts["box"]
        sums["cls"] += parts["cls"]
        rate = num_images / (time.perf_counter() - start)
        bar.set_postfix(loss=f"{sums['loss'] / num_batches:.3f}", lr=f"{training.optimizer.param_groups[0]['lr']:.2e}", img_s=f"{rate:.1f}")
    elapsed = time.perf_counter() - start
    means = {k: v / max(1, num_batches) for k, v in sums.items()}
    return {k: means.get(k, float("nan")) for k in ("loss", "box", "cls")} | {
        "images_per_s": num_images / max(elapsed, 1e-9),
        "seconds": elapsed,
    }


def _step(model: torch.nn.Module, training: Training, settings: TrainConfig) -> None:
    """One optimizer step on the accumulated gradients: unscale_ -> clip -> step (skipped and counted when the gradient
    norm is not finite without a scaler; the scaler skips it itself) -> EMA -> scaler update -> zero -> schedule."""
    optimizer, scaler = training.optimizer, training.scaler
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
    if not scaler.is_enabled() and not torch.isfinite(grad_norm):
        _count_bad_step(training.state, settings.max_bad_steps, f"non-finite gradient norm {float(grad_norm)}")
    else:
        scaler.step(optimizer)
        training.ema.update_parameters(model.module if isinstance(model, DistributedDataParallel) else model)
        training.state.optimizer_steps += 1
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    training.scheduler.step()


def _count_bad_step(state: StepState, max_bad_steps: int, why: str) -> None:
    state.bad_steps += 1
    log.warning("skipped step: %s (%d bad steps so far)", why, state.bad_steps)
    if state.bad_steps > max_bad_steps:
        raise NonFiniteLossError(
            f"{state.bad_steps} steps with a non-finite loss or gradient (more than train.max_bad_steps={max_bad_steps}): "
            "lower train.lr, try train.amp=off, check the training json for broken boxes, or raise train.max_bad_steps"
        )


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch."""
    import random

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _init_distributed() -> bool:
    """Join the process group when launched by torchrun (``WORLD_SIZE`` > 1)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return dist.is_initialized()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend)
    return True


@dataclass
class _Run:
    """One ``fit`` call: its config, where it runs and writes, its data and what it trains."""

    cfg: Config
    run_dir: Path
    device: torch.device
    amp_dtype: torch.dtype | None
    world: int
    train_set: CocoDetectionDataset
    val_set: CocoDetectionDataset | None
    """None: no validation json, or one without annotations (no mAP to measure)."""
    train_loader: torch.utils.data.DataLoader
    validator: Validator
    training: Training
    train_model: torch.nn.Module
    progress: bool
    budget: Budget
    unreadable: int = 0
    data_digests: dict[str, str] = field(default_factory=dict)
    f1_conf: float = 0.0

    def checkpoint_config(self) -> Config:
        """The config a checkpoint records: the run's, with ``eval.f1_conf`` the F-optimal score threshold its latest
        validation measured (:func:`~defect_detector.data.evaluate.f_optimal_conf`)."""
        return self.cfg.model_copy(update={"eval": self.cfg.eval.model_copy(update={"f1_conf": self.f1_conf})})


def _set_threads(threads: int | None) -> None:
    """``torch.set_num_threads``: ``threads``, else the cores actually free (:func:`~defect_detector.core.devices.default_threads`)."""
    if threads is not None and threads < 1:
        raise TrainingError(f"--threads must be >= 1, got {threads}")
    torch.set_num_threads(threads if threads is not None else default_threads())


def _open_run(
    cfg: Config, run_dir: Path, resume: bool, exist_ok: bool, device: torch.device, allow_data_change: bool = False
) -> tuple[Config, dict[str, Any] | None, CocoDetectionDataset, CocoDetectionDataset | None]:
    """Check everything before writing anything, then prepare ``run_dir``: the resume checkpoint (read with the
    checked loader), the datasets (a training set with no readable image is an error), ``data.pixel_scale`` and
    the resume config check. Returns the resolved config, the checkpoint (None for a new run) and the datasets."""
    last_path = run_dir / "weights" / "last.pt"
    ckpt = read_resume_checkpoint(last_path, device) if resume else None
    if not resume and not exist_ok and is_main() and last_path.exists():
        raise FileExistsError(f"{run_dir} already holds a run: pass --resume to continue it, --exist-ok to replace it, or name=NEW")
    seed_everything(cfg.seed)
    train_set, val_set = build_datasets(cfg)
    if len(train_set) == 0:
        raise TrainingError(f"{cfg.data.train}: no readable training images ({train_set.report()})")
    cfg = with_pixel_scale(cfg, [(img["height"], img["width"]) for img in train_set.coco.imgs.values()])
    if ckpt is not None:
        check_resume_config(cfg, ckpt["config"], last_path)
        check_resume_data(ckpt.get("data_digests"), data_digests(cfg), last_path, allow_data_change)
    if is_main():
        prepare_run_dir(run_dir, cfg, ckpt["history"] if ckpt is not None else None)
        log.info("train: %d images (%s); val: %d images", len(train_set), train_set.report(), len(val_set) if val_set else 0)
        log.info("torch threads: %d", torch.get_num_threads())
    return cfg, ckpt, train_set, val_set


def fit(  # noqa: PLR0913 - train's settings, one keyword each
    cfg: Config,
    validator: Validator,
    *,
    resume: bool = False,
    exist_ok: bool = False,
    progress: bool = True,
    stop_after_epochs: int | None = None,
    threads: int | None = None,
    allow_data_change: bool = False,
    budget: Budget | None = None,
) -> Path:
    """Train per ``cfg``; writes ``<out_dir>/<name>/`` and returns that folder.

    ``validator``: how validation predicts (:data:`Validator`; ``train`` and ``teach`` pass the frame pipeline's,
    ``jobs/validate.py`` ``TrainingValidation``). ``resume`` continues from ``weights/last.pt`` (model, EMA,
    optimizer, scaler, scheduler, epoch and counters restored) at the epoch after the last finished one. Its config must
    match ``cfg`` (:func:`~defect_detector.engine.run_files.check_resume_config`), and its jsons the digests the
    checkpoint records unless ``allow_data_change`` (:func:`~defect_detector.engine.run_files.check_resume_data`),
    checked before anything is written. Every random draw is a function of ``(seed, epoch, sample)``, so a resumed run
    gives the same weights, bit for bit, as an uninterrupted one at the same thread count. A new run refuses a folder
    that already holds a run unless ``exist_ok``. ``threads``: torch CPU threads (None:
    :func:`~defect_detector.core.devices.default_threads`). ``stop_after_epochs`` ends early (as an interruption
    would), for tests. ``budget``: ``train.max_minutes`` counted from the command's start, keeping time for the drift
    baseline after the run (engine/budget.py; None: counted from this call, nothing kept); an epoch starts only when
    it, its validation and that reserve fit; the last is validated.

    Epochs are counted from 0 everywhere: the log, ``metrics.jsonl``, the checkpoints' ``epoch`` and the curves.
    ``best.pt``: the epoch with the highest validation mAP@0.5:0.95 (a fine-tune's starting weights, validated first
    as epoch -1, until an epoch beats them); without a measurable mAP the latest epoch. Every checkpoint records as
    ``eval.f1_conf`` the F-optimal score threshold of the run's latest validation. Raises :class:`TrainingError` (a
    ``ValueError``) with a one-line message for a run that cannot start or go on.
    """
    distributed = _init_distributed()
    _set_threads(threads)
    run = _start_run(cfg, validator, resume, exist_ok, allow_data_change, progress, budget, distributed)
    _train_epochs(run, stop_after_epochs, distributed)
    if distributed:
        dist.destroy_process_group()
    return run.run_dir


def _start_run(  # noqa: PLR0913 - fit's settings
    cfg: Config,
    validator: Validator,
    resume: bool,
    exist_ok: bool,
    allow_data_change: bool,
    progress: bool,
    budget: Budget | None,
    distributed: bool,
) -> _Run:
    """Open the run (:func:`_open_run`), build or restore what it trains, and validate a fine-tune's starting weights."""
    device = resolve_device(cfg.train.device)
    run_dir = Path(cfg.out_dir) / cfg.name
    last_path = run_dir / "weights" / "last.pt"
    cfg, ckpt, train_set, val_set = _open_run(cfg, run_dir, resume, exist_ok, device, allow_data_change)
    val_set = val_set if has_ground_truth(val_set) else None
    train_loader = build_train_loader(cfg, train_set, device, distributed)
    amp_dtype = resolve_amp(cfg.train.amp, device)
    training = build_training(cfg, device, math.ceil(len(train_loader) / cfg.train.accumulate), amp_dtype, init=ckpt is None)
    if ckpt is not None:
        restore_training(training, ckpt, last_path)
        if is_main():
            log.info("resumed from %s after epoch %d", last_path, training.start_epoch - 1)
    train_model = DistributedDataParallel(training.model) if distributed else training.model
    world = dist.get_world_size() if distributed else 1
    budget = budget or Budget.start(cfg.train.max_minutes, None, 0, cfg.model.in_channels == 2)
    run = _Run(cfg, run_dir, device, amp_dtype, world, train_set, val_set, train_loader, validator, training, train_model, progress, budget)
    run.data_digests, run.f1_conf = data_digests(cfg), _resumed_f1_conf(ckpt, cfg)
    if budget.deadline is not None:  # the cost of a model pass, for the drift baseline's share of the time
        budget.pass_seconds = pass_seconds(training.ema.module, cfg.model.in_channels, cfg.data.imgsz, device)
    if ckpt is None and cfg.train.init_weights and val_set is not None and is_main():
        _validate_start(run)
    return run


def _train_epochs(run: _Run, stop_after_epochs: int | None, distributed: bool) -> None:
    """The run's epochs, up to ``train.epochs`` (or ``stop_after_epochs`` more), or until the time budget ends them."""
    start, cfg, first = time.perf_counter(), run.cfg, run.training.start_epoch
    end = cfg.train.epochs if stop_after_epochs is None else min(cfg.train.epochs, first + stop_after_epochs)
    for epoch in range(first, end):
        final = _run_epoch(run, epoch, end)
        if distributed:
            dist.barrier()
        if final and epoch + 1 < end:
            if is_main():
                cap = cfg.train.max_minutes
                log.warning("train.max_minutes (%g): stopped after epoch %d (%d of %d): %s", cap, epoch, epoch + 1, end, run.budget.cut())
            break
    if is_main():
        log.info("training took %.1f s", time.perf_counter() - start)


def _resumed_f1_conf(ckpt: dict[str, Any] | None, cfg: Config) -> float:
    """The ``eval.f1_conf`` a resumed run's ``last.pt`` measured; a new run starts from the config's (or its parent's)."""
    saved = (ckpt or {}).get("config", {}).get("eval", {}).get("f1_conf")
    return float(saved) if saved is not None else cfg.eval.f1_conf


def _validated(run: _Run) -> tuple[dict, dict]:
    """:func:`validate` of the EMA weights, timed into the run's budget; the F-optimal threshold becomes ``run.f1_conf``."""
    assert run.val_set is not None
    start = time.perf_counter()
    metrics, predictions = validate(run.training.ema.module, run.val_set, run.cfg, run.validator)
    run.budget.measured_validation(time.perf_counter() - start, len(run.val_set))
    if metrics.get("f1_optimal") is not None:
        run.f1_conf = metrics["f1_optimal"]["conf"]
    return metrics, predictions


def _validate_start(run: _Run) -> None:
    """Validate a fine-tune's starting weights and write them as ``best.pt`` (epoch -1; ``last.pt`` is written by the
    first epoch): an epoch replaces them only with a higher mAP@0.5:0.95 on the run's validation."""
    metrics, _ = _validated(run)
    run.training.best_map = metrics["map50_95"]
    plain = {k: v for k, v in metrics.items() if k not in ("pr_curve", "confusion")}
    ckpt = checkpoint_dict(run.training, -1, run.checkpoint_config(), plain) | {"data_digests": run.data_digests}
    save_best(run.run_dir, ckpt)
    log.info(
        "starting weights on the validation set: mAP@0.5 %.4f, mAP@0.5:0.95 %.4f, F-optimal score %.3f (best.pt until an epoch beats them)",
        metrics["map50"],
        metrics["map50_95"],
        run.f1_conf,
    )


def _run_epoch(run: _Run, epoch: int, end: int) -> bool:
    """Train one epoch, validate when due (or when it is the last: ``end`` or the time budget), then (main process)
    commit checkpoints and metrics, and plot. Returns whether it is the run's last epoch."""
    cfg, t = run.cfg, run.training
    seed_everything(cfg.seed + epoch)
    run.train_loader.sampler.set_epoch(epoch)  # type: ignore[union-attr]
    stats = _train_epoch(run, epoch)
    run.budget.epoch_seconds = max(run.budget.epoch_seconds, stats["seconds"])
    record = _epoch_record(run, epoch, stats)
    metrics: dict[str, Any] = {}
    predictions: dict = {}
    can_validate = run.val_set is not None and is_main()  # rank 0 alone validates
    due = can_validate and ((epoch + 1) % cfg.train.val_every == 0 or epoch + 1 == cfg.train.epochs)
    val_estimate = stats["seconds"] * len(run.val_set or []) / max(1, len(run.train_set))
    final = epoch + 1 >= end or not run.budget.next_epoch_fits(due, val_estimate)
    if can_validate and (due or final):
        metrics, predictions = _validated(run)
        record.update({k: metrics[k] for k in ("map50", "map50_95", "f1_iou033", "precision", "recall")})
        record["per_class"], record["f1_conf"] = metrics["per_class"], run.f1_conf
    if not is_main():
        return final
    t.state.history.append(record)
    improved = bool(metrics) and metrics["map50_95"] > t.best_map
    if improved:
        t.best_map = metrics["map50_95"]
    plain_metrics = {k: v for k, v in metrics.items() if k not in ("pr_curve", "confusion")}
    ckpt = checkpoint_dict(t, epoch, run.checkpoint_config(), plain_metrics) | {"data_digests": run.data_digests}  # checked by --resume
    commit_epoch(run.run_dir, ckpt, record, best=improved or run.val_set is None)
    if improved and run.val_set is not None:
        plots.write_eval_plots(run.run_dir / "plots", metrics, predictions, run.val_set, cfg.data.class_names, run.f1_conf)  # best.pt's
    if metrics or final:
        plots.plot_training_curves(t.state.history, run.run_dir / "plots" / "curves.png")
    log.info("epoch %d (%d/%d): %s", epoch, epoch + 1, cfg.train.epochs, _summary(record))
    return final


def _train_epoch(run: _Run, epoch: int) -> dict[str, float]:
    """:func:`train_one_epoch` with the run's settings."""
    return train_one_epoch(
        run.train_model,
        run.train_loader,
        run.training,
        run.device,
        run.amp_dtype,
        run.cfg.train,
        f"epoch {epoch} ({epoch + 1}/{run.cfg.train.epochs})",
        run.progress,
    )


def _epoch_record(run: _Run, epoch: int, stats: dict[str, float]) -> dict[str, Any]:
    """The epoch's ``metrics.jsonl`` line (validation metrics are added to it); warns when more images proved unreadable."""
    t = run.training
    record: dict[str, Any] = {
        "epoch": epoch,
        "train_loss": stats["loss"],
        "train_box": stats["box"],
        "train_cls": stats["cls"],
        "lr": t.optimizer.param_groups[0]["lr"],
        "images_per_s": stats["images_per_s"] * run.world,
        "epoch_seconds": stats["seconds"],
        "bad_steps": t.state.bad_steps,
        "unreadable_images": run.train_set.skipped["unreadable image"],
    }
    if record["unreadable_images"] > run.unreadable and is_main():
        log.warning("%d training images are unreadable; each was replaced by its next readable neighbour", record["unreadable_images"])
    run.unreadable = record["unreadable_images"]
    return record


def _summary(record: dict[str, Any]) -> str:
    keys = ("train_loss", "map50", "map50_95", "f1_iou033", "images_per_s")
    return ", ".join(f"{k}={record[k]:.4f}" for k in keys if k in record)
