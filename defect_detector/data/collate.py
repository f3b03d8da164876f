"""Batching: stack letterboxed images, keep per-image targets as a list; seeded DataLoaders.

Every random draw of a training loader is a function of ``(seed, epoch, sample index)``:

* the order of an epoch comes from a ``DistributedSampler`` (one replica by default: a permutation drawn from a
  generator seeded by ``seed + epoch``; several under DDP), through its ``set_epoch``;
* the sampler hands each worker ``(epoch, index)`` keys (:class:`EpochKeys`), and
  :class:`SeededSamples` seeds the sample's augmentation (albumentations, and inside a worker also
  ``random``, NumPy and torch) from ``(seed, epoch, index)`` just before loading it.

So a batch does not depend on which worker loads it, on how many workers run, or on whether the
loader (persistent workers included) was restarted: a run resumed at epoch ``e`` sees exactly the
samples an uninterrupted run sees. Call ``loader.sampler.set_epoch(epoch)`` before each epoch.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import cv2
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler, Subset

from defect_detector.data.transforms import PairTransform


def collate(batch: list[tuple[torch.Tensor, dict[str, Any]]]) -> tuple[torch.Tensor, list[dict[str, Any]]]:
    """Stack ``B`` samples: images float32 ``[B, C, H, W]`` (C = 1, or 2 with golden images: board, golden image); targets
    stay an unpadded list of ``B`` dicts."""
    images = torch.stack([image for image, _ in batch])
    targets = [target for _, target in batch]
    return images, targets


def derive_seed(*parts: int) -> int:
    """A 63-bit seed that is a function of the integers ``parts`` (NumPy's ``SeedSequence`` mixing)."""
    return int(np.random.SeedSequence([p % 2**64 for p in parts]).generate_state(1, np.uint64)[0]) >> 1


def _base_dataset(dataset: Dataset) -> Dataset:
    while isinstance(dataset, (Subset, SeededSamples)):
        dataset = dataset.dataset
    return dataset


def seed_transform(dataset: Dataset, seed: int) -> None:
    """Seed the albumentations pipeline of ``dataset`` (through Subset wrappers), which keeps its own RNG.

    All transforms of one ``A.Compose`` share one NumPy and one Python generator (``set_random_state``):
    ``Compose.set_random_seed`` would give each child its own generator with the same seed, so that,
    e.g., the horizontal and vertical flips always fire together. The parts of a :class:`PairTransform`
    get generators of their own."""
    transform = getattr(_base_dataset(dataset), "transform", None)
    pair = isinstance(transform, PairTransform)
    parts = (transform.geometric, transform.photometric, transform.residual, transform.look) if pair else (transform,)
    for offset, part in enumerate(parts):
        if part is not None and hasattr(part, "set_random_state"):
            part_seed = derive_seed(seed, offset)
            part.set_random_state(np.random.default_rng(part_seed), random.Random(part_seed))


class EpochKeys(Sampler[tuple[int, int]]):
    """Yields ``(epoch, index)`` for each index of ``sampler``; ``set_epoch`` reaches ``sampler`` too.

    The sampler runs in the main process, so the epoch travels to (persistent) workers with each key."""

    def __init__(self, sampler: Sampler[int]) -> None:
        self.sampler, self.epoch = sampler, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return ((self.epoch, int(i)) for i in self.sampler)

    def __len__(self) -> int:
        return len(self.sampler)  # type: ignore[arg-type]


class SeededSamples(Dataset):
    """``dataset`` indexed by ``(epoch, index)`` keys: each sample's random draws are seeded from
    ``(seed, epoch, index)`` before ``dataset[index]`` loads it. Inside a DataLoader worker the global
    ``random``, NumPy and torch generators are seeded too (they belong to the worker alone); in the main
    process (``workers == 0``) only the augmentation's own generators are, so training's are left alone."""

    def __init__(self, dataset: Dataset, seed: int) -> None:
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int]) -> Any:
        epoch, index = key
        seed = derive_seed(self.seed, epoch, index)
        seed_transform(self.dataset, seed)
        if torch.utils.data.get_worker_info() is not None:
            random.seed(seed)
            np.random.seed(seed % 2**32)
            torch.manual_seed(seed)
        return self.dataset[index]


def build_loader(
    dataset: Dataset,
    batch_size: int,
    train: bool,
    workers: int,
    seed: int,
    device_type: str = "cpu",
    sampler: Sampler[int] | None = None,
) -> DataLoader:
    """A DataLoader using :func:`collate`.

    Training loaders draw everything from ``(seed, epoch, index)`` (see the module docstring): the
    order from ``sampler`` (default: a one-replica ``DistributedSampler`` seeded by ``seed``), wrapped in :class:`EpochKeys` (the
    loader's ``sampler``; call its ``set_epoch``), the samples through :class:`SeededSamples`. They drop
    the last partial batch when at least one full batch exists. Evaluation loaders (``train=False``)
    read ``dataset`` in order (or ``sampler``'s), unaugmented. Memory is pinned only for CUDA.
    """
    pin = device_type == "cuda"
    if workers > 0:
        # OpenCV's thread pool does not survive fork(): a worker forked after this process used it can deadlock.
        # Loaders with workers take their parallelism from the workers, so OpenCV runs single-threaded from here on.
        cv2.setNumThreads(1)
    if not train:
        return DataLoader(
            dataset, batch_size, sampler=sampler, num_workers=workers, collate_fn=collate, pin_memory=pin, persistent_workers=workers > 0
        )
    order = sampler if sampler is not None else DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=seed)
    keys = EpochKeys(order)
    return DataLoader(
        SeededSamples(dataset, seed),
        batch_size=batch_size,
        sampler=keys,
        num_workers=workers,
        collate_fn=collate,
        pin_memory=pin,
        drop_last=len(keys) >= batch_size,
        persistent_workers=workers > 0,
    )
