"""Shared fixtures: small synthetic boards and a fast config for them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hypothesis import settings

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
# No per-example time limit: timing is not a test assertion here, and a loaded 2-core machine is slow.
settings.register_profile("no_deadline", deadline=None)
settings.load_profile("no_deadline")

from defect_detector.core.config import Config, config_from_dict  # noqa: E402
from defect_detector.data.synth import write_synthetic_dataset  # noqa: E402

TINY_MODEL = {"widths": [16, 32, 48, 64], "depths": [1, 1, 1, 1], "neck_channels": 32, "head_convs": 1}


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module of tiny-input tests: on a busy 2-core machine extra threads only contend
    (OpenMP barriers made small forward passes up to 100x slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def synth_coco(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four 256x256 synthetic boards with a COCO json (shared, read-only)."""
    return write_synthetic_dataset(tmp_path_factory.mktemp("synth"), n_images=4, height=256, width=256, seed=7)


@pytest.fixture
def tiny_config():
    """Factory: ``tiny_config(ann, out_dir, **train_overrides)`` -> a :class:`Config` that trains a tiny
    model on ``ann`` (train = val) without augmentation, on the CPU."""
    return _tiny_config


def _tiny_config(ann: Path, out_dir: Path, imgsz: int = 256, **train: object) -> Config:
    raw = {
        "name": "tiny",
        "seed": 3,
        "out_dir": str(out_dir),
        "data": {"train": str(ann), "val": str(ann), "imgsz": imgsz, "workers": 0},
        "augment": {
            "hflip": 0.0,
            "vflip": 0.0,
            "rotate_p": 0.0,
            "affine_p": 0.0,
            "photometric_p": 0.0,
            "blur_p": 0.0,
            "noise_p": 0.0,
            "glare_p": 0.0,
        },
        "model": TINY_MODEL,
        "train": {"epochs": 2, "batch_size": 4, "lr": 0.01, "warmup_epochs": 0.5, "device": "cpu", "ema_decay": 0.9, **train},
    }
    return config_from_dict(raw)
