from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import SequentialSampler, Subset

from defect_detector.core.config import AugmentConfig
from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.core.types import LetterboxMeta
from defect_detector.data.collate import EpochKeys, build_loader, collate, seed_transform
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.data.synth import write_synthetic_dataset
from defect_detector.data.transforms import build_transforms


@pytest.fixture(scope="module")
def ann_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_dataset(tmp_path_factory.mktemp("synth"), n_images=6, height=96, width=128, seed=0)


def _dataset(ann_file: Path, augment: bool) -> CocoDetectionDataset:
    transform = build_transforms(AugmentConfig(), train=True) if augment else None
    return CocoDetectionDataset(ann_file, None, DEEPPCB_CLASSES, 64, transform=transform)


def _epoch(loader: torch.utils.data.DataLoader) -> list[tuple[torch.Tensor, list[dict]]]:
    return list(loader)


def _assert_same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for (images_a, targets_a), (images_b, targets_b) in zip(a, b):
        torch.testing.assert_close(images_a, images_b, rtol=0, atol=0)
        for ta, tb in zip(targets_a, targets_b):
            assert ta["image_id"] == tb["image_id"]
            torch.testing.assert_close(ta["boxes"], tb["boxes"], rtol=0, atol=0)


def test_collate_stacks_images_and_keeps_targets_unpadded() -> None:
    meta = LetterboxMeta(1.0, 0.0, 0.0, 8, 8)
    batch = [
        (torch.zeros(1, 8, 8), {"boxes": torch.zeros(2, 4), "labels": torch.zeros(2, dtype=torch.int64), "image_id": 1, "letterbox": meta}),
        (torch.ones(1, 8, 8), {"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.int64), "image_id": 2, "letterbox": meta}),
    ]
    images, targets = collate(batch)
    assert images.shape == (2, 1, 8, 8) and images.dtype == torch.float32
    assert [t["image_id"] for t in targets] == [1, 2]
    assert targets[0]["boxes"].shape == (2, 4) and targets[1]["boxes"].shape == (0, 4)


def test_loader_options(ann_file: Path) -> None:
    ds = _dataset(ann_file, augment=False)
    train = build_loader(ds, batch_size=4, train=True, workers=0, seed=0)
    assert train.drop_last and not train.pin_memory and len(train) == 1
    assert build_loader(ds, batch_size=4, train=False, workers=0, seed=0, device_type="cuda").pin_memory
    val = build_loader(ds, batch_size=4, train=False, workers=0, seed=0)
    assert not val.drop_last and len(val) == 2
    assert [t["image_id"] for _, targets in val for t in targets] == ds.image_ids
    small = build_loader(ds, batch_size=16, train=True, workers=0, seed=0)
    assert len(small) == 1, "a dataset smaller than one batch still yields a batch"
    ordered = build_loader(ds, batch_size=2, train=True, workers=0, seed=0, sampler=SequentialSampler(ds))
    assert [t["image_id"] for _, targets in ordered for t in targets] == ds.image_ids


def _epochs(loader: torch.utils.data.DataLoader, epochs: list[int]) -> list[list]:
    out = []
    for epoch in epochs:
        loader.sampler.set_epoch(epoch)
        out.append(_epoch(loader))
    return out


def test_same_seed_same_batches_in_process(ann_file: Path) -> None:
    first = _epoch(build_loader(_dataset(ann_file, augment=True), 2, train=True, workers=0, seed=7))
    second = _epoch(build_loader(_dataset(ann_file, augment=True), 2, train=True, workers=0, seed=7))
    _assert_same(first, second)
    other = _epoch(build_loader(_dataset(ann_file, augment=True), 2, train=True, workers=0, seed=8))
    assert any(not torch.equal(a[0], b[0]) for a, b in zip(first, other))


def test_batches_depend_on_seed_epoch_and_index_only(ann_file: Path) -> None:
    """The same batches whatever the worker count, and whether the (persistent-worker) loader was restarted."""
    in_process = _epochs(build_loader(_dataset(ann_file, augment=True), 2, train=True, workers=0, seed=3), [0, 1])
    workers = build_loader(_dataset(ann_file, augment=True), 2, train=True, workers=2, seed=3)
    assert isinstance(workers.sampler, EpochKeys) and workers.persistent_workers
    with_workers = _epochs(workers, [0, 1])
    restarted = _epochs(build_loader(_dataset(ann_file, augment=True), 2, train=True, workers=1, seed=3), [1])
    for a, b in zip(in_process, with_workers):
        _assert_same(a, b)
    _assert_same(restarted[0], in_process[1])
    order = [[t["image_id"] for _, targets in epoch for t in targets] for epoch in in_process]
    assert sorted(order[0]) == sorted(order[1]) and order[0] != order[1], "each epoch its own shuffle"
    assert torch.cat([b[0] for b in with_workers[0]]).shape == (6, 1, 64, 64)


def test_flips_are_drawn_independently() -> None:
    """One generator per pipeline: seeding each transform with the same seed made both flips fire together."""
    cfg = AugmentConfig(rotate_p=0, affine_p=0, photometric_p=0, blur_p=0, noise_p=0, glare_p=0)
    dataset = torch.utils.data.TensorDataset(torch.zeros(1))
    dataset.transform = build_transforms(cfg, train=True)
    image = np.arange(64, dtype=np.uint8).reshape(8, 8)
    outcomes = set()
    for seed in range(40):
        seed_transform(Subset(dataset, [0]), seed)
        out = dataset.transform(image=image, bboxes=np.zeros((0, 4), np.float32), labels=np.zeros(0, np.int64))["image"]
        outcomes.add(next(name for name, view in _FLIPS.items() if np.array_equal(out, view(image))))
    assert outcomes == set(_FLIPS)


_FLIPS = {"none": lambda x: x, "h": lambda x: x[:, ::-1], "v": lambda x: x[::-1], "hv": lambda x: x[::-1, ::-1]}
