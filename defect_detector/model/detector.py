"""TinyDetector = TinyBackbone + TinyPAN + DecoupledHead."""

from __future__ import annotations

import torch
from torch import nn

from defect_detector.core.config import ModelConfig
from defect_detector.model.backbone import TinyBackbone
from defect_detector.model.head import DecoupledHead
from defect_detector.model.neck import TinyPAN


class TinyDetector(nn.Module):
    """Grayscale anchor-free detector.

    ``forward``: ``[B, C, H, W]`` float32 in [0, 1] (H, W multiples of 32; C = ``cfg.in_channels``: the
    image, then its registered reference for a reference model) ->
    raw predictions ``[B, A, 4 + C]``: 4 raw box distances then C class logits,
    for ``A`` anchor points over strides 8, 16, 32 (see ``postprocess.make_anchor_points``).
    Loss and postprocess are separate modules.
    """

    def __init__(self, cfg: ModelConfig, num_classes: int) -> None:
        super().__init__()
        self.strides = tuple(cfg.strides)
        self.num_classes = num_classes
        self.in_channels = cfg.in_channels
        self.backbone = TinyBackbone(cfg.widths, cfg.depths, in_channels=cfg.in_channels)
        self.neck = TinyPAN(self.backbone.out_channels, cfg.neck_channels)
        self.head = DecoupledHead(cfg.neck_channels, num_classes, len(self.strides), cfg.head_convs, cfg.head_box_convs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.neck(self.backbone(x)))


def build_model(cfg: ModelConfig, num_classes: int) -> TinyDetector:
    """Create a freshly initialised :class:`TinyDetector`."""
    return TinyDetector(cfg, num_classes)
