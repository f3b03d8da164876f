import dataclasses
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from defect_detector.config import load_config
from defect_detector.data.synth import write_synthetic_dataset
from defect_detector.engine import trainer
from defect_detector.engine.trainer import NonFiniteLossError, fit, lr_factor, with_pixel_scale


@pytest.fixture(scope="module")
def synth16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_dataset(tmp_path_factory.mktemp("synth16"), n_images=16, height=384, width=384, seed=11)


def _load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def test_lr_schedule_warmup_then_cosine() -> None:
    assert lr_factor(0, 100, 10, 0.1) == pytest.approx(0.1)
    assert lr_factor(9, 100, 10, 0.1) == pytest.approx(1.0)
    assert lr_factor(10, 100, 10, 0.1) == pytest.approx(1.0)
    assert lr_factor(55, 100, 10, 0.1) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_factor(100, 100, 10, 0.1) == pytest.approx(0.1)


def test_overfits_tiny_synthetic_set(synth16: Path, tmp_path: Path, tiny_config) -> None:
    cfg = tiny_config(synth16, tmp_path, epochs=100, val_every=100, lr=0.01, warmup_epochs=2.0, imgsz=384)
    run = fit(cfg, progress=False)
    history = [r for r in map(__import__("json").loads, (run / "metrics.jsonl").read_text().splitlines())]
    assert len(history) == 100
    assert history[-1]["map50"] > 0.9, history[-1]
    ckpt = _load(run / "weights" / "best.pt")
    assert set(ckpt) >= {"model", "ema", "optimizer", "scaler", "epoch", "config", "class_names", "metrics"}
    for name in ("config.yaml", "plots/curves.png", "plots/pr_curves.png", "plots/confusion_matrix.png", "plots/val_predictions.png"):
        assert (run / name).is_file(), name


def test_resume_reproduces_uninterrupted_run(synth_coco: Path, tmp_path: Path, tiny_config) -> None:
    straight = fit(tiny_config(synth_coco, tmp_path / "a", epochs=3, val_every=2), progress=False)
    interrupted_cfg = tiny_config(synth_coco, tmp_path / "b", epochs=3, val_every=2)
    fit(interrupted_cfg, progress=False, stop_after_epochs=2)
    assert _load(tmp_path / "b" / "tiny" / "weights" / "last.pt")["epoch"] == 1
    resumed = fit(interrupted_cfg, resume=True, progress=False)
    a, b = _load(straight / "weights" / "last.pt"), _load(resumed / "weights" / "last.pt")
    assert a["epoch"] == b["epoch"] == 2
    for key in ("model", "ema"):
        for name, tensor in a[key].items():
            torch.testing.assert_close(b[key][name], tensor, rtol=0, atol=1e-6, msg=f"{key}.{name}")
    assert (resumed / "metrics.jsonl").read_text().count("\n") == 3


def test_pixel_scale_is_the_median_training_scale(synth_coco: Path, tmp_path: Path, tiny_config) -> None:
    cfg = tiny_config(synth_coco, tmp_path, imgsz=256)
    assert cfg.data.pixel_scale is None
    sizes = [(384, 384), (512, 256), (256, 1024)]  # letterboxed into 256: scales 0.667, 0.5, 0.25
    assert with_pixel_scale(cfg, sizes).data.pixel_scale == pytest.approx(0.5)
    cropped = dataclasses.replace(cfg, augment=dataclasses.replace(cfg.augment, crop_size=128))
    assert with_pixel_scale(cropped, sizes).data.pixel_scale == 1.0  # full-resolution crops, whatever the image size
    recorded = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, pixel_scale=0.3))
    assert with_pixel_scale(recorded, sizes) is recorded and with_pixel_scale(cfg, []) is cfg


def test_existing_run_is_not_overwritten(synth_coco: Path, tmp_path: Path, tiny_config) -> None:
    cfg = tiny_config(synth_coco, tmp_path, epochs=1, val_every=5, imgsz=192)
    run = fit(cfg, progress=False)
    # The run records the scale it trained at (256 px boards letterboxed into 192): in config.yaml and checkpoints.
    assert load_config(run / "config.yaml").data.pixel_scale == pytest.approx(0.75)
    assert _load(run / "weights" / "last.pt")["config"]["data"]["pixel_scale"] == pytest.approx(0.75)
    with pytest.raises(FileExistsError, match="--resume"):
        fit(cfg, progress=False)
    fit(cfg, exist_ok=True, progress=False)
    assert (tmp_path / "tiny" / "metrics.jsonl").read_text().count("\n") == 1


def test_non_finite_loss_is_skipped_then_stops(synth_coco: Path, tmp_path: Path, tiny_config, monkeypatch: pytest.MonkeyPatch) -> None:
    def nan_loss(self, raw, targets, points, strides):
        return raw.sum() * float("nan"), {"box": 0.0, "cls": 0.0, "num_fg": 0.0}

    monkeypatch.setattr(trainer.DetectionLoss, "__call__", nan_loss)
    with pytest.raises(NonFiniteLossError, match="max_bad_steps=0"):
        fit(tiny_config(synth_coco, tmp_path, epochs=1, max_bad_steps=0), progress=False)
    run = fit(tiny_config(synth_coco, tmp_path / "tolerant", epochs=1, max_bad_steps=10, val_every=5), progress=False)
    ckpt = _load(run / "weights" / "last.pt")
    assert ckpt["bad_steps"] == 1 and ckpt["optimizer_steps"] == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_two_processes_gloo(synth_coco: Path, tmp_path: Path) -> None:
    overrides = [
        f"data.train={synth_coco}",
        f"data.val={synth_coco}",
        "data.imgsz=256",
        "data.workers=0",
        f"out_dir={tmp_path}",
        "name=ddp",
        "model.widths=[16,32,48,64]",
        "model.depths=[1,1,1,1]",
        "model.neck_channels=32",
        "model.head_convs=1",
        "train.epochs=1",
        "train.batch_size=2",
        "train.device=cpu",
    ]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={_free_port()}",
        "-m",
        "defect_detector.cli",
        "train",
        "--config",
        str(Path(__file__).parent.parent / "configs" / "synth.yaml"),
        *overrides,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    ckpt = _load(tmp_path / "ddp" / "weights" / "last.pt")
    assert ckpt["epoch"] == 0 and ckpt["optimizer_steps"] == 1  # 4 images / (2 ranks x batch 2) = 1 step
