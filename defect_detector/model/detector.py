"""TinyDetector = backbone (early fusion, difference channel or siamese trunk) + TinyPAN + DecoupledHead."""

from __future__ import annotations

import torch
from torch import nn

from defect_detector.core.config import ModelConfig
from defect_detector.model.backbone import TinyBackbone
from defect_detector.model.head import DecoupledHead
from defect_detector.model.neck import TinyPAN
from defect_detector.model.siamese import SiameseBackbone


class TinyDetector(nn.Module):
    """Grayscale anchor-free detector.

    ``forward``: ``[B, C, H, W]`` float32 in [0, 1] (H, W multiples of 32; C = ``cfg.in_channels``: the
    image, then its registered reference for a reference model) ->
    raw predictions ``[B, A, R + K]``: ``R`` raw box values (4 distances, or ``4 * box_bins`` distribution
    logits when ``box_bins`` > 0, ``model.box_head: dfl``) then K class logits, for ``A`` anchor points over
    strides 8, 16, 32 (see ``postprocess.make_anchor_points`` and ``postprocess.decode(..., box_bins)``).
    Loss and postprocess are separate modules.

    ``cfg.fusion`` chooses the backbone of a reference model: ``early`` and ``diff``
    (:class:`~defect_detector.model.backbone.TinyBackbone`, without or with an ``|image - reference|`` channel),
    ``siamese`` (:class:`~defect_detector.model.siamese.SiameseBackbone`, whose golden features can be cached:
    :meth:`golden_features`, :meth:`forward_cached`).
    """

    def __init__(self, cfg: ModelConfig, num_classes: int) -> None:
        super().__init__()
        self.strides = tuple(cfg.strides)
        self.num_classes = num_classes
        self.in_channels = cfg.in_channels
        self.fusion = cfg.fusion
        self.box_bins = cfg.reg_max if cfg.box_head == "dfl" else 0
        trunk = {"stem_channels": cfg.stem_channels, "stem": cfg.stem, "blocks": cfg.blocks}
        if cfg.fusion == "siamese":
            self.backbone: nn.Module = SiameseBackbone(cfg.widths, cfg.depths, **trunk)
        else:
            self.backbone = TinyBackbone(cfg.widths, cfg.depths, in_channels=cfg.in_channels, diff_channel=cfg.fusion == "diff", **trunk)
        self.neck = TinyPAN(self.backbone.out_channels, cfg.neck_channels)
        self.head = DecoupledHead(
            cfg.neck_channels, num_classes, len(self.strides), cfg.head_convs, cfg.head_box_convs, box_bins=self.box_bins
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.neck(self.backbone(x)))

    def golden_features(self, reference: torch.Tensor, hooks: bool = False) -> list[torch.Tensor]:
        """Siamese models only: the golden reference's trunk features, ``reference`` float ``[B, 1, H, W]`` in
        [0, 1] -> a list of tensors to pass to :meth:`forward_cached` for every frame of that golden image.
        ``hooks``: forward hooks on the trunk's layers see this pass (by default they do not)."""
        if not isinstance(self.backbone, SiameseBackbone):
            raise TypeError(f"golden_features needs model.fusion: siamese, this model uses {self.fusion!r}")
        return self.backbone.golden_features(reference, hooks=hooks)

    def forward_cached(self, image: torch.Tensor, golden: list[torch.Tensor]) -> torch.Tensor:
        """Siamese models only: ``image`` float ``[B, 1, H, W]`` and cached :meth:`golden_features` -> the raw
        predictions :meth:`forward` gives for ``cat((image, reference), 1)``; costs one trunk pass."""
        if not isinstance(self.backbone, SiameseBackbone):
            raise TypeError(f"forward_cached needs model.fusion: siamese, this model uses {self.fusion!r}")
        return self.head(self.neck(self.backbone.forward_cached(image, golden)))


def build_model(cfg: ModelConfig, num_classes: int) -> TinyDetector:
    """Create a freshly initialised :class:`TinyDetector`."""
    return TinyDetector(cfg, num_classes)
