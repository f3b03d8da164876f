"""Export of the v2 reference architectures (model.fusion diff / siamese, model.box_head dfl): TorchScript and ONNX
parity with the eager model, the 2-channel input kept, and the siamese model's drift statistics from the board's pass."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from small_checkpoint import write_small_checkpoint

from defect_detector.core.constants import DEFAULT_LAYERS
from defect_detector.data.letterbox import letterbox
from defect_detector.data.synth import generate_board_pair
from defect_detector.export import DeployModel, export_onnx, export_torchscript, parity_inputs, shifted_copy
from defect_detector.inspect.runtime import archive_meta
from defect_detector.model.checkpoint import load_checkpoint

pytestmark = [pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning"), pytest.mark.usefixtures("one_thread")]

IMGSZ = 128
VARIANTS = {
    "siamese": {"fusion": "siamese"},
    "diff": {"fusion": "diff"},
    "siamese_dfl": {"fusion": "siamese", "box_head": "dfl", "reg_max": 8},
    "early_dfl": {"box_head": "dfl", "reg_max": 8},
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    name = request.param
    path = tmp_path_factory.mktemp(name) / f"{name}.pt"
    return name, write_small_checkpoint(path, IMGSZ, randomize_bn=True, in_channels=2, model=VARIANTS[name])


def _pairs(batch: int = 3) -> torch.Tensor:
    """``[batch, 2, S, S]``: a synthetic board and its shifted template; frame 1 with a blank reference."""
    image, template = generate_board_pair(90, 120, np.random.default_rng(2))[:2]
    planes = [letterbox(image, IMGSZ)[0], letterbox(shifted_copy(template, 1, 1), IMGSZ)[0]]
    x = torch.from_numpy(np.stack(planes)[None]).float().div(255.0).repeat(batch, 1, 1, 1)
    x[1, 1] = 114 / 255
    return x


def _eager(checkpoint: Path, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        return DeployModel(load_checkpoint(checkpoint).model, IMGSZ, fuse=False, channels_last=False)(x)


def test_torchscript_parity(variant: tuple[str, Path], tmp_path: Path) -> None:
    name, checkpoint = variant
    loaded = load_checkpoint(checkpoint)
    out = tmp_path / f"{name}.torchscript.pt"
    check = [generate_board_pair(96, 128, np.random.default_rng(1))[0], np.full((70, 50), 90, np.uint8)]
    report = export_torchscript(loaded, out, optimize="auto", check_images=check)
    assert report["parity"]["pred"] <= 1e-3 and report["parity"]["stats"] <= 1e-3
    meta = archive_meta(out)
    assert meta["channels"] == 2 and meta["input"]["shape"] == ["B", 2, IMGSZ, IMGSZ]
    assert meta["layers"] == list(DEFAULT_LAYERS)
    model = torch.jit.load(str(out), map_location="cpu")
    x = _pairs()
    with torch.no_grad():
        got = model(x)
    want = _eager(checkpoint, x)
    assert got[0].shape == (3, sum((IMGSZ // s) ** 2 for s in (8, 16, 32)), 4 + 6)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=0)
    assert float((got[0][0] - got[0][1]).abs().max()) > 1e-4, "the reference channel must change the prediction"


def test_onnx_parity(variant: tuple[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("onnx", reason="onnx not installed (pip install '.[onnx]')")
    name, checkpoint = variant
    out = tmp_path / f"{name}.onnx"
    report = export_onnx(load_checkpoint(checkpoint), out)
    meta = json.loads((tmp_path / f"{name}.meta.json").read_text())
    assert meta["channels"] == 2 and meta["input"]["shape"] == ["B", 2, IMGSZ, IMGSZ]
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed: ONNX parity not checked")
    assert report["parity"]["pred"] <= 1e-3
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    x = _pairs()
    pred, stats = session.run(None, {"images": x.numpy()})
    ref_pred, ref_stats = _eager(checkpoint, x)
    np.testing.assert_allclose(pred, ref_pred.numpy(), atol=1e-3)
    np.testing.assert_allclose(stats, ref_stats.numpy(), atol=1e-3)


def test_siamese_statistics_come_from_the_board_pass(tmp_path: Path) -> None:
    """backbone.stem..stage3 run twice in a siamese model; the deployed statistics are the board's pass: the same
    board against another golden image gives the same statistics (and other predictions)."""
    checkpoint = write_small_checkpoint(tmp_path / "s.pt", IMGSZ, randomize_bn=True, in_channels=2, model={"fusion": "siamese"})
    x = _pairs(2)  # frame 1: the same board, a blank golden image
    pred, stats = _eager(checkpoint, x)
    torch.testing.assert_close(stats[0], stats[1], atol=1e-6, rtol=0)
    assert float((pred[0] - pred[1]).abs().max()) > 1e-4
    parity = parity_inputs(IMGSZ, channels=2)
    with torch.no_grad():
        deploy = DeployModel(load_checkpoint(checkpoint).model, IMGSZ)
        _, board_stats = deploy(parity)
        _, swapped = deploy(parity.flip(1))  # board and golden swapped: the statistics follow the board channel
    assert not torch.allclose(board_stats, swapped, atol=1e-4)


def test_deploy_model_golden_and_frame_give_forwards_outputs(variant: tuple[str, Path]) -> None:
    """A siamese ``DeployModel`` (BatchNorm folded, channels_last, oneDNN kernels where available) has ``golden`` and
    ``frame``: the frames against their golden images' features, shared (batch 1) or one each, give the unfused eager
    ``forward`` of the pairs; other models have neither."""
    from defect_detector.export.onednn import onednn_available

    name, checkpoint = variant
    deploy = DeployModel(load_checkpoint(checkpoint).model, IMGSZ, cpu_fusion=onednn_available())
    x = _pairs()
    x[2, 1] = 1.0 - x[2, 1]  # frame 2 against another golden image
    if not name.startswith("siamese"):
        assert not deploy.caches_golden
        with pytest.raises(ValueError, match="golden features need model.fusion: siamese"):
            deploy.golden(x[:, 1:2])
        return
    assert deploy.caches_golden
    with torch.no_grad():
        c3, c4, stats = deploy.golden(x[:, 1:2])
        assert [tuple(c3.shape[1:]), tuple(c4.shape[1:])] == [tuple(s) for s in deploy.golden_shapes()]
        for got, want in zip(deploy.frame(x[:, :1], c3, c4), _eager(checkpoint, x)):
            torch.testing.assert_close(got, want, atol=1e-3, rtol=0)
        itself = _eager(checkpoint, torch.cat((x[:, 1:2], x[:, 1:2]), 1))[1]  # the golden image paired with itself
        assert deploy.golden_stats and stats.shape == itself.shape == (3, len(deploy.layer_names), 2)
        torch.testing.assert_close(stats, itself, atol=1e-3, rtol=0)
        shared = torch.cat((x[:, :1], x[:1, 1:2].expand(3, -1, -1, -1)), 1)
        one_golden = deploy.golden(x[:1, 1:2])[:2]
        for got, want in zip(deploy.frame(x[:, :1], *one_golden), _eager(checkpoint, shared)):
            torch.testing.assert_close(got, want, atol=1e-3, rtol=0)
