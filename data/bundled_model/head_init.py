"""Make a starting point with one block per head branch from a checkpoint with two (v0.3 -> v0.4).

v0.3's head branches are ``Sequential(block0, block1, predictor)``. For each branch kind named in
``--slim`` (``cls``, ``box`` or both) this keeps block0 and the predictor (renumbered from index 2 to 1) and
drops block1, a residual block, so the network without it still computes a close function that fine-tuning
repairs. Everything else is copied unchanged, and the config's ``model.head_convs`` / ``head_box_convs`` are
set to match. Run from the repository root, e.g. for the v0.4 bundled model:

    python data/bundled_model/head_init.py data/bundled_model/v0.3/deeppcb.pt data/bundled_model/v0.3/init_cls1.pt --slim cls
"""

from __future__ import annotations

import argparse
import re

import torch

from defect_detector.io import atomic_torch_save


def slim_head_state(state: dict[str, torch.Tensor], kinds: set[str]) -> dict[str, torch.Tensor]:
    """Drop block 1 of every ``head.<kind>_branches.<level>`` for ``kind`` in ``kinds``; the predictor moves from index 2 to 1."""
    out = {}
    for key, value in state.items():
        match = re.match(r"(head\.(cls|box)_branches\.\d+)\.(\d+)\.(.*)", key)
        if match is None or match.group(2) not in kinds or match.group(3) == "0":
            out[key] = value
        elif match.group(3) == "2":
            out[f"{match.group(1)}.1.{match.group(4)}"] = value
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("--slim", nargs="+", choices=["cls", "box"], required=True)
    args = parser.parse_args()
    ckpt = torch.load(args.src, map_location="cpu", weights_only=True)
    state = ckpt.get("ema", ckpt["model"])
    model = dict(ckpt["config"]["model"])
    if model.get("head_convs") != 2 or model.get("head_box_convs") not in (None, 2):
        raise SystemExit(f"{args.src}: expected two blocks per head branch, config says {model}")
    kinds = set(args.slim)
    model["head_convs"] = 1 if "cls" in kinds else 2
    model["head_box_convs"] = 1 if "box" in kinds else 2
    out = {"model": slim_head_state(state, kinds), "config": {**ckpt["config"], "model": model}, "class_names": ckpt["class_names"]}
    atomic_torch_save(out, args.dst)
    print(f"{args.dst}: {len(out['model'])} tensors (from {len(state)}), model {model}")


if __name__ == "__main__":
    main()
