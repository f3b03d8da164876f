"""Make a deeper starting point from a checkpoint: extra residual blocks that start as the identity.

For each ``--add STAGE=N`` (``STAGE`` 1 to 4) this appends ``N`` depthwise-separable residual blocks to the end
of ``backbone.stage<STAGE>`` and sets ``model.depths`` to match. A new block's pointwise BatchNorm starts with
weight 0 and bias 0, so the block outputs ``SiLU(0) = 0`` and its residual passes the input through unchanged:
the deeper network computes exactly the function of the source checkpoint (in train and eval mode) until
fine-tuning grows the new blocks (their convolution weights are random, from ``torch.manual_seed(0)``, and get
gradients once the BatchNorm weight moves off 0). Every existing tensor is copied unchanged (the EMA weights where the source has
them). Run from the repository root, e.g.:

    python data/bundled_model/deepen_init.py defect_detector/weights/deeppcb.pt runs/deep_init.pt --add 3=2 4=2
"""

from __future__ import annotations

import argparse

import torch

from defect_detector.config import ModelConfig
from defect_detector.io import atomic_torch_save
from defect_detector.model.detector import build_model


def _model_config(model_cfg: dict) -> ModelConfig:
    return ModelConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in model_cfg.items()})


def deepen_state(
    state: dict[str, torch.Tensor], model_cfg: dict, num_classes: int, add: dict[int, int], seed: int = 0
) -> tuple[dict[str, torch.Tensor], dict]:
    """Return ``(state, model_cfg)`` of the deeper model; new blocks are identity-initialised."""
    depths = list(model_cfg["depths"])
    for stage, count in add.items():
        depths[stage - 1] += count
    new_cfg = {**model_cfg, "depths": depths}
    torch.manual_seed(seed)  # the new blocks' convolution weights: random, but the same on every run
    model = build_model(_model_config(new_cfg), num_classes)
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    mismatched = [k for k in own if k in state and state[k].shape != own[k].shape]
    if mismatched:
        raise SystemExit(f"shapes differ for {mismatched[:3]}...: the source is not the same model family")
    out = {k: state.get(k, own[k]) for k in own}
    for key in missing:
        if key.endswith("pointwise.1.weight") or key.endswith("pointwise.1.bias"):
            out[key] = torch.zeros_like(own[key])
    return out, new_cfg


def _built(state: dict[str, torch.Tensor], model_cfg: dict, num_classes: int) -> torch.nn.Module:
    model = build_model(_model_config(model_cfg), num_classes)
    model.load_state_dict(state)
    return model


def check_identity(src: dict, src_cfg: dict, dst: dict, dst_cfg: dict, num_classes: int) -> None:
    """Fail unless both models give the same raw predictions on a random ``[2, 1, 128, 128]`` input, in train and eval mode."""
    x = torch.rand(2, 1, 128, 128, generator=torch.Generator().manual_seed(0))
    a, b = _built(src, src_cfg, num_classes), _built(dst, dst_cfg, num_classes)
    for train in (False, True):
        a.train(train)
        b.train(train)
        with torch.no_grad():
            diff = (a(x) - b(x)).abs().max().item()
        if diff > 0:
            raise SystemExit(f"the deeper model is not the identity extension of the source (max difference {diff:g})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("--add", nargs="+", required=True, help="STAGE=N: append N identity blocks to stage STAGE (1-4)")
    args = parser.parse_args()
    add = {}
    for item in args.add:
        stage, _, count = item.partition("=")
        if stage not in {"1", "2", "3", "4"} or not count.isdigit() or int(count) < 1:
            raise SystemExit(f"--add {item!r}: expected STAGE=N with STAGE 1-4 and N >= 1")
        add[int(stage)] = int(count)
    ckpt = torch.load(args.src, map_location="cpu", weights_only=True)
    state = ckpt.get("ema", ckpt["model"])
    new_state, new_model = deepen_state(state, dict(ckpt["config"]["model"]), len(ckpt["class_names"]), add)
    check_identity(state, dict(ckpt["config"]["model"]), new_state, new_model, len(ckpt["class_names"]))
    out = {"model": new_state, "config": {**ckpt["config"], "model": new_model}, "class_names": ckpt["class_names"]}
    atomic_torch_save(out, args.dst)
    print(f"{args.dst}: {len(new_state)} tensors ({len(new_state) - len(state)} new), model {new_model}")


if __name__ == "__main__":
    main()
