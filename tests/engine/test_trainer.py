import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from defect_detector.cli.main import main
from defect_detector.core.config import AugmentConfig, ConfigError, load_config, save_config
from defect_detector.data.synth import write_synthetic_dataset
from defect_detector.engine import run_files
from defect_detector.engine.trainer import NonFiniteLossError, TrainingError, fit, lr_factor, with_pixel_scale
from defect_detector.jobs.validate import TrainingValidation
from defect_detector.model.loss import DetectionLoss


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
    cfg = tiny_config(synth16, tmp_path, epochs=60, val_every=60, lr=0.02, warmup_epochs=2.0, imgsz=384)  # map50 1.0 measured
    run = fit(cfg, TrainingValidation(), progress=False)
    history = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]
    assert len(history) == 60
    assert history[-1]["map50"] > 0.9, history[-1]
    ckpt = _load(run / "weights" / "best.pt")
    assert set(ckpt) >= {"model", "ema", "optimizer", "scaler", "epoch", "config", "class_names", "metrics"}
    for name in ("config.yaml", "plots/curves.png", "plots/pr_curves.png", "plots/confusion_matrix.png", "plots/val_predictions.png"):
        assert (run / name).is_file(), name


def test_resume_reproduces_uninterrupted_run(synth_coco: Path, tmp_path: Path, tiny_config) -> None:
    straight = fit(tiny_config(synth_coco, tmp_path / "a", epochs=3, val_every=2), TrainingValidation(), progress=False, threads=1)
    interrupted_cfg = tiny_config(synth_coco, tmp_path / "b", epochs=3, val_every=2)
    fit(interrupted_cfg, TrainingValidation(), progress=False, stop_after_epochs=2, threads=1)
    assert _load(tmp_path / "b" / "tiny" / "weights" / "last.pt")["epoch"] == 1
    resumed = fit(interrupted_cfg, TrainingValidation(), resume=True, progress=False, threads=1)
    a, b = _load(straight / "weights" / "last.pt"), _load(resumed / "weights" / "last.pt")
    assert a["epoch"] == b["epoch"] == 2
    _assert_same_weights(a, b)
    assert _epochs(resumed) == [0, 1, 2]


def _assert_same_weights(a: dict, b: dict) -> None:
    for key in ("model", "ema"):
        assert a[key].keys() == b[key].keys()
        differ = [name for name, tensor in a[key].items() if not torch.equal(b[key][name], tensor)]
        assert not differ, f"{len(differ)} of {len(a[key])} {key} tensors differ: {differ[:5]}"


def _epochs(run: Path) -> list[int]:
    return [json.loads(line)["epoch"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def _train_cli(config: Path, *args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "defect_detector.cli.main", "train", "--config", str(config), "--threads", "1", *args]
    env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1"}
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


def _finish(proc: subprocess.Popen) -> None:
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]


def test_sigkill_mid_epoch_then_resume_gives_identical_weights(tmp_path: Path, tiny_config) -> None:
    """workers=2, augmentation on: kill -9 at a random point of epoch 2, ``train --resume``: the same weights, bit for bit."""
    ann = write_synthetic_dataset(tmp_path / "data", n_images=24, height=160, width=160, seed=5)
    cfg = tiny_config(ann, tmp_path / "runs", imgsz=128, epochs=3, val_every=10)
    cfg = cfg.model_copy(update={"augment": AugmentConfig(), "data": cfg.data.model_copy(update={"workers": 2})})
    save_config(cfg, tmp_path / "cfg.yaml")
    straight = _train_cli(tmp_path / "cfg.yaml", "name=straight")
    _finish(straight)

    killed = _train_cli(tmp_path / "cfg.yaml")
    run = tmp_path / "runs" / "tiny"
    deadline = time.monotonic() + 240
    while not ((run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().count("\n") >= 1):
        assert killed.poll() is None and time.monotonic() < deadline, "the run ended before its first epoch was written"
        time.sleep(0.01)
    first_epoch_s = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])["epoch_seconds"]
    time.sleep(random.Random(87).uniform(0.05, 0.4) * first_epoch_s)  # seeded: a rerun kills at the same share
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(timeout=30)
    os.killpg(killed.pid, signal.SIGKILL)  # its DataLoader workers
    assert killed.returncode == -signal.SIGKILL, "the run ended before the kill"
    assert _load(run / "weights" / "last.pt")["epoch"] in (0, 1)  # killed in epoch 2, or in 3 where epoch 2 ran faster than 1

    _finish(_train_cli(tmp_path / "cfg.yaml", "--resume"))
    _assert_same_weights(_load(tmp_path / "runs" / "straight" / "weights" / "last.pt"), _load(run / "weights" / "last.pt"))
    assert _epochs(run) == [0, 1, 2]


