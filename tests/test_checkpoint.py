from pathlib import Path

import pytest
import torch

from defect_detector.config import ModelConfig
from defect_detector.model.checkpoint import load_matching_weights
from defect_detector.model.detector import build_model

SMALL = ModelConfig(widths=(8, 16, 24, 32), depths=(1, 1, 1, 1), neck_channels=16, head_convs=1)


def test_load_matching_weights_copies_same_shapes_and_keeps_the_rest(tmp_path: Path) -> None:
    torch.manual_seed(0)
    source = build_model(SMALL, num_classes=6)
    path = tmp_path / "src.pt"
    torch.save({"model": {k: torch.zeros_like(v) for k, v in source.state_dict().items()}, "ema": source.state_dict()}, path)

    torch.manual_seed(1)
    wider = ModelConfig(widths=(8, 16, 40, 32), depths=(1, 1, 2, 1), neck_channels=16, head_convs=1)
    target = build_model(wider, num_classes=3)  # another label set: the class branches differ
    fresh = {k: v.clone() for k, v in target.state_dict().items()}
    loaded, skipped = load_matching_weights(target, path)

    state, src = target.state_dict(), source.state_dict()
    assert "backbone.stem.0.weight" in loaded and "backbone.stage2.0.depthwise.0.weight" in loaded
    assert any(k.startswith("backbone.stage3") for k in skipped) and any(k.startswith("head.cls") for k in skipped)
    for k in loaded:
        torch.testing.assert_close(state[k], src[k])  # the EMA weights, not the zeroed raw ones
    for k in skipped:
        torch.testing.assert_close(state[k], fresh[k])
    assert sorted(loaded + skipped) == sorted(state)


def test_load_matching_weights_rejects_an_unrelated_file(tmp_path: Path) -> None:
    path = tmp_path / "other.pt"
    torch.save({"model": {"fc.weight": torch.zeros(2, 2)}}, path)
    with pytest.raises(ValueError, match="no tensor matches"):
        load_matching_weights(build_model(SMALL, num_classes=6), path)
    (tmp_path / "corrupt.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="corrupt.pt: not a readable checkpoint"):
        load_matching_weights(build_model(SMALL, num_classes=6), tmp_path / "corrupt.pt")
    with pytest.raises(FileNotFoundError, match="missing.pt: weights file not found"):
        load_matching_weights(build_model(SMALL, num_classes=6), tmp_path / "missing.pt")
