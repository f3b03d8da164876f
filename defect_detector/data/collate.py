"""Batching: stack letterboxed images, keep per-image targets as a list; seeded DataLoaders."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, Subset


def collate(batch: list[tuple[torch.Tensor, dict[str, Any]]]) -> tuple[torch.Tensor, list[dict[str, Any]]]:
    """Stack ``B`` samples: images float32 ``[B, 1, H, W]``; targets stay an unpadded list of ``B`` dicts."""
    images = torch.stack([image for image, _ in batch])
    targets = [target for _, target in batch]
    return images, targets


def _reseed_transform(dataset: Dataset, seed: int) -> None:
    """Reseed the albumentations pipeline of ``dataset`` (through Subset wrappers), which keeps its own RNG."""
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    transform = getattr(dataset, "transform", None)
    if hasattr(transform, "set_random_seed"):
        transform.set_random_seed(seed)


def seed_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: seed numpy, random and the dataset's augmentation from ``torch.initial_seed()``.

    PyTorch derives each worker's initial seed from the loader's generator and the worker id, so
    workers differ from each other and a seeded loader repeats itself.
    """
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)
    info = torch.utils.data.get_worker_info()
    if info is not None:
        _reseed_transform(info.dataset, seed)


def build_loader(
    dataset: Dataset,
    batch_size: int,
    train: bool,
    workers: int,
    seed: int,
    device_type: str = "cpu",
    sampler: Sampler | None = None,
) -> DataLoader:
    """A DataLoader using :func:`collate`.

    Training shuffles (unless ``sampler`` is given) and drops the last partial batch when at least
    one full batch exists. Memory is pinned only for CUDA. Shuffling, worker seeds and, with
    ``workers == 0``, the dataset's augmentation are all derived from ``seed``.
    """
    generator = torch.Generator()
    generator.manual_seed(seed)
    if workers == 0:
        _reseed_transform(dataset, seed)
    n_items = len(sampler) if sampler is not None else len(dataset)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=train and sampler is None,
        sampler=sampler,
        num_workers=workers,
        collate_fn=collate,
        pin_memory=device_type == "cuda",
        drop_last=train and n_items >= batch_size,
        persistent_workers=workers > 0,
        worker_init_fn=seed_worker,
        generator=generator,
    )