def test_kill_between_checkpoint_and_metrics_line(synth_coco: Path, tmp_path: Path, tiny_config, monkeypatch: pytest.MonkeyPatch) -> None:
    """The epoch's checkpoint is written, its metrics line is not (and a temp file is left): resume lists each epoch once."""
    cfg = tiny_config(synth_coco, tmp_path, imgsz=64, epochs=3, val_every=10)
    real_append = run_files.append_jsonl

    def killed_at_epoch_1(path: Path, record: dict) -> None:
        if record["epoch"] == 1:
            (path.parent / "weights" / ".last.pt.x1y2.tmp").write_bytes(b"half a checkpoint")
            path.open("a").write('{"epoch": 1, "train_lo')  # a line cut short
            raise KeyboardInterrupt
        real_append(path, record)

    monkeypatch.setattr(run_files, "append_jsonl", killed_at_epoch_1)
    with pytest.raises(KeyboardInterrupt):
        fit(cfg, TrainingValidation(), progress=False, threads=1)
    monkeypatch.setattr(run_files, "append_jsonl", real_append)
    run = tmp_path / "tiny"
    assert _load(run / "weights" / "last.pt")["epoch"] == 1
    resumed = fit(cfg, TrainingValidation(), resume=True, progress=False, threads=1)
    assert _epochs(resumed) == [0, 1, 2]
    assert not list((run / "weights").glob(".*.tmp"))
    assert (run / "weights" / "best.pt").is_file()


def test_resume_refuses_a_changed_config_before_writing(synth_coco: Path, tmp_path: Path, tiny_config) -> None:
    cfg = tiny_config(synth_coco, tmp_path, imgsz=64, epochs=2, val_every=10)
    run = fit(cfg, TrainingValidation(), progress=False, threads=1, stop_after_epochs=1)
    config_yaml = (run / "config.yaml").read_text()
    changed = cfg.model_copy(update={"seed": 4, "train": cfg.train.model_copy(update={"lr": 0.02})})
    with pytest.raises(TrainingError, match=r"seed \(3 -> 4\); train\.lr \(0\.01 -> 0\.02\).*name=NEW") as info:
        fit(changed, TrainingValidation(), resume=True, progress=False, threads=1)
    assert "\n" not in str(info.value)
    wider = cfg.model_copy(update={"model": cfg.model.model_copy(update={"neck_channels": 64})})
    with pytest.raises(TrainingError, match=r"architecture or classes: model\.neck_channels \(32 -> 64\)"):
        fit(wider, TrainingValidation(), resume=True, progress=False, threads=1)
    shorter = cfg.model_copy(update={"train": cfg.train.model_copy(update={"epochs": 1})})
    with pytest.raises(TrainingError, match=r"train\.epochs \(2 -> 1\)"):
        fit(shorter, TrainingValidation(), resume=True, progress=False, threads=1)
    assert (run / "config.yaml").read_text() == config_yaml
    assert _epochs(run) == [0]
    longer = cfg.model_copy(
        update={"train": cfg.train.model_copy(update={"epochs": 3}), "data": cfg.data.model_copy(update={"workers": 1})}
    )
    fit(longer, TrainingValidation(), resume=True, progress=False, threads=1)
    assert _epochs(run) == [0, 1, 2] and load_config(run / "config.yaml").train.epochs == 3


