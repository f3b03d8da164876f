from pathlib import Path

import pytest
import torch
from torch.utils.data import SequentialSampler, Subset

from defect_detector.config import DEEPPCB_CLASSES, AugmentConfig
from defect_detector.data.collate import _reseed_transform, build_loader, collate
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.data.letterbox import LetterboxMeta
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


def test_same_seed_same_batches_in_process(ann_file: Path) -> None:
    first = _epoch(build_loader(_dataset(ann_file, augment=True), 2, train=True, workers=0, seed=7))
    second = _epoch(build_loader(_dataset(ann_file, augment=True), 2, train=True, workers=0, seed=7))
    _assert_same(first, second)
    other = _epoch(build_loader(_dataset(ann_file, augment=True), 2, train=True, workers=0, seed=8))
    assert any(not torch.equal(a[0], b[0]) for a, b in zip(first, other))


def test_same_seed_same_batches_with_workers(ann_file: Path) -> None:
    loaders = [build_loader(_dataset(ann_file, augment=True), 2, train=True, workers=2, seed=3) for _ in range(2)]
    first, second = _epoch(loaders[0]), _epoch(loaders[1])
    _assert_same(first, second)
    images = torch.cat([b[0] for b in first])
    assert images.shape == (6, 1, 64, 64)


def test_reseed_reaches_the_transform_through_subsets(ann_file: Path) -> None:
    ds = _dataset(ann_file, augment=True)
    _reseed_transform(Subset(Subset(ds, [0, 1]), [0]), 123)
    assert ds.transform.seed == 123
