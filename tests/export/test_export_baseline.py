"""The drift baseline of an export: ``--baseline`` file, else the checkpoint's own; checked against the model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from small_checkpoint import write_small_checkpoint

from defect_detector.cli.main import main
from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.export import DeployModel, ExportError, export_baseline, export_onnx, export_torchscript
from defect_detector.inspect.runtime import archive_meta
from defect_detector.model.checkpoint import load_checkpoint
from defect_detector.monitor.baseline import Baseline, calibrate

pytestmark = [pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning"), pytest.mark.usefixtures("one_thread")]

IMGSZ = 128
PIXEL_SCALE = 0.5


def make_baseline(layer_names: list[str], imgsz: int | None = IMGSZ, class_names: list[str] | None = None, seed: int = 0) -> Baseline:
    """A valid baseline of 32 random frames for ``layer_names`` (``model.class_names`` recorded when given)."""
    frames = np.abs(np.random.default_rng(seed).normal(1.0, 0.1, (32, len(layer_names), 2)))
    info = {"class_names": class_names} if class_names is not None else {}
    return calibrate(frames, layer_names, imgsz, model_info=info, source="test")


@pytest.fixture(scope="module")
def plain_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_checkpoint(tmp_path_factory.mktemp("plain") / "plain.pt", IMGSZ)


@pytest.fixture(scope="module")
def layer_names(plain_checkpoint: Path) -> list[str]:
    return list(DeployModel(load_checkpoint(plain_checkpoint).model, IMGSZ).layer_names)


@pytest.fixture(scope="module")
def baseline_checkpoint(tmp_path_factory: pytest.TempPathFactory, layer_names: list[str]) -> Path:
    """A checkpoint that carries its own baseline (and records ``data.pixel_scale``), as ``strip --baseline`` writes."""
    path = write_small_checkpoint(tmp_path_factory.mktemp("carrying") / "carrying.pt", IMGSZ)
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    ckpt["baseline"] = make_baseline(layer_names, class_names=list(DEEPPCB_CLASSES)).to_dict()
    ckpt["config"]["data"]["pixel_scale"] = PIXEL_SCALE
    torch.save(ckpt, path)
    return path


def test_checkpoint_baseline_reaches_every_meta_without_the_option(
    baseline_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loaded = load_checkpoint(baseline_checkpoint)
    assert loaded.baseline is not None
    out = tmp_path / "model.torchscript.pt"
    assert main(["export", "--weights", str(baseline_checkpoint), "--out", str(out)]) == 0
    assert "baseline embedded from checkpoint" in capsys.readouterr().out
    meta = archive_meta(out)
    assert meta["baseline"] == loaded.baseline and meta["pixel_scale"] == PIXEL_SCALE
    # --portable with --triton is accepted (Triton is always portable) and carries the same baseline
    assert main(["export", "--weights", str(baseline_checkpoint), "--triton", str(tmp_path / "repo"), "--portable"]) == 0
    assert "baseline embedded from checkpoint" in capsys.readouterr().out
    triton_meta = archive_meta(tmp_path / "repo" / "defect_detector" / "1" / "model.pt")
    assert triton_meta["baseline"] == loaded.baseline and triton_meta["pixel_scale"] == PIXEL_SCALE
    assert triton_meta["cpu_only"] is False


def test_checkpoint_baseline_reaches_the_onnx_meta(baseline_checkpoint: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnx", reason="onnx not installed (pip install '.[onnx]')")
    loaded = load_checkpoint(baseline_checkpoint)
    report = export_onnx(loaded, tmp_path / "model.onnx")
    assert report["baseline_source"] == "checkpoint"
    onnx_meta = json.loads((tmp_path / "model.meta.json").read_text())
    assert onnx_meta["baseline"] == loaded.baseline and onnx_meta["pixel_scale"] == PIXEL_SCALE


def test_baseline_file_overrides_the_checkpoint_baseline(baseline_checkpoint: Path, layer_names: list[str], tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    other = make_baseline(layer_names, seed=1)
    other.save(path)
    loaded = load_checkpoint(baseline_checkpoint)
    report = export_torchscript(loaded, tmp_path / "m.pt", baseline=path, optimize=False)
    assert report["baseline_source"] == f"file {path}"
    assert archive_meta(tmp_path / "m.pt")["baseline"] == other.to_dict() != loaded.baseline


def test_no_baseline_is_none(plain_checkpoint: Path, layer_names: list[str]) -> None:
    loaded = load_checkpoint(plain_checkpoint)
    assert export_baseline(loaded, None, layer_names, IMGSZ) == (None, "none")
    # imgsz and class names not recorded: nothing to compare, any export size fits
    loose = make_baseline(layer_names, imgsz=None).to_dict()
    embedded, source = export_baseline(loaded, loose, layer_names, 2 * IMGSZ)
    assert source == "argument" and embedded == Baseline.from_dict(loose).to_dict()


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "baseline file not found"),
        ("malformed", "malformed baseline JSON"),
        ("not_a_baseline", "missing keys ['version']"),
        ("layers", "are not the exported model's monitored layers"),
        ("imgsz", f"calibrated at imgsz {2 * IMGSZ} but the export is imgsz {IMGSZ}"),
        ("classes", "was calibrated for classes"),
    ],
)
def test_invalid_baseline_file_is_refused(
    case: str, message: str, plain_checkpoint: Path, layer_names: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "baseline.json"
    if case == "malformed":
        path.write_text("{not json")
    elif case == "not_a_baseline":
        path.write_text(json.dumps({"mean": [0.0]}))
    elif case == "layers":
        make_baseline(layer_names[:-1]).save(path)
    elif case == "imgsz":
        make_baseline(layer_names, imgsz=2 * IMGSZ).save(path)
    elif case == "classes":
        make_baseline(layer_names, class_names=list(reversed(DEEPPCB_CLASSES))).save(path)
    out = tmp_path / "model.pt"
    for extra in (["--out", str(out)], ["--format", "onnx", "--out", str(tmp_path / "m.onnx")], ["--triton", str(tmp_path / "repo")]):
        assert main(["export", "--weights", str(plain_checkpoint), "--baseline", str(path), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and str(path) in err and "\n" not in err, err
    assert not out.exists() and not (tmp_path / "m.onnx").exists() and not (tmp_path / "repo").exists()


def test_checkpoint_baseline_is_checked_too(baseline_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--weights", str(baseline_checkpoint), "--imgsz", str(2 * IMGSZ), "--out", str(tmp_path / "m.pt")]) == 2
    err = capsys.readouterr().err
    assert f"{baseline_checkpoint}: checkpoint baseline" in err and f"imgsz {IMGSZ} but the export is imgsz {2 * IMGSZ}" in err
    with pytest.raises(ExportError, match="monitored layers"):
        export_torchscript(load_checkpoint(baseline_checkpoint), tmp_path / "m.pt", layers=())
    assert not (tmp_path / "m.pt").exists()
