"""Re-parameterisable blocks (model/rep.py) and the backbone options model.blocks / model.stem / model.stem_channels."""

import pytest
import torch
from torch import nn

from defect_detector.core.config import ConfigError, ModelConfig, config_from_dict
from defect_detector.core.constants import DEFAULT_LAYERS
from defect_detector.export import DeployModel
from defect_detector.model.detector import build_model
from defect_detector.model.layers import ConvBNAct
from defect_detector.model.rep import RepConv, reparameterize

SMALL = {"widths": (16, 32, 48, 64), "depths": (2, 2, 1, 1), "neck_channels": 32, "head_convs": 1}


def _randomise_batchnorm(model: nn.Module, seed: int = 0) -> None:
    """Random affine parameters and running statistics in every BatchNorm (fresh ones are the identity)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.weight.copy_(0.5 + torch.rand(n, generator=gen))
                m.bias.copy_(torch.randn(n, generator=gen) * 0.2)
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.2)
                m.running_var.copy_(0.5 + torch.rand(n, generator=gen))


@pytest.mark.parametrize(("c_in", "c_out", "stride"), [(8, 8, 1), (8, 16, 1), (8, 16, 2), (8, 8, 2)])
def test_a_fused_block_gives_the_training_form_outputs(c_in: int, c_out: int, stride: int) -> None:
    torch.manual_seed(0)
    block = RepConv(c_in, c_out, stride)
    assert (block.identity is not None) == (stride == 1 and c_in == c_out)
    _randomise_batchnorm(block)
    block.eval()
    x = torch.randn(2, c_in, 17, 20)
    fused = block.fused()
    assert isinstance(fused, ConvBNAct) and isinstance(fused[1], nn.Identity) and fused[0].bias is not None
    with torch.no_grad():
        torch.testing.assert_close(fused(x), block(x), rtol=1e-5, atol=1e-5)


def test_fusing_needs_eval_mode() -> None:
    with pytest.raises(ValueError, match="eval-mode"):
        RepConv(4, 4).fused_weights()
    with pytest.raises(ValueError, match="eval-mode"):
        reparameterize(build_model(ModelConfig(**SMALL, blocks=("rep",) * 4), 6))


@pytest.mark.parametrize(
    "options",
    [
        {"blocks": ("rep", "rep", "depthwise", "depthwise")},
        {"blocks": ("rep",) * 4, "stem": "patch4", "stem_channels": 16},
        {"blocks": ("rep", "rep", "depthwise", "depthwise"), "in_channels": 2, "fusion": "siamese", "box_head": "dfl"},
    ],
)
def test_a_reparameterised_model_predicts_as_its_training_form(options: dict) -> None:
    """Random weights and BatchNorm statistics; eval mode. The fused model has no RepConv left, keeps its module names
    (monitored layers), and gives the same raw outputs (float32 rounding over a few layers of sums)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(**{**SMALL, **options}), 6)
    _randomise_batchnorm(model, seed=1)
    model.eval()
    x = torch.rand(2, model.in_channels, 64, 64)
    with torch.no_grad():
        want = model(x)
        n_rep = sum(isinstance(m, RepConv) for m in model.modules())
        names = {name for name, m in model.named_modules() if isinstance(m, RepConv)}
        assert reparameterize(model) == n_rep > 0
        assert not any(isinstance(m, RepConv) for m in model.modules())
        assert all(isinstance(model.get_submodule(name), ConvBNAct) for name in names)
        torch.testing.assert_close(model(x), want, rtol=1e-4, atol=1e-4)


