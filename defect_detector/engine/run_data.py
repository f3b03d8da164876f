"""The data of a training run: its datasets, its training loader and the pixel scale it trains at."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler

from defect_detector.core.config import Config
from defect_detector.data.collate import build_loader
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.data.transforms import build_pair_transforms, build_transforms
from defect_detector.engine.state import is_main

log = logging.getLogger("defect_detector.train")


def build_datasets(cfg: Config) -> tuple[CocoDetectionDataset, CocoDetectionDataset | None]:
    """Training and (if configured) validation datasets; reference models read image + reference pairs. The validation
    set is only read by the run's validator (the frame pipeline, which registers each pair itself), never loaded as
    tensors."""
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
        max_images=cfg.data.max_images,
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
            max_images=cfg.data.max_images,
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
    return cfg.model_copy(update={"data": cfg.data.model_copy(update={"pixel_scale": scale})})


def has_ground_truth(val_set: CocoDetectionDataset | None) -> bool:
    """Whether validation can measure mAP: a validation set with images and annotations (warned once if not)."""
    if val_set is None:
        return False
    if len(val_set) and val_set.coco.dataset["annotations"]:
        return True
    if is_main():
        log.warning(
            "%s: no annotated validation images, so mAP cannot be measured: validation is skipped and best.pt is the latest epoch",
            val_set.ann_file,
        )
    return False


def build_train_loader(
    cfg: Config, train_set: CocoDetectionDataset, device: torch.device, distributed: bool
) -> torch.utils.data.DataLoader:
    """The training loader (a ``DistributedSampler`` under DDP)."""
    sampler = None
    if distributed:
        sampler = DistributedSampler(train_set, dist.get_world_size(), dist.get_rank(), shuffle=True, seed=cfg.seed, drop_last=True)
    batch, workers = cfg.train.batch_size, cfg.data.workers
    return build_loader(train_set, batch, train=True, workers=workers, seed=cfg.seed, device_type=device.type, sampler=sampler)
