"""Fine-tuning from given weights, capped runs, and the drift baseline a finished run carries."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
import yaml
from small_checkpoint import SMALL_MODEL, write_small_checkpoint

from defect_detector.cli.main import main
from defect_detector.data.synth import write_synthetic_dataset
from defect_detector.engine.budget import Budget
from defect_detector.jobs.calibrate import calibrate_run
from defect_detector.model.checkpoint import load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def synth32(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """32 boards of 128x128: enough frames for a drift baseline that a run embeds."""
    return write_synthetic_dataset(tmp_path_factory.mktemp("synth32"), n_images=32, height=128, width=128, seed=5)


def _yaml(path: Path, ann: Path, out: Path, model: dict | None = None, evals: dict | None = None, **train: object) -> Path:
    raw = {
        "name": "ft",
        "out_dir": str(out),
        "data": {"train": str(ann), "val": str(ann), "imgsz": 128, "workers": 0},
        "augment": {"hflip": 0.0, "vflip": 0.0, "rotate_p": 0.0, "affine_p": 0.0, "photometric_p": 0.0, "blur_p": 0.0},
        "train": {"epochs": 1, "batch_size": 2, "device": "cpu", "warmup_epochs": 0.0, **train},
    }
    if model is not None:
        raw["model"] = model
    if evals is not None:
        raw["eval"] = evals
    path.write_text(yaml.safe_dump(raw))
    return path


def _parent(tmp_path: Path) -> Path:
    """A small checkpoint whose stored operating point is not the config defaults: NMS 0.5, f1_conf 0.25, cross-class
    demotion at IoU 0.3 to half the score."""
    path = write_small_checkpoint(tmp_path / "parent.pt", 128)
    ckpt = torch.load(path, weights_only=True)
    ckpt["config"]["eval"] |= {"cross_class_iou": 0.3, "cross_class_factor": 0.5}
    torch.save(ckpt, path)
    return path


def test_fine_tuning_adopts_the_architecture_of_its_weights(synth_coco: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """v0.8 built default.yaml's architecture and loaded 87 of 276 tensors of the bundled model, with one INFO line."""
    init = write_small_checkpoint(tmp_path / "init.pt", 128)
    cfg = _yaml(tmp_path / "line1.yaml", synth_coco, tmp_path / "runs", init_weights=str(init))
    assert main(["train", "--config", str(cfg), "--no-baseline"]) == 0
    capsys.readouterr()
    trained = load_checkpoint(tmp_path / "runs" / "ft" / "weights" / "best.pt")
    assert list(trained.config.model.widths) == SMALL_MODEL["widths"] and trained.baseline is None
    other = {"widths": [8, 16, 24, 32], "depths": [1, 1, 1, 1], "neck_channels": 16, "head_convs": 1}
    named = _yaml(tmp_path / "other.yaml", synth_coco, tmp_path / "runs2", model=other, init_weights=str(init))
    assert main(["train", "--config", str(named), "--no-baseline"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("defect-detector train: error: train.init_weights=") and "drop the model section" in last


def test_a_run_stops_at_max_minutes_and_trains_on_max_images(synth_coco: Path, tmp_path: Path) -> None:
    cfg = _yaml(tmp_path / "capped.yaml", synth_coco, tmp_path / "runs", model=SMALL_MODEL, epochs=3, max_minutes=1e-4)
    assert main(["train", "--config", str(cfg), "--no-baseline", "data.max_images=2"]) == 0
    run = tmp_path / "runs" / "ft"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 1  # stopped after the first epoch: the time cap had passed
    assert load_checkpoint(run / "weights" / "last.pt").config.data.max_images == 2


def test_a_finished_run_carries_its_drift_baseline(synth32: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = _yaml(tmp_path / "run.yaml", synth32, tmp_path / "runs", model=SMALL_MODEL, batch_size=8)
    assert main(["train", "--config", str(cfg)]) == 0, capsys.readouterr().err
    assert "drift baseline: 32 training images" in capsys.readouterr().out
    run = tmp_path / "runs" / "ft"
    for name in ("best.pt", "last.pt"):
        baseline = load_checkpoint(run / "weights" / name).baseline
        assert baseline is not None and baseline["count"] == 32 and baseline["faults"] is not None
    assert "optimizer" in torch.load(run / "weights" / "last.pt", weights_only=True)  # last.pt still resumes
    assert (run / "baseline.json").is_file()


def test_a_baseline_of_fewer_than_30_frames_is_not_embedded(synth_coco: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """v0.10 baked a 4-frame baseline into best.pt with only a warning."""
    cfg = _yaml(tmp_path / "run.yaml", synth_coco, tmp_path / "runs", model=SMALL_MODEL)
    assert main(["train", "--config", str(cfg)]) == 0, capsys.readouterr().err
    run = tmp_path / "runs" / "ft"
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("drift baseline")]
    assert "NONE (best.pt and last.pt carry none: predict will not monitor drift with them): 4 frames in the training json" in line
    assert f"calibrate --weights {run / 'weights' / 'best.pt'} --data ANN.json --out baseline.json" in line
    assert f"strip {run / 'weights' / 'best.pt'} --baseline baseline.json" in line
    assert all(load_checkpoint(run / "weights" / name).baseline is None for name in ("best.pt", "last.pt"))
    assert not (run / "baseline.json").exists()


def test_the_baseline_takes_only_the_time_the_cap_leaves(synth32: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 58: a run too short for a baseline shipped without one, saying only "not embedded: 0 frames fit" among its
    lines; it now says that predict will not monitor drift with the weights, in its line and as a warning."""
    run = tmp_path / "runs" / "ft"
    (run / "weights").mkdir(parents=True)
    write_small_checkpoint(run / "weights" / "best.pt", imgsz=128, model=SMALL_MODEL)
    spent = Budget(deadline=time.perf_counter() + 1.0, seconds=60.0, baseline_frames=300, pass_seconds=0.5)  # 1 s left, 0.5 s a pass
    line = calibrate_run(run, str(synth32), None, progress=False, budget=spent)
    assert line.startswith(
        "drift baseline: NONE (best.pt and last.pt carry none: predict will not monitor drift with them): "
        "0 frames fit in the time train.max_minutes left"
    )
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "no drift baseline" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith(f"{run / 'weights' / 'best.pt'}: no drift baseline: only 0 frames fit")
    assert warned[0].endswith("fewer than 30; predict will not monitor drift with these weights")
    assert load_checkpoint(run / "weights" / "best.pt").baseline is None
    roomy = Budget(deadline=time.perf_counter() + 3600.0, seconds=7200.0, baseline_frames=300, pass_seconds=1e-4)
    assert calibrate_run(run, str(synth32), None, progress=False, budget=roomy).startswith("drift baseline: 32 training images")


def test_a_fine_tune_keeps_the_operating_point_of_its_weights(synth_coco: Path, tmp_path: Path) -> None:
    """v0.10 stored f1_conf 0.3, nms_iou 0.6 and no cross-class demotion for a fine-tune of weights at 0.4 / 0.5 / 0.3."""
    parent = _parent(tmp_path)
    cfg = _yaml(tmp_path / "line1.yaml", synth_coco, tmp_path / "runs", init_weights=str(parent), epochs=2)
    assert main(["train", "--config", str(cfg), "--no-baseline"]) == 0
    weights = tmp_path / "runs" / "ft" / "weights"
    last = torch.load(weights / "last.pt", weights_only=True)
    ev = last["config"]["eval"]
    assert (ev["nms_iou"], ev["cross_class_iou"], ev["cross_class_factor"]) == (0.5, 0.3, 0.5)
    optimal = last["metrics"]["f1_optimal"]
    assert optimal is not None and ev["f1_conf"] == optimal["conf"]  # measured on the run's own validation
    records = [json.loads(x) for x in (weights.parent / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["f1_conf"] == ev["f1_conf"]
    best = torch.load(weights / "best.pt", weights_only=True)
    best_ev = best["config"]["eval"]  # best.pt keeps them too, whichever epoch it holds (-1: the starting weights)
    assert (best_ev["nms_iou"], best_ev["cross_class_iou"], best_ev["cross_class_factor"]) == (0.5, 0.3, 0.5)
    assert best_ev["f1_conf"] == best["metrics"]["f1_optimal"]["conf"]
    # a key the config names wins over the weights'
    named = _yaml(tmp_path / "named.yaml", synth_coco, tmp_path / "runs2", evals={"nms_iou": 0.7}, init_weights=str(parent))
    assert main(["train", "--config", str(named), "--no-baseline", "eval.cross_class_iou=0.4"]) == 0
    ev = torch.load(tmp_path / "runs2" / "ft" / "weights" / "last.pt", weights_only=True)["config"]["eval"]
    assert (ev["nms_iou"], ev["cross_class_iou"], ev["cross_class_factor"]) == (0.7, 0.4, 0.5)


def test_best_pt_of_a_fine_tune_is_never_below_its_starting_weights(
    synth_coco: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    parent = _parent(tmp_path)
    # an lr that breaks the weights: the epochs score no better than the start, which best.pt then keeps (epoch -1)
    cfg = _yaml(tmp_path / "line1.yaml", synth_coco, tmp_path / "runs", init_weights=str(parent), epochs=2, lr=5.0, grad_clip=1e9)
    with caplog.at_level("INFO", logger="defect_detector.train"):
        assert main(["train", "--config", str(cfg), "--no-baseline"]) == 0
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("starting weights on the validation set")]
    start_map = float(line.split("mAP@0.5:0.95 ")[1].split(",")[0])
    weights = tmp_path / "runs" / "ft" / "weights"
    best = torch.load(weights / "best.pt", weights_only=True)
    history = [json.loads(x) for x in (weights.parent / "metrics.jsonl").read_text().splitlines()]
    assert len(history) == 2 and round(best["best_map50_95"], 4) == round(max([start_map] + [r["map50_95"] for r in history]), 4)
    if all(r["map50_95"] <= start_map for r in history):
        assert best["epoch"] == -1 and all(torch.equal(best["ema"][k], v) for k, v in torch.load(parent, weights_only=True)["ema"].items())
    else:  # an epoch beat the start on the validation set: best.pt is that epoch
        assert history[best["epoch"]]["map50_95"] == best["best_map50_95"]


def test_freeze_keeps_the_named_modules_as_they_were(synth_coco: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    parent = write_small_checkpoint(tmp_path / "parent.pt", 128, randomize_bn=True)
    cfg = _yaml(tmp_path / "line1.yaml", synth_coco, tmp_path / "runs", init_weights=str(parent), epochs=2, freeze=["backbone.stem"])
    assert main(["train", "--config", str(cfg), "--no-baseline"]) == 0
    start = torch.load(parent, weights_only=True)["ema"]
    for key in ("model", "ema"):
        trained = torch.load(tmp_path / "runs" / "ft" / "weights" / "last.pt", weights_only=True)[key]
        stem = [k for k in start if k.startswith("backbone.stem.") and not k.endswith("num_batches_tracked")]
        assert stem and all(torch.equal(trained[k], start[k]) for k in stem)  # weights and BatchNorm statistics
        assert not torch.equal(trained["backbone.stage1.0.depthwise.0.weight"], start["backbone.stage1.0.depthwise.0.weight"])
    capsys.readouterr()
    bad = _yaml(tmp_path / "bad.yaml", synth_coco, tmp_path / "runs2", init_weights=str(parent), freeze=["trunk"])
    assert main(["train", "--config", str(bad), "--no-baseline"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "train.freeze: this model has no module 'trunk' (modules: backbone, neck, head" in last