def test_the_deployed_model_is_the_reparameterised_one() -> None:
    """DeployModel (what every exporter and the runtime trace) fuses rep blocks, then BatchNorm, and predicts as the
    eval-mode training form; its caller's model keeps its branches (the checkpoint's form)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(**SMALL, blocks=("rep", "rep", "depthwise", "depthwise")), 6)
    _randomise_batchnorm(model, seed=2)
    model.eval()
    deploy = DeployModel(model, 64, DEFAULT_LAYERS).eval()
    assert not any(isinstance(m, (RepConv, nn.BatchNorm2d)) for m in deploy.model.modules())
    assert any(isinstance(m, RepConv) for m in model.modules())
    reference = DeployModel(model, 64, DEFAULT_LAYERS, fuse=False, channels_last=False).eval()
    x = torch.rand(1, 1, 64, 64)
    with torch.no_grad():
        (pred, stats), (want_pred, want_stats) = deploy(x), reference(x)
    torch.testing.assert_close(pred, want_pred, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(stats, want_stats, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("stem", "fusion"), [("conv3", "early"), ("patch4", "early"), ("patch4", "siamese")])
def test_backbone_options_keep_the_strides(stem: str, fusion: str) -> None:
    channels = 2 if fusion == "siamese" else 1
    cfg = ModelConfig(
        **SMALL, stem=stem, stem_channels=24, blocks=("rep", "depthwise", "rep", "depthwise"), in_channels=channels, fusion=fusion
    )
    model = build_model(cfg, 6).eval()
    with torch.no_grad():
        c3, c4, c5 = model.backbone(torch.rand(1, channels, 64, 64))
    assert c3.shape == (1, 32, 8, 8) and c4.shape == (1, 48, 4, 4) and c5.shape == (1, 64, 2, 2)
    assert model.backbone.stem[0].out_channels == 24


def test_defaults_are_the_bundled_architecture() -> None:
    cfg = config_from_dict({"model": {}}).model
    assert (cfg.stem, cfg.stem_channels, cfg.blocks) == ("conv3", 32, ("depthwise",) * 4)


@pytest.mark.parametrize(
    ("key", "value", "text"),
    [
        ("blocks", ["rep", "dense", "rep", "rep"], "model.blocks: must be 4 of depthwise, rep"),
        ("blocks", ["rep", "rep"], "model.blocks"),
        ("stem", "patch8", "model.stem: must be one of conv3, patch4"),
        ("stem_channels", 20, "model.stem_channels: must be a positive multiple of 8"),
    ],
)
def test_bad_backbone_options_are_one_line(key: str, value: object, text: str) -> None:
    with pytest.raises(ConfigError, match=text.replace(".", r"\.")):
        config_from_dict({"model": {key: value}})


def test_a_rep_checkpoint_exports_its_fused_form(tmp_path) -> None:
    """``export`` (TorchScript, frozen, parity-checked against the eval-mode training form) of a checkpoint with rep
    blocks: the artifact passes its parity check and its graph holds one convolution per rep block (no branch sums)."""
    from small_checkpoint import write_small_checkpoint

    from defect_detector.export import export_torchscript
    from defect_detector.model.checkpoint import load_checkpoint

    model = {"blocks": ["rep", "rep", "depthwise", "depthwise"], "stem": "patch4", "stem_channels": 16}
    loaded = load_checkpoint(write_small_checkpoint(tmp_path / "rep.pt", 64, randomize_bn=True, model=model))
    report = export_torchscript(loaded, tmp_path / "rep.torchscript.pt", optimize=False)
    assert report["parity"]["pred"] <= 1e-3 and report["parity"]["stats"] <= 1e-3
    n_rep = sum(isinstance(m, RepConv) for m in loaded.model.modules())
    n_dw = sum(isinstance(m, nn.Conv2d) and m.groups > 1 for m in loaded.model.modules())
    n_conv = sum(isinstance(m, nn.Conv2d) for m in loaded.model.modules())
    graph = torch.jit.load(str(tmp_path / "rep.torchscript.pt")).graph
    kinds = [n.kind() for n in graph.nodes()]
    convs = [k for k in kinds if k in ("aten::_convolution", "aten::conv2d", "mkldnn::_convolution_pointwise")]
    assert n_rep > 0 and n_dw > 0 and "aten::batch_norm" not in kinds
    assert len(convs) == n_conv - n_rep  # each rep block's branches (3x3 + BN, 1x1 + BN, BN) are one convolution
