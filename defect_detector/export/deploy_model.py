"""The deployed computation (:class:`DeployModel`) and the ``meta.json`` that describes an exported model.

:class:`DeployModel` is the detector, box decoding and the drift statistics of the monitored layers, for
one fixed square input size; every export format traces it. :func:`build_meta` writes what a runtime needs
to feed it and read its outputs.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from defect_detector.core.constants import DEFAULT_LAYERS, PAD_VALUE
from defect_detector.core.limits import Limits
from defect_detector.export.onednn import fuse_conv_silu
from defect_detector.model.layers import ConvBNAct
from defect_detector.model.postprocess import decode, make_anchor_points
from defect_detector.model.rep import reparameterize
from defect_detector.model.siamese import TRUNK
from defect_detector.monitor.hooks import ActivationMonitor

FORMAT_VERSION = 1
META_FILE = "meta.json"
OUTPUTS = {
    "pred": "float32 [B, A, 4 + C]: xyxy boxes in letterboxed input pixels, then class probabilities",
    "stats": "float32 [B, L, 2]: mean and std of each monitored layer output (layers in meta 'layers' order)",
}

GOLDEN_CHECK = {
    "method": "zncc",
    "scale": 0.5,
    "blur_sigma": 1.0,
    "min_zncc": 0.5,
    "applies_to": "the C++ example's correlation check of a golden image given already registered into the frame (deploy/cpp); "
    "below min_zncc the frame is not inspected; not Python's golden check (meta register)",
}
"""meta ``golden_check`` of a golden-template model: the settings of the C++ example's *correlation check*
(``deploy/cpp/common.hpp``), not of Python's golden check (``align/golden_check.py``, whose limits are meta
``register``): the ZNCC of the frame and its registered golden image, both downscaled by ``scale`` (INTER_AREA) and
blurred (Gaussian, ``blur_sigma`` px), must reach ``min_zncc``. On DeepPCB's 1,000 training-split boards
(``benchmarks/golden_check.py``, golden images as registration warped them) it refuses 4 true pairs (3 blank, 1 at
0.492) and 12 of 997 boards with 8 painted ~60 px defects, all of which Python inspects but the blank ones; it passes
787 of the 832 golden images 6 px off their registration and 114 of the neighbouring boards Python refuses (ZNCC up
to 0.929), and refuses 999 of 1,000 golden images of another design (deploy/cpp/README.md, "Correlation check")."""


class ExportError(ValueError):
    """The model cannot be exported as asked (unsupported option, mismatched baseline, or the parity check failed)."""


def model_channels(model: nn.Module) -> int:
    """Input channels of a detector (``in_channels``; 1 for models built before reference inspection existed)."""
    return int(getattr(model, "in_channels", 1))


def fuse_conv_bn(model: nn.Module) -> int:
    """Fold the BatchNorm of every :class:`ConvBNAct` into its convolution, in place (eval mode only).

    The BatchNorm is replaced by ``nn.Identity`` so module names (and monitored layer names) stay valid.
    Returns the number of fused pairs.
    """
    if model.training:
        raise ValueError("fuse_conv_bn needs an eval-mode model")
    fused = 0
    for module in model.modules():
        if isinstance(module, ConvBNAct) and isinstance(module[1], nn.BatchNorm2d):
            module[0] = fuse_conv_bn_eval(module[0], module[1])
            module[1] = nn.Identity()
            fused += 1
    return fused


class DeployModel(nn.Module):
    """The deployed computation: detector + decode + layer statistics for a fixed ``imgsz``.

    Wraps a copy of ``model`` (the caller's model is not modified), with re-parameterisable blocks fused into one
    convolution each (``model/rep.py``: ``model.blocks: rep``) and BatchNorm folded (both ``fuse``), and
    weights in channels_last memory format (``channels_last``). ``cpu_fusion`` (needs ``fuse``) also runs
    every conv + SiLU as one oneDNN kernel (:mod:`defect_detector.export.onednn`): faster, but the model
    then runs only on the CPU in float32. Anchor points are float32 buffers for ``imgsz x imgsz`` inputs.
    ``forward(x)``: ``x`` float ``[B, in_channels, imgsz, imgsz]`` in [0, 1] (the model's dtype;
    ``in_channels`` is the detector's, see the package docstring) -> ``(pred float32 [B, A, 4 + C],
    stats float32 [B, L, 2])`` as described in the package docstring. ``layers`` are module names (or globs)
    of the detector, resolved in model order into ``layer_names``; an empty sequence monitors nothing (``L = 0``).
    A siamese model (:attr:`caches_golden`) also has :meth:`golden` (the golden image's trunk features, once per golden
    image) and :meth:`frame` (a frame against them: ``forward``'s outputs for the pair, one trunk pass).
    """

    def __init__(
        self,
        model: nn.Module,
        imgsz: int,
        layers: Sequence[str] = DEFAULT_LAYERS,
        fuse: bool = True,
        channels_last: bool = True,
        cpu_fusion: bool = False,
    ) -> None:
        super().__init__()
        if cpu_fusion and not fuse:
            raise ValueError("cpu_fusion needs fuse=True (the oneDNN kernel takes the BatchNorm-folded convolution)")
        detector = copy.deepcopy(model).eval()
        if fuse:
            reparameterize(detector)
            fuse_conv_bn(detector)
        if channels_last:
            detector = detector.to(memory_format=torch.channels_last)
        if cpu_fusion:
            fuse_conv_silu(detector)
        self.model = detector
        self.in_channels = model_channels(model)
        self.imgsz = int(imgsz)
        self.strides = tuple(int(s) for s in model.strides)
        self.box_bins = int(getattr(model, "box_bins", 0))
        if self.imgsz % max(self.strides) != 0:
            raise ValueError(f"imgsz must be a multiple of {max(self.strides)}, got {imgsz}")
        device = next(detector.parameters()).device
        points, anchor_strides = make_anchor_points(self.imgsz, self.imgsz, self.strides, device)
        self.register_buffer("points", points, persistent=False)
        self.register_buffer("anchor_strides", anchor_strides, persistent=False)
        self.monitor = ActivationMonitor(detector, layers) if layers else None
        self.layer_names: tuple[str, ...] = tuple(self.monitor.layer_names) if self.monitor else ()

    @property
    def num_classes(self) -> int:
        return int(self.model.num_classes)

    def half_(self, dtype: torch.dtype = torch.float16) -> DeployModel:
        """Convert the detector (not the anchor buffers, which must stay exact) to ``dtype`` (float16, or bfloat16 for
        a CPU that runs it natively: ``core/devices.py`` ``cpu_bf16``), in place."""
        self.model.to(dtype)
        return self

    @property
    def caches_golden(self) -> bool:
        """Whether the golden image's trunk features can be computed once (:meth:`golden`) and reused for every frame
        (:meth:`frame`): a siamese golden-template model (``model.fusion: siamese``)."""
        return getattr(self.model, "fusion", None) == "siamese"

    def golden_shapes(self) -> tuple[tuple[int, int, int], ...]:
        """``(C, H, W)`` of each golden feature tensor :meth:`golden` returns, without the batch axis (siamese only)."""
        if not self.caches_golden:
            raise ValueError(f"golden features need model.fusion: siamese, this model uses {getattr(self.model, 'fusion', 'early')!r}")
        widths = self.model.backbone.out_channels
        return ((int(widths[0]), self.imgsz // 8, self.imgsz // 8), (int(widths[1]), self.imgsz // 16, self.imgsz // 16))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._outputs(self.model(x))

    @property
    def golden_stats(self) -> bool:
        """Whether :meth:`golden` can report the golden image's drift statistics: every monitored layer lies in the
        shared trunk (``backbone.stem``..``backbone.stage3``, the default layers), which the golden image's pass runs
        through exactly as the frame's does when the pair is the golden image with itself."""
        trunk = tuple(f"backbone.{name}" for name in TRUNK)
        return self.caches_golden and all(".".join(n.split(".")[:2]) in trunk for n in self.layer_names)

    def golden(self, reference: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Siamese models only: the golden image's trunk features and drift statistics, to compute once per golden
        image. ``reference`` float ``[B, 1, S, S]`` in [0, 1], letterboxed exactly like the frames it will be compared
        with -> ``(c3 [B, widths[1], S/8, S/8], c4 [B, widths[2], S/16, S/16])`` (:meth:`golden_shapes`), the model's
        dtype, and ``stats`` float32 ``[B, L, 2]``: what :meth:`forward` reports for the golden image paired with
        itself (the monitored layers' statistics of its trunk pass), NaN throughout when a monitored layer lies
        outside the trunk (:attr:`golden_stats` False: the runtime then pairs the golden image with itself once)."""
        self.golden_shapes()  # ValueError for a model without a siamese trunk
        c3, c4 = self.model.golden_features(reference, hooks=self.golden_stats)
        if self.monitor is None:
            stats = torch.zeros(reference.shape[0], 0, 2, dtype=torch.float32, device=reference.device)
        elif self.golden_stats:
            stats = self.monitor.stats()
        else:
            stats = torch.full((reference.shape[0], len(self.layer_names), 2), float("nan"), device=reference.device)
        return c3, c4, stats

    def frame(self, image: torch.Tensor, c3: torch.Tensor, c4: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Siamese models only: one pass over the frames against cached :meth:`golden` features. ``image`` float
        ``[B, 1, S, S]`` in [0, 1]; ``c3``, ``c4`` of batch 1 (broadcast over the frames) or ``B`` -> ``(pred, stats)``
        as :meth:`forward` gives for ``cat((image, reference), 1)``, the ``stats`` those of the frames' trunk pass."""
        self.golden_shapes()
        return self._outputs(self.model.forward_cached(image, [c3, c4]))

    def _outputs(self, raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw head outputs -> ``(pred [B, A, 4 + C], stats [B, L, 2])``: decoded boxes, the monitored layers' statistics."""
        pred = decode(raw, self.points, self.anchor_strides, self.box_bins)
        stats = self.monitor.stats() if self.monitor is not None else torch.zeros_like(pred[:, :0, :2])
        return pred, stats


class GoldenGraph(nn.Module):
    """``forward`` = ``deploy.golden``: the golden-features computation as a module of its own, for exporters that
    capture a module's ``forward`` only (``torch.export``, ONNX, a Triton model). Shares ``deploy``'s weights."""

    def __init__(self, deploy: DeployModel) -> None:
        super().__init__()
        self.deploy = deploy

    def forward(self, reference: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.deploy.golden(reference)


class FrameGraph(nn.Module):
    """``forward`` = ``deploy.frame``: the per-frame computation against cached golden features, as a module of its
    own (see :class:`GoldenGraph`)."""

    def __init__(self, deploy: DeployModel) -> None:
        super().__init__()
        self.deploy = deploy

    def forward(self, image: torch.Tensor, c3: torch.Tensor, c4: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.deploy.frame(image, c3, c4)


GOLDEN_FEATURES = ("c3", "c4")
"""The golden features the ``golden`` graph returns (before its ``stats``) and the ``frame`` graph takes after the image."""

GOLDEN_GRAPHS = ("golden", "frame")
"""The graphs besides ``forward`` that an artifact of a siamese model carries (meta ``graphs``)."""


def graphs_meta(deploy: DeployModel, golden_batch: str = "1 or B") -> dict[str, Any]:
    """meta ``graphs``: the computations an artifact of ``deploy`` holds, each ``{"inputs": {name: shape}, "outputs":
    {name: shape}}`` in call order (shapes with ``"B"`` for the batch). ``forward`` always (the image, and for a
    reference model its registered golden image, as channels); for a siamese model also ``golden`` (the golden image
    -> its trunk features ``c3``, ``c4`` and its drift ``stats``, once per golden image) and ``frame`` (the image and those features ->
    ``forward``'s outputs; ``golden_batch``: the batch the features may have, ``"1 or B"`` (broadcast) or ``"B"``).
    Each exporter adds where its artifact keeps the graph (``method``, ``model_name`` or ``file``)."""
    size = deploy.imgsz
    anchors = sum((size // s) ** 2 for s in deploy.strides)
    outputs = {"pred": ["B", anchors, 4 + deploy.num_classes], "stats": ["B", len(deploy.layer_names), 2]}
    graphs: dict[str, Any] = {"forward": {"inputs": {"images": ["B", deploy.in_channels, size, size]}, "outputs": dict(outputs)}}
    if deploy.caches_golden:
        c3, c4 = (list(shape) for shape in deploy.golden_shapes())
        golden_outputs = {"c3": ["B", *c3], "c4": ["B", *c4], "stats": list(outputs["stats"])}
        graphs["golden"] = {"inputs": {"reference": ["B", 1, size, size]}, "outputs": golden_outputs}
        frame_inputs = {"image": ["B", 1, size, size], "c3": [golden_batch, *c3], "c4": [golden_batch, *c4]}
        graphs["frame"] = {"inputs": frame_inputs, "outputs": dict(outputs)}
    return graphs


def build_meta(  # noqa: PLR0913 - one argument per meta.json key the caller knows
    class_names: Sequence[str],
    imgsz: int,
    strides: Sequence[int],
    layers: Sequence[str],
    baseline: dict[str, Any] | None = None,
    half: bool = False,
    optimize: dict[str, Any] | None = None,
    source: str | None = None,
    cpu_only: bool = False,
    channels: int = 1,
    pixel_scale: float | None = None,
) -> dict[str, Any]:
    """The ``meta.json`` describing an exported model (also used for a checkpoint loaded eagerly).

    ``channels``: the model's input channels C (1: the image; 2: the image and its registered reference,
    written as ``"reference": true``); the input is ``["B", C, imgsz, imgsz]``.
    ``baseline``: the drift baseline of the ``layers`` statistics (``Baseline.to_dict()`` form, already checked
    against this model: see :func:`defect_detector.export.baseline.export_baseline`), or None.
    ``cpu_only``: the graph holds CPU-only kernels (oneDNN conv + SiLU, see ``DeployModel(cpu_fusion=True)``).
    ``"tta"`` is written as ``none`` for older readers: the graph is one pass, and a runtime adds test-time
    augmentation only when asked for.
    ``pixel_scale``: the training config's ``data.pixel_scale``, model input pixels per original image pixel
    at training (float, or None when the config did not record it), so that a runtime can tile frames that
    letterboxing to ``imgsz`` would shrink well below it (``data/tiles.py``).
    """
    return {
        "format_version": FORMAT_VERSION,
        "class_names": list(class_names),
        "imgsz": int(imgsz),
        "channels": int(channels),
        "reference": int(channels) == 2,
        "normalisation": "x/255",
        "letterbox": {"pad_value": PAD_VALUE, "centred": True},
        "input": {"name": "images", "dtype": "float16" if half else "float32", "shape": ["B", int(channels), int(imgsz), int(imgsz)]},
        "outputs": OUTPUTS,
        "strides": [int(s) for s in strides],
        "layers": list(layers),
        "baseline": baseline,
        "half": bool(half),
        "cpu_only": bool(cpu_only),
        "pixel_scale": None if pixel_scale is None else float(pixel_scale),
        "torch_version": torch.__version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "optimize_for_inference": optimize or {"applied": False, "reason": "not exported"},
        "source_weights": source,
        "tta": "none",
        "golden_check": dict(GOLDEN_CHECK) if int(channels) == 2 else None,
    }


def checkpoint_meta(
    loaded: Any,
    deploy: DeployModel,
    baseline: dict[str, Any] | None = None,
    half: bool = False,
    optimize: dict[str, Any] | None = None,
    cpu_only: bool = False,
) -> dict[str, Any]:
    """:func:`build_meta` for ``deploy`` wrapping the model of ``loaded`` (a ``LoadedModel``): its class names, input
    size, strides, monitored layers, channels, source path and recorded ``data.pixel_scale``, and the operating point
    it was validated at (``"operating_point": {"conf": eval.f1_conf, "iou": eval.nms_iou, "cross_class_iou": ...,
    "cross_class_factor": ..., "merge_ios": ...}``), which ``predict`` defaults to, the limits it was validated at
    (``"limits"``: ``core/limits.py`` ``Limits.of_config``: exposure, photometric range, hidden area, registration and
    the golden check), the design domain it carries (``"domain"``:
    ``DomainModel.to_dict()`` form, ``monitor/domain.py``), when it does, the designs ``teach`` taught it
    (``"taught"``: ``[{"name", "key"}]``, [] when none; ``inspect/design_check.py``), the graphs the model has
    (``"graphs"``: :func:`graphs_meta`)."""
    meta = build_meta(
        loaded.class_names,
        deploy.imgsz,
        deploy.strides,
        deploy.layer_names,
        baseline,
        half,
        optimize,
        str(loaded.path),
        cpu_only,
        deploy.in_channels,
        loaded.config.data.pixel_scale,
    )
    ev = loaded.config.eval
    meta["operating_point"] = {
        "conf": float(ev.f1_conf),
        "iou": float(ev.nms_iou),
        "cross_class_iou": None if ev.cross_class_iou is None else float(ev.cross_class_iou),
        "cross_class_factor": float(ev.cross_class_factor),
        "merge_ios": None if ev.merge_ios is None else float(ev.merge_ios),
    }
    meta["limits"] = Limits.of_config(loaded.config).to_dict()
    if getattr(loaded, "domain", None) is not None:
        meta["domain"] = loaded.domain
    meta["taught"] = [dict(d) for d in getattr(loaded, "taught", [])]
    meta["graphs"] = graphs_meta(deploy)
    return meta
