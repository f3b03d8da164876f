"""`teach`: learn a new design from its golden images alone (inspect/teach.py, cli/teach.py)."""

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
import yaml

from defect_detector.cli.main import main
from defect_detector.data.images import pixel_fingerprint
from defect_detector.data.synth import generate_board_pair
from defect_detector.inspect.design_check import DesignCheck
from defect_detector.inspect.runtime import Runtime
from defect_detector.inspect.teach import teach
from defect_detector.inspect.validate import validate
from defect_detector.looks.render import render_pair, sample_look
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, DEFAULT_WEIGHTS, load_checkpoint


def _photo_golden(path: Path) -> np.ndarray:
    layout = generate_board_pair(256, 256, np.random.default_rng(7))[1]
    rng = np.random.default_rng(8)
    golden = render_pair(layout, layout, sample_look(rng, "holdout"), rng, strength=0.0)[1]
    cv2.imwrite(str(path), golden)
    return golden


def _held_score(weights: Path, held: Path) -> dict:
    """What `teach` reports for ``weights`` on its held-back boards: calls at the weights' operating point, and mAP@0.5."""
    metrics = validate(weights, held, progress=False).metrics
    return metrics["at_conf"] | {"map50": metrics["map50"]}


def test_teach_end_to_end_under_a_time_cap(tmp_path: Path) -> None:
    golden = _photo_golden(tmp_path / "design_a.png")
    out = tmp_path / "taught.pt"
    report = teach(tmp_path / "design_a.png", out, DEFAULT_REFERENCE_WEIGHTS, minutes=1.5, held=2, captures=16, threads=2)
    # the cap: training got what painting and scoring left of 1.5 minutes, and stopped by its own clock within it (the
    # trainer starts an epoch only while the longest one so far fits, so at most the last one runs past)
    run = report.work / "run"
    max_minutes = yaml.safe_load((run / "config.yaml").read_text())["train"]["max_minutes"]
    epochs = [json.loads(line)["epoch_seconds"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert 0.3 <= max_minutes < 1.5 and epochs and sum(epochs) <= 60 * max_minutes + max(epochs)
    held = report.work / "held" / "annotations.json"
    assert report.before == _held_score(DEFAULT_REFERENCE_WEIGHTS, held) and report.after == _held_score(out, held)
    assert report.before["images"] == report.after["images"] == 2 and report.before["defects"] >= 2
    assert report.after["conf"] == torch.load(out, weights_only=True)["config"]["eval"]["f1_conf"]  # its own operating point
    assert report.minutes > 0
    loaded = load_checkpoint(tmp_path / "taught.pt")  # weights_only, and predict takes it as it is
    ckpt = torch.load(tmp_path / "taught.pt", map_location="cpu", weights_only=True)
    assert ckpt["taught"] == [{"name": "design_a.png", "key": pixel_fingerprint(golden)}]
    runtime = Runtime.load(tmp_path / "taught.pt", device="cpu")
    assert runtime.channels == 2 and loaded.config.model.in_channels == 2
    before = DesignCheck.from_meta(Runtime.load(DEFAULT_REFERENCE_WEIGHTS, device="cpu").meta, "w")
    after = DesignCheck.from_meta(runtime.meta, "w")
    assert before.check("k", "design_a.png", "design_a.png", lambda: golden) is not None  # unlike DeepPCB
    assert after.check("k", "design_a.png", "design_a.png", lambda: golden) is None  # taught: known now


def test_teach_refuses_what_it_cannot_teach(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _photo_golden(tmp_path / "g.png")
    assert main(["teach", "--golden", str(tmp_path / "missing"), "--out", str(tmp_path / "t.pt")]) == 2
    assert "no golden image there" in capsys.readouterr().err
    assert main(["teach", "--golden", str(tmp_path / "g.png"), "--weights", str(DEFAULT_WEIGHTS), "--out", str(tmp_path / "t.pt")]) == 2
    assert "needs a golden-template model" in capsys.readouterr().err
    assert main(["teach", "--golden", str(tmp_path / "g.png"), "--minutes", "0.5", "--out", str(tmp_path / "t.pt")]) == 2
    assert "--minutes must be at least" in capsys.readouterr().err
    assert not (tmp_path / "t.pt").exists()
