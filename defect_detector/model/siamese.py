"""SiameseBackbone: one shared-weight trunk for the inspected image and its golden reference, fused at strides 8 and 16.

The trunk (``stem``, ``stage1``..``stage3``, the layers of :class:`~defect_detector.model.backbone.TinyBackbone`
with a 1-channel stem) runs on the golden reference and on the image with the same weights. Its outputs at
stride 8 (``c3``) and 16 (``c4``) meet in :class:`DiffFusion`: the image's features, concatenated with their
difference from the reference's, then a 1x1 convolution back to the trunk's width. ``stage4`` (stride 32) runs
once, on the fused stride-16 map. The reference's trunk features depend only on the golden image, so a runtime
may compute them once (:meth:`SiameseBackbone.golden_features`) and reuse them for every frame
(:meth:`SiameseBackbone.forward_cached`): a frame then costs one trunk pass.

Monitored layers (``backbone.stem``, ``backbone.stage1``..``stage3``, the drift monitor's defaults) are the
image's trunk pass: the reference's pass calls the same modules' ``forward`` directly, which runs no forward
hooks, so the statistics describe the camera's frame as in the early-fusion model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from defect_detector.model.backbone import STEM_STRIDES, make_stage, make_stem
from defect_detector.model.layers import ConvBNAct


class DiffFusion(nn.Module):
    """``(image [B, C, h, w], reference [B, C, h, w]) -> [B, C, h, w]``: ``ConvBNAct1x1(cat(image, image - reference))``.

    The signed difference keeps which of the two holds copper (missing copper and extra copper are different
    defects); the concatenated image features keep the context the detector needs to classify."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.proj = ConvBNAct(2 * channels, channels, 1)

    def forward(self, image: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.cat((image, image - reference), dim=1))


TRUNK = ("stem", "stage1", "stage2", "stage3")
"""The shared trunk's modules (under ``backbone.``): the only ones the golden image's own pass runs through."""


class SiameseBackbone(nn.Module):
    """``[B, 2, H, W]`` (image, registered reference) float in [0, 1] -> features at strides 8, 16, 32.

    Returns ``(c3 [B, widths[1], H/8, W/8], c4 [B, widths[2], H/16, W/16], c5 [B, widths[3], H/32, W/32])``,
    ``c3`` and ``c4`` fused with the reference's trunk features, ``c5`` = ``stage4(c4)``. ``stem`` and ``blocks``
    as in :class:`~defect_detector.model.backbone.TinyBackbone` (``model.stem``, ``model.blocks``).
    """

    def __init__(
        self,
        widths: tuple[int, int, int, int],
        depths: tuple[int, int, int, int],
        stem_channels: int = 32,
        stem: str = "conv3",
        blocks: Sequence[str] = ("depthwise",) * 4,
    ) -> None:
        super().__init__()
        self.in_channels = 2
        self.stem = make_stem(stem, 1, stem_channels)
        self.stage1 = make_stage(stem_channels, widths[0], depths[0], blocks[0], stride=4 // STEM_STRIDES[stem])
        self.stage2 = make_stage(widths[0], widths[1], depths[1], blocks[1])
        self.stage3 = make_stage(widths[1], widths[2], depths[2], blocks[2])
        self.fuse3 = DiffFusion(widths[1])
        self.fuse4 = DiffFusion(widths[2])
        self.stage4 = make_stage(widths[2], widths[3], depths[3], blocks[3])
        self.out_channels = (widths[1], widths[2], widths[3])

    def _trunk(self, x: torch.Tensor, hooks: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """``[B, 1, H, W]`` -> ``(c3 [B, widths[1], H/8, W/8], c4 [B, widths[2], H/16, W/16])``; ``hooks=False``
        calls each trunk layer's ``forward`` directly, so forward hooks on ``stem``..``stage3`` do not see it."""
        x4 = x
        for layer in (self.stem, self.stage1, self.stage2):
            x4 = layer(x4) if hooks else layer.forward(x4)
        c4 = self.stage3(x4) if hooks else self.stage3.forward(x4)
        return x4, c4

    def golden_features(self, reference: torch.Tensor, hooks: bool = False) -> list[torch.Tensor]:
        """The reference's trunk features, to compute once per golden image: ``reference`` float ``[B, 1, H, W]``
        in [0, 1] (registered into the image's frame, letterboxed like it) -> ``[c3 [B, widths[1], H/8, W/8],
        c4 [B, widths[2], H/16, W/16]]``. Depends on the training mode only through BatchNorm (cache in eval mode).
        ``hooks``: forward hooks on ``stem``..``stage3`` see this pass (the drift monitor reading the golden image's
        own statistics, ``export/deploy_model.py`` ``DeployModel.golden``); by default they do not."""
        return list(self._trunk(reference, hooks=hooks))

    def forward_cached(self, image: torch.Tensor, golden: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One frame against cached :meth:`golden_features`: ``image`` float ``[B, 1, H, W]`` -> ``(c3, c4, c5)``.
        ``golden`` tensors of batch 1 are broadcast over the frame's batch."""
        c3, c4 = self._trunk(image, hooks=True)
        f3 = self.fuse3(c3, golden[0].expand_as(c3))
        f4 = self.fuse4(c4, golden[1].expand_as(c4))
        return f3, f4, self.stage4(f4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.forward_cached(x[:, 0:1], self.golden_features(x[:, 1:2]))
