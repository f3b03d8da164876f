"""oneDNN conv + SiLU fusion: same outputs as the portable model, names kept, traced and saved intact; and
without the private op (simulated), the portable graph with the reason logged."""

from __future__ import annotations

import logging
import types
from pathlib import Path

import pytest
import torch
from small_checkpoint import write_small_checkpoint
from torch import nn

from defect_detector.export import (
    DeployModel,
    artifact_bytes,
    export_torchscript,
    fuse_conv_bn,
    load_artifact_bytes,
    onednn,
    trace_deploy_model,
)
from defect_detector.export.onednn import OneDNNConvSiLU, fuse_conv_silu, onednn_available
from defect_detector.model.checkpoint import load_checkpoint
from defect_detector.model.layers import ConvBNAct

needs_onednn = pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN conv+SiLU kernel")
pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning"),
    pytest.mark.usefixtures("one_thread"),
]

IMGSZ = 96
ONEDNN_OP = "mkldnn::_convolution_pointwise"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_checkpoint(tmp_path_factory.mktemp("ckpt") / "small.pt", IMGSZ, randomize_bn=True)


@needs_onednn
@pytest.mark.parametrize(
    ("c_in", "c_out", "kernel", "stride", "groups"), [(1, 8, 3, 2, 1), (8, 8, 3, 1, 8), (8, 16, 1, 1, 1), (8, 8, 3, 2, 8)]
)
def test_conv_silu_equals_conv_then_silu(c_in: int, c_out: int, kernel: int, stride: int, groups: int) -> None:
    torch.manual_seed(0)
    conv = nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups).eval()
    x = torch.randn(2, c_in, 20, 18).to(memory_format=torch.channels_last)
    with torch.no_grad():
        got, want = OneDNNConvSiLU(conv)(x), nn.functional.silu(conv(x))
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@needs_onednn
def test_fusion_needs_folded_batchnorm_and_a_bias() -> None:
    with pytest.raises(ValueError, match="biased"):
        OneDNNConvSiLU(nn.Conv2d(2, 2, 3, padding=1, bias=False))
    block = nn.Sequential(ConvBNAct(1, 8, 3, 2)).eval()
    with pytest.raises(ValueError, match="BatchNorm folded first"):
        fuse_conv_silu(block)
    fuse_conv_bn(block)
    assert fuse_conv_silu(block) == 1
    assert isinstance(block[0][0], OneDNNConvSiLU) and isinstance(block[0][2], nn.Identity)


@needs_onednn
def test_fused_deploy_model_matches_and_keeps_layer_names(checkpoint: Path) -> None:
    model = load_checkpoint(checkpoint).model
    plain = DeployModel(model, IMGSZ)
    fused = DeployModel(model, IMGSZ, cpu_fusion=True)
    n_blocks = sum(isinstance(m, ConvBNAct) for m in model.modules())
    assert sum(isinstance(m, OneDNNConvSiLU) for m in fused.modules()) == n_blocks > 0
    assert not any(isinstance(m, nn.SiLU) for m in fused.modules())
    assert fused.layer_names == plain.layer_names and fused.layer_names
    x = torch.rand(3, 1, IMGSZ, IMGSZ)
    traced = trace_deploy_model(fused)
    assert "mkldnn::_convolution_pointwise" in traced.graph.str()
    restored, _ = load_artifact_bytes(artifact_bytes(traced))
    with torch.no_grad():
        want = plain(x)
        for got in (fused(x), restored(x)):
            torch.testing.assert_close(got[0], want[0], atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="cpu_fusion needs fuse"):
        DeployModel(model, IMGSZ, fuse=False, cpu_fusion=True)


@pytest.fixture
def reprobe():
    """onednn_available() probes afresh in the test and again after it (its result is cached per process)."""
    onednn_available.cache_clear()
    yield
    onednn_available.cache_clear()


def _failing_conv_silu(*args: object) -> torch.Tensor:
    raise RuntimeError("could not create a primitive descriptor")


SIMULATED = {  # how a torch build can lack the private op, and the reason logged for it
    "no_onednn": (lambda mp: mp.setattr(torch.backends.mkldnn, "is_available", lambda: False), "has no oneDNN"),
    "no_op": (lambda mp: mp.setattr(torch.ops, "mkldnn", types.SimpleNamespace()), "has no mkldnn::_convolution_pointwise op"),
    "op_fails": (lambda mp: mp.setattr(onednn, "scripted_conv_silu", lambda: _failing_conv_silu), "failed on a probe"),
    "op_wrong": (lambda mp: mp.setattr(onednn, "scripted_conv_silu", lambda: lambda x, *a: torch.zeros_like(x)), "disagrees"),
}


@pytest.mark.usefixtures("reprobe")
@pytest.mark.parametrize("case", sorted(SIMULATED))
def test_missing_or_failing_op_is_detected_with_a_logged_reason(
    case: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    simulate, reason = SIMULATED[case]
    simulate(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="defect_detector.inspect"):
        assert onednn_available() is False
        assert onednn_available() is False  # cached: probed and logged once
    assert reason in onednn.unavailable_reason()
    logged = [r.getMessage() for r in caplog.records if "fusion off" in r.getMessage()]
    assert len(logged) == 1 and reason in logged[0] and "portable graph" in logged[0]


@pytest.mark.usefixtures("reprobe")
def test_export_without_the_op_falls_back_to_the_portable_graph(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(torch.ops, "mkldnn", types.SimpleNamespace())  # a torch build without the op
    with caplog.at_level(logging.WARNING, logger="defect_detector.inspect"):
        report = export_torchscript(load_checkpoint(checkpoint), tmp_path / "portable.pt", optimize=False)
    assert any("has no mkldnn::_convolution_pointwise op" in r.getMessage() for r in caplog.records)
    assert report["meta"]["cpu_only"] is False
    assert ONEDNN_OP not in str(torch.jit.load(str(tmp_path / "portable.pt"), map_location="cpu").inlined_graph)