def test_resume_from_a_truncated_checkpoint_is_one_line(synth_coco: Path, tmp_path: Path, tiny_config, capsys) -> None:
    cfg = tiny_config(synth_coco, tmp_path, imgsz=64, epochs=1, val_every=10)
    run = fit(cfg, TrainingValidation(), progress=False, threads=1)
    last = run / "weights" / "last.pt"
    last.write_bytes(last.read_bytes()[:1000])
    save_config(cfg, tmp_path / "cfg.yaml")
    assert main(["train", "--config", str(tmp_path / "cfg.yaml"), "--resume", "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{last}: not a readable checkpoint" in err, err
    torch.save({"model": {}, "config": cfg.to_dict()}, last)  # an inference-only checkpoint
    with pytest.raises(TrainingError, match="not a resumable training checkpoint .*optimizer"):
        fit(cfg, TrainingValidation(), resume=True, progress=False, threads=1)


def test_pixel_scale_is_the_median_training_scale(synth_coco: Path, tmp_path: Path, tiny_config) -> None:
    cfg = tiny_config(synth_coco, tmp_path, imgsz=256)
    assert cfg.data.pixel_scale is None
    sizes = [(384, 384), (512, 256), (256, 1024)]  # letterboxed into 256: scales 0.667, 0.5, 0.25
    assert with_pixel_scale(cfg, sizes).data.pixel_scale == pytest.approx(0.5)
    cropped = cfg.model_copy(update={"augment": cfg.augment.model_copy(update={"crop_size": 128})})
    assert with_pixel_scale(cropped, sizes).data.pixel_scale == 1.0  # full-resolution crops, whatever the image size
    recorded = cfg.model_copy(update={"data": cfg.data.model_copy(update={"pixel_scale": 0.3})})
    assert with_pixel_scale(recorded, sizes) is recorded and with_pixel_scale(cfg, []) is cfg


def test_existing_run_is_not_overwritten(synth_coco: Path, tmp_path: Path, tiny_config) -> None:
    cfg = tiny_config(synth_coco, tmp_path, epochs=1, val_every=5, imgsz=192)
    run = fit(cfg, TrainingValidation(), progress=False)
    # The run records the scale it trained at (256 px boards letterboxed into 192): in config.yaml and checkpoints.
    assert load_config(run / "config.yaml").data.pixel_scale == pytest.approx(0.75)
    assert _load(run / "weights" / "last.pt")["config"]["data"]["pixel_scale"] == pytest.approx(0.75)
    with pytest.raises(FileExistsError, match="--resume"):
        fit(cfg, TrainingValidation(), progress=False)
    fit(cfg, TrainingValidation(), exist_ok=True, progress=False)
    assert (tmp_path / "tiny" / "metrics.jsonl").read_text().count("\n") == 1


def test_non_finite_loss_is_skipped_then_stops(synth_coco: Path, tmp_path: Path, tiny_config, monkeypatch: pytest.MonkeyPatch) -> None:
    def nan_loss(self, raw, targets, points, strides):
        return raw.sum() * float("nan"), {"box": 0.0, "cls": 0.0, "num_fg": 0.0}

    monkeypatch.setattr(DetectionLoss, "__call__", nan_loss)
    with pytest.raises(NonFiniteLossError, match="max_bad_steps=0.*lower train.lr") as info:
        fit(tiny_config(synth_coco, tmp_path, epochs=1, max_bad_steps=0), TrainingValidation(), progress=False, threads=1)
    assert isinstance(info.value, ValueError), "the CLI reports ValueErrors as one line"
    tolerant = tiny_config(synth_coco, tmp_path / "tolerant", epochs=1, max_bad_steps=10, val_every=5)
    run = fit(tolerant, TrainingValidation(), progress=False, threads=1)
    ckpt = _load(run / "weights" / "last.pt")
    assert ckpt["bad_steps"] == 1 and ckpt["optimizer_steps"] == 0


def test_warmup_epochs_must_be_finite(synth_coco: Path) -> None:
    with pytest.raises(ConfigError, match=r"train\.warmup_epochs: must be a finite number, got inf"):
        load_config(None, ["train.warmup_epochs=.inf"])


def _without(ann: Path, out: Path, key: str) -> Path:
    raw = json.loads(ann.read_text())
    raw["info"] = {"images_root": os.path.relpath(ann.parent / raw["info"]["images_root"], out.parent)}
    if key == "files":
        raw["images"] = [dict(img, file_name=f"missing_{img['file_name']}") for img in raw["images"]]
    else:
        raw["annotations"] = []
    out.write_text(json.dumps(raw))
    return out


def test_training_json_without_readable_images(synth_coco: Path, tmp_path: Path, tiny_config) -> None:
    bad = _without(synth_coco, tmp_path / "nofiles.json", "files")
    with pytest.raises(TrainingError, match=rf"{bad}: no readable training images .*missing image file x4"):
        fit(tiny_config(bad, tmp_path, imgsz=64, epochs=1), TrainingValidation(), progress=False, threads=1)


def test_validation_without_annotations_still_writes_best(synth_coco: Path, tmp_path: Path, tiny_config, caplog) -> None:
    """No ground truth: no mAP to choose by, so validation is skipped (said once) and best.pt is the latest epoch."""
    cfg = tiny_config(synth_coco, tmp_path, imgsz=64, epochs=2)
    cfg = cfg.model_copy(
        update={"data": cfg.data.model_copy(update={"val": str(_without(synth_coco, tmp_path / "noann.json", "annotations"))})}
    )
    with caplog.at_level("WARNING", logger="defect_detector.train"):
        run = fit(cfg, TrainingValidation(), progress=False, threads=1)
    assert sum("mAP cannot be measured" in r.getMessage() for r in caplog.records) == 1
    best, last = _load(run / "weights" / "best.pt"), _load(run / "weights" / "last.pt")
    assert best["epoch"] == last["epoch"] == 1
    assert all("map50" not in json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines())


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
        "defect_detector.cli.main",
        "train",
        "--config",
        str(Path(__file__).resolve().parents[2] / "configs" / "synth.yaml"),
        *overrides,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    ckpt = _load(tmp_path / "ddp" / "weights" / "last.pt")
    assert ckpt["epoch"] == 0 and ckpt["optimizer_steps"] == 1  # 4 images / (2 ranks x batch 2) = 1 step


def test_resume_checks_a_digest_of_the_jsons(synth_coco: Path, tmp_path: Path, tiny_config, caplog: pytest.LogCaptureFixture) -> None:
    coco = json.loads(synth_coco.read_text())
    root = coco.get("info", {}).get("images_root", ".")
    coco["info"] = {**coco.get("info", {}), "images_root": str((synth_coco.parent / root).resolve())}
    ann = tmp_path / "train.json"
    ann.write_text(json.dumps(coco))
    cfg = tiny_config(ann, tmp_path / "runs", imgsz=64, epochs=2, val_every=10)
    run = fit(cfg, TrainingValidation(), progress=False, threads=1, stop_after_epochs=1)
    assert set(_load(run / "weights" / "last.pt")["data_digests"]) == {"data.train", "data.val"}
    coco["info"]["description"] = "edited in place"  # (was accepted on --resume without a word)
    ann.write_text(json.dumps(coco))
    changed = r"data that changed since the run's last epoch: data\.train \(sha256 \w{12} -> \w{12}\)"
    with pytest.raises(TrainingError, match=changed) as info:
        fit(cfg, TrainingValidation(), resume=True, progress=False, threads=1)
    assert "--allow-data-change" in str(info.value) and "\n" not in str(info.value)
    assert _epochs(run) == [0]
    with caplog.at_level("WARNING", logger="defect_detector.engine"):
        fit(cfg, TrainingValidation(), resume=True, progress=False, threads=1, allow_data_change=True)
    assert _epochs(run) == [0, 1] and "resuming on changed data (--allow-data-change)" in caplog.text


def test_the_log_counts_epochs_as_metrics_jsonl_and_the_plots_name_the_stored_threshold(
    synth_coco: Path, tmp_path: Path, tiny_config, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 43: the log said epochs 1-2 where ``metrics.jsonl`` says 0-1, and the confusion matrix was drawn at the
    config's ``eval.f1_conf`` (">= 0.3") where ``best.pt`` stores the F-optimal threshold the run measured."""
    from defect_detector.engine import plots

    drawn: list[float | None] = []
    real = plots.plot_confusion_matrix

    def recording(matrix, names, path, conf=None, iou=0.5):  # noqa: ANN001, ANN202
        drawn.append(conf)
        return real(matrix, names, path, conf, iou)

    monkeypatch.setattr(plots, "plot_confusion_matrix", recording)
    cfg = tiny_config(synth_coco, tmp_path, imgsz=64, epochs=2)
    with caplog.at_level("INFO", logger="defect_detector.train"):
        run = fit(cfg, TrainingValidation(), progress=False, threads=1)
    logged = [r.getMessage().split(":")[0] for r in caplog.records if r.getMessage().startswith("epoch ")]
    assert logged == ["epoch 0 (1/2)", "epoch 1 (2/2)"] and _epochs(run) == [0, 1]
    stored = _load(run / "weights" / "best.pt")["config"]["eval"]["f1_conf"]
    assert drawn and drawn[-1] == stored != cfg.eval.f1_conf
