"""Reference-model architectures (model.fusion: early, diff, siamese) and the distribution box head (model.box_head: dfl)."""

from pathlib import Path

import pytest
import torch

from defect_detector.core.config import ConfigError, ModelConfig, config_from_dict, load_config
from defect_detector.core.constants import DEFAULT_LAYERS
from defect_detector.model.detector import build_model
from defect_detector.model.postprocess import decode, make_anchor_points
from defect_detector.model.summary import count_flops, count_parameters
from defect_detector.monitor.hooks import ActivationMonitor

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
LEGACY = Path(__file__).resolve().parent / "data" / "legacy_outputs.pt"
LEGACY_REF_MODEL = {
    "in_channels": 2,
    "widths": [24, 48, 128, 256],
    "depths": [1, 2, 6, 3],
    "neck_channels": 64,
    "head_convs": 1,
    "head_box_convs": 2,
}
"""configs/deeppcb_ref.yaml's model section before v2 (the bundled golden-template model of v0.8)."""
RAW_ATOL = 1e-5
"""Raw outputs (logits, box distances in stride units): float32 summation order, see the test's docstring."""
DECODED_ATOL = 1e-4
"""Decoded boxes, letterboxed pixels."""
SMALL = {"widths": (16, 32, 48, 64), "depths": (1, 1, 1, 1), "neck_channels": 32, "head_convs": 1, "in_channels": 2}


def _small(**kw) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(ModelConfig(**{**SMALL, **kw}), num_classes=6)


@pytest.mark.parametrize("name", ["default", "deeppcb_ref"])
def test_defaults_build_and_predict_as_before_v2(name: str) -> None:
    """``legacy_outputs.pt`` was written by the code before model.fusion / model.box_head existed: a seeded model of
    the default config and of configs/deeppcb_ref.yaml's model section, on a fixed input. The same seed must give
    the same parameter names and the same raw and decoded outputs (so every existing checkpoint loads and predicts as
    before).

    Not bit-identical: float32 convolutions sum in an order that depends on the CPU's kernels (AVX2 / AVX-512) and
    on how the work is split over threads, so the last bits move between machines and runs (measured: up to 3.3e-6
    on raw outputs of magnitude 4.6, about 7 ulps; 2.3e-5 px on decoded boxes of magnitude 112, 3 ulps). The
    tolerances are about 3x those and 4-5 orders of magnitude below what any change of architecture, parameter order
    or initialisation gives (outputs move by 0.1-1)."""
    legacy = torch.load(LEGACY, weights_only=True)[name]
    model_cfg = {} if name == "default" else dict(LEGACY_REF_MODEL)  # an old config: the new keys absent
    cfg = config_from_dict({"model": model_cfg}).model
    torch.manual_seed(0)
    model = build_model(cfg, 6).eval()
    assert list(model.state_dict().keys()) == legacy["keys"]
    with torch.no_grad():
        raw = model(legacy["input"])
    points, strides = make_anchor_points(64, 64, model.strides)
    torch.testing.assert_close(raw, legacy["raw"], rtol=0, atol=RAW_ATOL)
    torch.testing.assert_close(decode(raw, points, strides, model.box_bins), legacy["decoded"], rtol=0, atol=DECODED_ATOL)


def test_config_validates_fusion_and_box_head() -> None:
    with pytest.raises(ConfigError, match="model.fusion"):
        config_from_dict({"model": {"in_channels": 2, "fusion": "late"}})
    with pytest.raises(ConfigError, match="model.fusion"):
        config_from_dict({"model": {"in_channels": 1, "fusion": "siamese"}})
    with pytest.raises(ConfigError, match="model.box_head"):
        config_from_dict({"model": {"box_head": "gaussian"}})
    with pytest.raises(ConfigError, match="model.reg_max"):
        config_from_dict({"model": {"box_head": "dfl", "reg_max": 1}})


def test_diff_fusion_sees_the_absolute_difference() -> None:
    model = _small(fusion="diff").eval()
    assert model.backbone.stem[0].in_channels == 3
    seen = []
    model.backbone.stem.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    x = torch.rand(2, 2, 64, 64)
    assert model(x).shape == (2, 84, 10)
    assert seen[0].shape == (2, 3, 64, 64)
    assert torch.equal(seen[0][:, 2], (x[:, 0] - x[:, 1]).abs())


