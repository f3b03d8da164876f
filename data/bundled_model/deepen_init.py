"""Make a deeper starting point from a checkpoint: extra residual blocks that start as the identity.

For each ``--add STAGE=N`` (``STAGE`` 1 to 4) this appends ``N`` depthwise-separable residual blocks to the end
of ``backbone.stage<STAGE>`` and sets ``model.depths`` to match. A new block's pointwise BatchNorm starts with
weight 0 and bias 0, so the block outputs ``SiLU(0) = 0`` and its residual passes the input through unchanged:
the deeper network computes exactly the function of the source checkpoint (in train and eval mode) until
fine-tuning grows the new blocks (their convolution weights are random, from ``torch.manual_seed(0)``, and get
gradients once the BatchNorm weight moves off 0). Every existing tensor is copied from the weights
``load_checkpoint`` uses (EMA where the source has them). Run from the repository root, e.g.:

    python data/bundled_model/deepen_init.py defect_detector/weights/deeppcb.pt runs/deep_init.pt --add 3=2 4=2
"""

from __future__ import annotations

import argparse
import copy
import dataclasses

import torch

from defect_detector.config import Config
from defect_detector.io import atomic_torch_save
from defect_detector.model.checkpoint import load_checkpoint
from defect_detector.model.detector import TinyDetector, build_model


def deepen(source: TinyDetector, cfg: Config, add: dict[int, int], seed: int = 0) -> tuple[TinyDetector, Config]:
    """Return ``(model, config)`` with ``add[stage]`` identity-initialised blocks appended to each named stage."""
    depths = list(cfg.model.depths)
    for stage, count in add.items():
        depths[stage - 1] += count
    new_cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, depths=tuple(depths)))
    new_cfg.validate()
    torch.manual_seed(seed)  # the new blocks' convolution weights: random, but the same on every run
    model = build_model(new_cfg.model, source.num_classes)
    state = model.state_dict()
    old = source.state_dict()
    for key in state:
        if key in old:
            state[key] = old[key]
        elif key.endswith(("pointwise.1.weight", "pointwise.1.bias")):
            state[key] = torch.zeros_like(state[key])
    model.load_state_dict(state)
    return model, new_cfg


def check_identity(source: TinyDetector, deeper: TinyDetector) -> None:
    """Fail unless both models give the same raw predictions on a random ``[2, 1, 128, 128]`` input, in train and eval mode.

    Runs on copies: a train-mode pass updates BatchNorm running statistics, which must not reach the saved file.
    """
    source, deeper = copy.deepcopy(source), copy.deepcopy(deeper)
    x = torch.rand(2, 1, 128, 128, generator=torch.Generator().manual_seed(0))
    for train in (False, True):
        source.train(train)
        deeper.train(train)
        with torch.no_grad():
            diff = (source(x) - deeper(x)).abs().max().item()
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
    try:
        source = load_checkpoint(args.src)
    except (FileNotFoundError, ValueError) as exc:
        raise SystemExit(str(exc)) from exc
    model, cfg = deepen(source.model, source.config, add)
    check_identity(source.model, model)
    state = model.state_dict()
    atomic_torch_save({"model": state, "config": cfg.to_dict(), "class_names": list(source.class_names)}, args.dst)
    print(f"{args.dst}: {len(state)} tensors ({len(state) - len(source.model.state_dict())} new), model depths {list(cfg.model.depths)}")


if __name__ == "__main__":
    main()
