import warnings

import pytest
import torch
from torch import nn

from defect_detector.core.config import ModelConfig
from defect_detector.core.constants import DEFAULT_LAYERS
from defect_detector.model.detector import build_model
from defect_detector.monitor.hooks import MAX_STAT_ROWS, ActivationMonitor, layer_sums, resolve_layers, stats_from_sums

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model() -> nn.Module:
    torch.manual_seed(0)
    return build_model(ModelConfig(), 6).eval()


def _hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) for m in model.modules())


def test_attach_detach_leaves_model_as_before(model: nn.Module) -> None:
    x = torch.rand(2, 1, 64, 64)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.inference_mode():
        before = model(x)
        monitor = ActivationMonitor(model)
        assert _hook_count(model) == len(DEFAULT_LAYERS)
        hooked = model(x)
        monitor.detach()
        after = model(x)
    assert _hook_count(model) == 0
    torch.testing.assert_close(hooked, before, rtol=0, atol=0)
    torch.testing.assert_close(after, before, rtol=0, atol=0)
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key
    with pytest.raises(RuntimeError, match="no forward pass"):
        monitor.stats()


def test_attach_is_idempotent(model: nn.Module) -> None:
    monitor = ActivationMonitor(model)
    monitor.attach()
    assert _hook_count(model) == len(DEFAULT_LAYERS)
    monitor.detach()
    assert _hook_count(model) == 0


def test_stats_match_manual_computation(model: nn.Module) -> None:
    x = torch.rand(3, 1, 64, 64)
    monitor = ActivationMonitor(model)
    try:
        with torch.inference_mode():
            model(x)
            stats = monitor.stats()
            b = model.backbone
            outputs = {"backbone.stem": b.stem(x)}
            outputs["backbone.stage1"] = b.stage1(outputs["backbone.stem"])
            outputs["backbone.stage2"] = b.stage2(outputs["backbone.stage1"])
            outputs["backbone.stage3"] = b.stage3(outputs["backbone.stage2"])
            outputs["backbone.stage4"] = b.stage4(outputs["backbone.stage3"])
    finally:
        monitor.detach()
    assert stats.shape == (3, len(DEFAULT_LAYERS), 2) and stats.dtype == torch.float32
    assert monitor.layer_names == list(DEFAULT_LAYERS)
    for i, name in enumerate(monitor.layer_names):
        out = outputs[name]
        flat = out.reshape(3, -1).double()
        want = torch.stack((flat.mean(1), flat.std(1, unbiased=False)), dim=1).float()
        torch.testing.assert_close(stats[:, i], want, rtol=1e-4, atol=1e-5)
    assert (stats[:, :, 1] >= 0).all()


def layer_stats(output: torch.Tensor) -> torch.Tensor:
    """float32 ``[B, 2]`` mean and std per image of a layer output, as the monitor computes them."""
    sums, count = layer_sums(output)
    return stats_from_sums(sums, torch.tensor(float(count)))


def test_layer_stats_of_known_tensor() -> None:
    x = torch.tensor([[1.0, 3.0], [5.0, 7.0]]).reshape(1, 1, 2, 2)
    torch.testing.assert_close(layer_stats(x), torch.tensor([[4.0, 5.0**0.5]]))


def test_layer_stats_of_a_tall_layer_reads_evenly_spaced_rows() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 32, 320, 320) * 3.0 + 1.0  # the stem at 640 px: every 4th row is read
    step = -(-320 // MAX_STAT_ROWS)
    rows = x[:, :, step // 2 :: step, :].double().flatten(1)
    want = torch.stack((rows.mean(1), rows.std(1, unbiased=False)), dim=1).float()
    torch.testing.assert_close(layer_stats(x), want, rtol=1e-3, atol=1e-4)  # float32 sums of 0.8 M values
    torch.testing.assert_close(layer_stats(x.contiguous(memory_format=torch.channels_last)), want, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(layer_stats(x), torch.tensor([[1.0, 3.0], [1.0, 3.0]]), atol=0.02, rtol=0.01)  # close to the whole layer's
    short = x[:, :, :MAX_STAT_ROWS]
    flat = short.double().flatten(1)
    whole = torch.stack((flat.mean(1), flat.std(1, unbiased=False)), 1).float()
    torch.testing.assert_close(layer_stats(short), whole, rtol=1e-3, atol=1e-4)  # not taller than MAX_STAT_ROWS: every row


@pytest.mark.parametrize("height", [MAX_STAT_ROWS, 320, 322])
@pytest.mark.parametrize("channels_last", [False, True])
def test_layer_sums_add_up_the_rows_read(height: int, channels_last: bool) -> None:
    torch.manual_seed(1)
    x = torch.randn(3, 8, height, 48) + 0.5
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    step = -(-height // MAX_STAT_ROWS)
    read = (x[:, :, step // 2 :: step, :] if height > MAX_STAT_ROWS else x).double().flatten(1)
    sums, count = layer_sums(x)
    assert isinstance(count, int) and count == read.shape[1]
    want = torch.stack((read.sum(1), read.square().sum(1)), dim=1).float()
    torch.testing.assert_close(sums, want, rtol=1e-4, atol=1e-2)


class _Traceable(nn.Module):
    """What the export wrapper does: the model's output plus the monitor's stats as a second output."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.monitor = ActivationMonitor(model)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model(x), self.monitor.stats()


def test_traced_module_reports_the_eager_stats(model: nn.Module) -> None:
    wrapper = _Traceable(model).eval()
    try:
        with torch.inference_mode():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                traced = torch.jit.trace(wrapper, torch.rand(1, 1, 64, 64), check_trace=False)
            wrapper.monitor.detach()
            assert _hook_count(model) == 0
            frames = torch.rand(2, 1, 64, 64)
            raw, stats = traced(frames)
            monitor = ActivationMonitor(model)
            eager_raw = model(frames)
            eager_stats = monitor.stats()
            monitor.detach()
    finally:
        wrapper.monitor.detach()
    assert stats.shape == (2, len(DEFAULT_LAYERS), 2)
    torch.testing.assert_close(raw, eager_raw)
    torch.testing.assert_close(stats, eager_stats)


def test_bad_layer_pattern_names_it(model: nn.Module) -> None:
    with pytest.raises(ValueError, match="backbone.nope"):
        ActivationMonitor(model, ["backbone.stem", "backbone.nope"])
    assert _hook_count(model) == 0


def test_glob_patterns_resolve_in_model_order(model: nn.Module) -> None:
    names = resolve_layers(model, ["neck.out?", "backbone.stage?"])
    assert names == ["backbone.stage1", "backbone.stage2", "backbone.stage3", "backbone.stage4", "neck.out3", "neck.out4", "neck.out5"]