def test_siamese_cached_golden_features_give_the_same_outputs() -> None:
    model = _small(fusion="siamese").eval()
    board, golden = torch.rand(3, 1, 64, 64), torch.rand(1, 1, 64, 64)
    with torch.no_grad():
        each_frame = model(torch.cat((board, golden.expand(3, -1, -1, -1)), dim=1))
        feats = model.golden_features(golden)
        cached = model.forward_cached(board, feats)
        one_by_one = torch.cat([model.forward_cached(board[i : i + 1], feats) for i in range(3)])
    assert [f.shape for f in feats] == [(1, 32, 8, 8), (1, 48, 4, 4)]
    torch.testing.assert_close(cached, each_frame, rtol=0, atol=1e-5)
    torch.testing.assert_close(one_by_one, each_frame, rtol=0, atol=1e-5)


def test_siamese_trunk_is_shared_and_responds_to_the_difference() -> None:
    model = _small(fusion="siamese").eval()
    assert model.backbone.stem[0].in_channels == 1
    x = torch.rand(1, 1, 64, 64)
    with torch.no_grad():
        same = model.backbone(torch.cat((x, x), 1))
        other = model.backbone(torch.cat((x, torch.rand(1, 1, 64, 64)), 1))
    assert not torch.allclose(same[0], other[0])


def test_siamese_monitored_layers_are_the_board_pass() -> None:
    """The drift statistics of backbone.stem..stage3 come from the inspected image's pass, not the golden one."""
    model = _small(fusion="siamese").eval()
    monitor = ActivationMonitor(model, DEFAULT_LAYERS)
    calls = []
    model.backbone.stem.register_forward_hook(lambda m, i, o: calls.append(o))
    board = torch.rand(1, 1, 64, 64)
    with torch.no_grad():
        model(torch.cat((board, torch.rand(1, 1, 64, 64)), 1))
        stats = monitor.stats()
        expected = model.backbone.stem(board)
    assert len(calls) == 2  # our hook saw the board's pass (the golden pass runs no hooks), then the call above
    torch.testing.assert_close(calls[0], expected)
    assert stats.shape == (1, len(DEFAULT_LAYERS), 2)
    torch.testing.assert_close(stats[0, 0, 0], expected[:, :, 0::1].mean(), rtol=0, atol=0.05)


def test_golden_features_refused_without_siamese_trunk() -> None:
    with pytest.raises(TypeError, match="siamese"):
        _small(fusion="diff").golden_features(torch.rand(1, 1, 64, 64))


@pytest.mark.parametrize("fusion", ["early", "diff", "siamese"])
def test_dfl_head_outputs_distributions_and_decodes(fusion: str) -> None:
    model = _small(fusion=fusion, box_head="dfl", reg_max=8).eval()
    assert model.box_bins == 8
    with torch.no_grad():
        raw = model(torch.rand(2, 2, 64, 64))
    assert raw.shape == (2, 84, 4 * 8 + 6)
    points, strides = make_anchor_points(64, 64, model.strides)
    decoded = decode(raw, points, strides, model.box_bins)
    assert decoded.shape == (2, 84, 4 + 6)
    # initial distributions are near uniform: every edge about 3.5 strides (bins 0..7) from its point
    torch.testing.assert_close(decoded[0, :, 2] - decoded[0, :, 0], 7.0 * strides, rtol=0.01, atol=0)


@pytest.mark.parametrize("fusion", ["early", "diff", "siamese"])
@pytest.mark.parametrize("box_head", ["distance", "dfl"])
def test_reference_architectures_fit_the_limits(fusion: str, box_head: str) -> None:
    """Issue 26: at most 1.5 M parameters and 2.5 GFLOPs per 640x640 frame (one pass, both trunk passes counted)."""
    cfg = load_config(CONFIGS / "deeppcb_ref.yaml", [f"model.fusion={fusion}", f"model.box_head={box_head}"])
    model = build_model(cfg.model, len(cfg.data.class_names))
    assert count_parameters(model) <= 1_500_000
    assert count_flops(model, 640) <= 2.5e9


def test_summary_reports_architecture_and_cached_frame_flops() -> None:
    from defect_detector.model.summary import model_summary

    early = model_summary(_small(), 64)
    assert early["fusion"] == "early" and early["box_head"] == "distance" and "gflops_cached_frame" not in early
    siamese = model_summary(_small(fusion="siamese", box_head="dfl"), 64)
    assert siamese["fusion"] == "siamese" and siamese["box_head"] == "dfl"
    assert 0 < siamese["gflops_cached_frame"] < siamese["gflops"]
