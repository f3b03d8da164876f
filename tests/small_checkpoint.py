"""A small random checkpoint shared by the deployment tests (not a test module)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from defect_detector.core.config import config_from_dict
from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.data.synth import generate_board_pair
from defect_detector.model.detector import TinyDetector, build_model

SMALL_MODEL = {"widths": [16, 32, 48, 64], "depths": [1, 1, 1, 1], "neck_channels": 32, "head_convs": 1}

SPREAD = 1.0
"""``write_small_checkpoint(spread=)`` for tests that compare calls across runtimes: with :data:`SPREAD_BIAS`, the
shared ``.pt2``'s board (640x480 at 320 px) gets 43 calls at conf 0.25, from candidates 5.7e-5 or more apart in score,
where its eager and TorchScript scores differ by up to 4.5e-7 (:func:`assert_apart`). The same model at the default
``cls_bias`` without it: 100 calls, some exactly tied, and 470 more cut by ``max_det`` (measured)."""
SPREAD_BIAS = -4.0
"""``cls_bias`` with :data:`SPREAD`: tens of calls above conf 0.25 on a synthetic board, none cut by ``max_det``."""


def write_small_checkpoint(  # noqa: PLR0913 - a test fixture's knobs, one keyword each
    path: Path,
    imgsz: int = 128,
    cls_bias: float = -1.0,
    randomize_bn: bool = False,
    seed: int = 0,
    in_channels: int = 1,
    model: dict | None = None,
    spread: float | None = None,
) -> Path:
    """Write a seeded random checkpoint whose class biases yield detections at conf 0.25, its stored operating point
    (``eval.f1_conf`` 0.25, ``eval.nms_iou`` 0.5: what ``predict`` and the ``Inspector`` default to).

    ``randomize_bn`` gives BatchNorm non-trivial statistics, so conv+BN folding is really exercised.
    ``in_channels`` 2 writes a reference model (input: the image and its registered reference).
    ``model``: further ``model.*`` keys, e.g. ``{"fusion": "siamese", "box_head": "dfl"}``.
    ``spread``: give each class's logits this standard deviation over the anchors of a synthetic board, around
    ``cls_bias`` (:func:`spread_class_logits`). Without it every anchor's class logit lies within about 1e-4 of its
    class's mean (each untrained layer shrinks its activations about 3x), so the scores tie within float32 rounding and
    which call NMS keeps, ``max_det`` cuts or lists first is decided by rounding, which differs between runtimes and
    thread counts. A test that compares calls across runtimes or runs passes :data:`SPREAD` and :data:`SPREAD_BIAS`.
    """
    cfg = config_from_dict(
        {
            "model": {**SMALL_MODEL, "in_channels": in_channels, **(model or {})},
            "data": {"imgsz": imgsz},
            "eval": {"f1_conf": 0.25, "nms_iou": 0.5},
        }
    )
    torch.manual_seed(seed)
    model = build_model(cfg.model, len(DEEPPCB_CLASSES)).eval()
    with torch.no_grad():
        if randomize_bn:
            for module in model.modules():
                if isinstance(module, nn.BatchNorm2d):
                    module.running_mean.uniform_(-0.2, 0.2)
                    module.running_var.uniform_(0.5, 2.0)
                    module.weight.uniform_(0.5, 1.5)
                    module.bias.uniform_(-0.2, 0.2)
        for branch in model.head.cls_branches:
            branch[-1].bias.fill_(cls_bias)
        if spread is not None:
            spread_class_logits(model, imgsz, spread, seed)
    state = model.state_dict()
    torch.save({"model": state, "ema": state, "config": cfg.to_dict(), "class_names": list(DEEPPCB_CLASSES), "metrics": {}}, path)
    return path


def spread_class_logits(model: TinyDetector, imgsz: int, spread: float, seed: int) -> list[float]:
    """Rescale each level's last class convolution (weights and biases) so that every class's logits over the anchors
    of one ``imgsz`` x ``imgsz`` synthetic board (with its golden image for a reference model) keep their mean (the
    bias) and have standard deviation ``spread``. Returns, per level, the smallest such standard deviation before."""
    board, golden = generate_board_pair(imgsz, imgsz, np.random.default_rng(seed))[:2]
    x = torch.from_numpy(np.stack([board, golden][: model.in_channels])).float().div(255).unsqueeze(0)  # [1, C, S, S]
    logits: list[torch.Tensor] = []
    hooks = [branch[-1].register_forward_hook(lambda _m, _i, out: logits.append(out)) for branch in model.head.cls_branches]
    try:
        model(x)
    finally:
        for hook in hooks:
            hook.remove()
    before = []
    for branch, level in zip(model.head.cls_branches, logits):
        conv, per_class = branch[-1], level[0].flatten(1)  # [K, h * w]
        mean, std = per_class.mean(1), per_class.std(1)  # [K]
        gain = spread / std
        conv.weight.mul_(gain.view(-1, 1, 1, 1))
        conv.bias.add_((conv.bias - mean) * gain)  # the mean back at the bias
        before.append(float(std.min()))
    return before


def assert_apart(scores: torch.Tensor, gap: float = 1e-4) -> None:
    """The premise of comparing calls across runtimes in order: ``scores`` (float ``[N]`` in (0, 1)) lie ``gap`` or more
    apart in logit, so the model, not float32 rounding, decides their order (see ``write_small_checkpoint``'s
    ``spread``). Rounding measured on the shared ``.pt2``'s model and board, scores above 0.01: eager vs TorchScript
    2.8e-6, vs ONNX 8.6e-6 in logit. In logit, as low scores are closer in score but no less resolved."""
    ordered = scores.double().logit().sort().values
    closest = float((ordered[1:] - ordered[:-1]).min()) if len(ordered) > 1 else float("inf")
    assert closest >= gap, f"calls {closest:.1e} apart in logit: their order is rounding's; pass spread=SPREAD"
