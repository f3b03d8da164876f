"""Shared fixtures: small synthetic boards and a fast config for them."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from filelock import FileLock
from hypothesis import settings

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
# No per-example time limit: timing is not a test assertion here, and a loaded 2-core machine is slow.
settings.register_profile("no_deadline", deadline=None)
settings.load_profile("no_deadline")
if os.environ.get("PYTEST_XDIST_WORKER"):  # one worker per core (make test): a test's own torch ops on its worker's core
    torch.set_num_threads(1)

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


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    """One torch thread inside the block (an AOTInductor build on a busy machine), the count restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], dict]) -> dict:
    """``build(folder)`` run once per test run, whatever the number of pytest-xdist workers: the first worker to come
    builds it under a file lock in the run's shared temporary folder and writes its result (paths, and a report that
    JSON holds) beside it; the others read that. ``{"checkpoint": Path, "path": Path, "report": dict}``."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's folder sits in the run's shared one
        root = root.parent
    folder, done = root / f"shared_{name}", root / f"shared_{name}.json"
    with FileLock(str(root / f"shared_{name}.lock")):
        if not done.is_file():
            folder.mkdir(exist_ok=True)
            done.write_text(json.dumps(build(folder), default=str))
        saved = json.loads(done.read_text())
    return {"checkpoint": Path(saved["checkpoint"]), "path": Path(saved["path"]), "report": saved["report"]}


PT2_IMGSZ = 320
"""Input size of the shared ``.pt2`` (a 640x480 board letterboxes into it at scale exactly 0.5, as the C++ test needs)."""


@pytest.fixture(scope="session")
def small_pt2(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One AOTInductor ``.pt2`` of a small seeded 1-channel checkpoint at :data:`PT2_IMGSZ` whose calls are far from ties
    (``small_checkpoint.SPREAD``: the tests compare them across runtimes in order), with a drift baseline embedded,
    compiled once per session (AOTInductor builds a shared library: ~30-60 s on a loaded 2-core machine) and shared by
    the ``.pt2`` export, runtime, CLI and C++ tests. ``{"checkpoint", "path", "report"}``."""
    import numpy as np
    from small_checkpoint import SPREAD, SPREAD_BIAS, write_small_checkpoint

    from defect_detector.export import DeployModel, export_pt2
    from defect_detector.model.checkpoint import load_checkpoint
    from defect_detector.monitor.baseline import calibrate

    def build(folder: Path) -> dict:
        checkpoint = write_small_checkpoint(folder / "small.pt", PT2_IMGSZ, cls_bias=SPREAD_BIAS, seed=1, spread=SPREAD)
        loaded = load_checkpoint(checkpoint)
        layers = list(DeployModel(loaded.model, PT2_IMGSZ).layer_names)
        frames = np.abs(np.random.default_rng(0).normal(1.0, 0.1, (32, len(layers), 2)))
        baseline = calibrate(frames, layers, PT2_IMGSZ, source="test").to_dict()
        with _one_torch_thread():
            report = export_pt2(loaded, folder / "small.pt2", baseline=baseline)
        return {"checkpoint": checkpoint, "path": folder / "small.pt2", "report": report}

    return _built_once(tmp_path_factory, "pt2", build)


SIAMESE_PT2_IMGSZ = 64
"""Input size of the shared siamese ``.pt2`` (a 128x96 board letterboxes into it at scale exactly 0.5)."""


@pytest.fixture(scope="session")
def small_siamese_pt2(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One AOTInductor ``.pt2`` of a small seeded siamese golden-template checkpoint at :data:`SIAMESE_PT2_IMGSZ`: three
    compiled models (``forward``, ``golden``, ``frame``; 1-2 min on a loaded 2-core machine), shared by the cached-path
    runtime and C++ tests, which compare its calls across paths (its scores far from ties: ``small_checkpoint.SPREAD``).
    Skipped where ``.pt2`` cannot be built. ``{"checkpoint", "path", "report"}``."""
    from small_checkpoint import SPREAD, SPREAD_BIAS, write_small_checkpoint

    from defect_detector.export import export_pt2, pt2_unavailable_reason
    from defect_detector.model.checkpoint import load_checkpoint

    if (reason := pt2_unavailable_reason()) is not None:
        pytest.skip(reason)

    def build(folder: Path) -> dict:
        model = {"fusion": "siamese"}
        checkpoint = write_small_checkpoint(
            folder / "siamese.pt", SIAMESE_PT2_IMGSZ, SPREAD_BIAS, randomize_bn=True, seed=3, in_channels=2, model=model, spread=SPREAD
        )
        with _one_torch_thread():
            report = export_pt2(load_checkpoint(checkpoint), folder / "siamese.pt2")
        return {"checkpoint": checkpoint, "path": folder / "siamese.pt2", "report": report}

    return _built_once(tmp_path_factory, "siamese_pt2", build)
