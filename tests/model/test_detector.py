from pathlib import Path

import pytest
import torch
from torch import nn

from defect_detector.core.config import ModelConfig, load_config
from defect_detector.model.detector import build_model
from defect_detector.model.layers import DWSeparable
from defect_detector.model.summary import count_flops, count_parameters

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize(("height", "width"), [(256, 256), (320, 640)])
def test_feature_and_output_shapes(height: int, width: int) -> None:
    cfg = ModelConfig(widths=(16, 32, 48, 64), depths=(1, 2, 1, 1), neck_channels=32)
    model = build_model(cfg, num_classes=6).eval()
    x = torch.rand(2, 1, height, width)
    c3, c4, c5 = model.backbone(x)
    assert c3.shape == (2, 32, height // 8, width // 8)
    assert c4.shape == (2, 48, height // 16, width // 16)
    assert c5.shape == (2, 64, height // 32, width // 32)
    p3, n4, n5 = model.neck((c3, c4, c5))
    assert [t.shape[-2:] for t in (p3, n4, n5)] == [c3.shape[-2:], c4.shape[-2:], c5.shape[-2:]]
    raw = model(x)
    anchors = sum((height // s) * (width // s) for s in (8, 16, 32))
    assert raw.shape == (2, anchors, 4 + 6)


def test_stem_and_depthwise_blocks() -> None:
    model = build_model(ModelConfig(), num_classes=6)
    stem_conv = model.backbone.stem[0]
    assert (stem_conv.in_channels, stem_conv.out_channels, stem_conv.kernel_size, stem_conv.stride) == (1, 32, (3, 3), (2, 2))
    blocks = [m for m in model.backbone.modules() if isinstance(m, DWSeparable)]
    assert blocks and all(b.depthwise[0].groups == b.depthwise[0].in_channels for b in blocks)
    assert any(b.residual for b in blocks)


def test_bundled_size_targets() -> None:
    cfg = load_config(CONFIGS / "deeppcb.yaml")
    model = build_model(cfg.model, len(cfg.data.class_names))
    assert count_parameters(model) < 1_500_000
    assert count_flops(model, 640) < 2e9


@pytest.mark.parametrize(("convs", "box_convs", "want_box"), [(2, None, 2), (1, 2, 2), (2, 1, 1)])
def test_head_branch_depths(convs: int, box_convs: int | None, want_box: int) -> None:
    cfg = ModelConfig(widths=(16, 32, 48, 64), depths=(1, 1, 1, 1), neck_channels=32, head_convs=convs, head_box_convs=box_convs)
    model = build_model(cfg, num_classes=6)
    for cls_branch, box_branch in zip(model.head.cls_branches, model.head.box_branches):
        assert sum(isinstance(m, DWSeparable) for m in cls_branch) == convs
        assert sum(isinstance(m, DWSeparable) for m in box_branch) == want_box
    assert model(torch.rand(1, 1, 64, 64)).shape == (1, 64 + 16 + 4, 10)


def test_forward_is_raw_and_gradients_flow() -> None:
    model = build_model(ModelConfig(widths=(16, 32, 48, 64), depths=(1, 1, 1, 1), neck_channels=32), num_classes=3)
    raw = model(torch.rand(1, 1, 64, 64))
    assert raw[..., 4:].min() < 0  # logits, not probabilities
    raw.sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    assert isinstance(model.head.cls_branches[0][-1], nn.Conv2d)
