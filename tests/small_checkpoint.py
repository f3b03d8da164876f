"""A small random checkpoint shared by the deployment tests (not a test module)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from defect_detector.core.config import config_from_dict
from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.model.detector import build_model

SMALL_MODEL = {"widths": [16, 32, 48, 64], "depths": [1, 1, 1, 1], "neck_channels": 32, "head_convs": 1}


def write_small_checkpoint(
    path: Path,
    imgsz: int = 128,
    cls_bias: float = -1.0,
    randomize_bn: bool = False,
    seed: int = 0,
    in_channels: int = 1,
    model: dict | None = None,
) -> Path:
    """Write a seeded random checkpoint whose class biases yield detections at conf 0.25, its stored operating point
    (``eval.f1_conf`` 0.25, ``eval.nms_iou`` 0.5: what ``predict`` and the ``Inspector`` default to).

    ``randomize_bn`` gives BatchNorm non-trivial statistics, so conv+BN folding is really exercised.
    ``in_channels`` 2 writes a reference model (input: the image and its registered reference).
    ``model``: further ``model.*`` keys, e.g. ``{"fusion": "siamese", "box_head": "dfl"}``.
    """
    cfg = config_from_dict(
        {
            "model": {**SMALL_MODEL, "in_channels": in_channels, **(model or {})},
            "data": {"imgsz": imgsz},
            "eval": {"f1_conf": 0.25, "nms_iou": 0.5},
        }
    )
    torch.manual_seed(seed)
    model = build_model(cfg.model, len(DEEPPCB_CLASSES))
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
    state = model.state_dict()
    torch.save({"model": state, "ema": state, "config": cfg.to_dict(), "class_names": list(DEEPPCB_CLASSES), "metrics": {}}, path)
    return path
