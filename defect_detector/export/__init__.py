"""Export a trained detector as a self-describing artifact: an AOTInductor ``.pt2`` (torch.export; the default on a recent
torch), TorchScript (Jetson, older torch), ONNX float32 or int8 (ONNX Runtime static quantization), or a Triton model
repository.

The exported graph is :class:`DeployModel`: the detector, box decoding and the drift statistics of the
monitored layers, for one fixed square input size. NMS and un-letterboxing stay in the runtime.

- Input: float32 ``[B, C, S, S]`` (float16 for a ``half`` export), divided by 255, with ``C`` the model's
  ``in_channels`` (meta ``channels``): channel 0 the letterboxed grayscale image; for a reference model
  (``C = 2``, meta ``reference: true``) channel 1 its golden reference, already registered into the image's
  pixel frame and letterboxed with the image's ``LetterboxMeta``. The batch size is dynamic.
- Output 0 ``pred``: float32 ``[B, A, 4 + C]``: xyxy boxes in letterboxed pixels, then C class
  probabilities, for the ``A`` anchor points of strides 8, 16, 32.
- Output 1 ``stats``: float32 ``[B, L, 2]``: mean and std of each monitored layer's output
  (``monitor.hooks.layer_sums``; ``L = 0`` when no layer is monitored).

A siamese golden-template model (``model.fusion: siamese``) is exported with two more graphs beside that ``forward``
(meta ``graphs``, :func:`graphs_meta`): ``golden`` (the letterboxed golden image ``[B, 1, S, S]`` -> its trunk features
``c3``, ``c4`` and ``stats``, the drift statistics ``forward`` gives for the golden image paired with itself, NaN when
a monitored layer lies outside the trunk; once per golden image; artifacts exported before v0.17 return the features
only) and ``frame`` (the letterboxed image ``[B, 1, S, S]`` and those features ->
``pred``, ``stats`` as ``forward`` gives them for the pair): a frame then costs one trunk pass. TorchScript keeps them as
the methods ``golden`` and ``frame``, a ``.pt2`` as the AOTInductor models ``golden`` and ``frame`` of the package,
ONNX as the files ``<name>.golden.onnx`` and ``<name>.frame.onnx`` beside the model (their SHA-256 in the meta).

Conv + BatchNorm: :func:`fuse_conv_bn` folds every BatchNorm into its convolution in :class:`DeployModel`
(so the eager runtime path is fused too), after ``model.rep.reparameterize`` has turned each re-parameterisable
block (``model.blocks: rep``) into one convolution; every exporter traces that deploy form. ``torch.jit.freeze``
would fold the BatchNorms as well (checked on torch 2.14: the traced graph's 44 ``batch_norm`` nodes are gone after
freezing), so the artifact is the same either way.

The model runs in ``channels_last`` memory format: on CPU (oneDNN) the depthwise convolutions of this
model are about twice as fast that way. Numerics do not change beyond float rounding.

Modules: :mod:`.exporter` (the one skeleton every format runs: start, the format's writer, finish; and
:func:`export_model`, which dispatches to the writers), :mod:`.deploy_model` (the graph and ``meta.json``),
:mod:`.baseline` (the embedded drift baseline, checked against the model), :mod:`.parity` (checks against the eager
model), :mod:`.torchscript`, :mod:`.pt2`, :mod:`.onnx`, :mod:`.int8` (with :mod:`.calibration_data`) and
:mod:`.triton` (the formats' writers).
"""

from defect_detector.export.baseline import BaselineArg, check_baseline, export_baseline
from defect_detector.export.deploy_model import (
    FORMAT_VERSION,
    GOLDEN_CHECK,
    GOLDEN_FEATURES,
    GOLDEN_GRAPHS,
    META_FILE,
    OUTPUTS,
    DeployModel,
    ExportError,
    FrameGraph,
    GoldenGraph,
    build_meta,
    checkpoint_meta,
    fuse_conv_bn,
    graphs_meta,
    model_channels,
)
from defect_detector.export.exporter import FORMATS, export_model
from defect_detector.export.int8 import export_int8
from defect_detector.export.onnx import ONNX_OPSET, export_onnx, onnx_meta_path
from defect_detector.export.parity import (
    FP16_BOX_TOLERANCE,
    FP16_TOLERANCE,
    FP32_TOLERANCE,
    PARITY_REFERENCE_SHIFT,
    check_parity,
    max_diffs,
    parity_inputs,
    reference_outputs,
    shifted_copy,
)
from defect_detector.export.pt2 import PT2_TOLERANCE, export_pt2, pt2_unavailable_reason
from defect_detector.export.torchscript import (
    OPTIMIZE_MIN_GAIN,
    TRACE_BATCH,
    artifact_bytes,
    choose_optimization,
    cpu_half_supported,
    export_torchscript,
    load_artifact_bytes,
    quiet_jit,
    trace_deploy_model,
)
from defect_detector.export.triton import TRITON_INPUT, TRITON_OUTPUTS, export_triton, triton_config

__all__ = [
    "FORMAT_VERSION",
    "FP16_BOX_TOLERANCE",
    "FP16_TOLERANCE",
    "FP32_TOLERANCE",
    "GOLDEN_CHECK",
    "GOLDEN_FEATURES",
    "GOLDEN_GRAPHS",
    "META_FILE",
    "ONNX_OPSET",
    "OPTIMIZE_MIN_GAIN",
    "OUTPUTS",
    "PARITY_REFERENCE_SHIFT",
    "PT2_TOLERANCE",
    "TRACE_BATCH",
    "TRITON_INPUT",
    "TRITON_OUTPUTS",
    "BaselineArg",
    "DeployModel",
    "FORMATS",
    "ExportError",
    "FrameGraph",
    "GoldenGraph",
    "artifact_bytes",
    "build_meta",
    "checkpoint_meta",
    "check_baseline",
    "check_parity",
    "choose_optimization",
    "cpu_half_supported",
    "export_baseline",
    "export_int8",
    "export_model",
    "export_onnx",
    "export_pt2",
    "export_torchscript",
    "export_triton",
    "fuse_conv_bn",
    "graphs_meta",
    "load_artifact_bytes",
    "max_diffs",
    "model_channels",
    "onnx_meta_path",
    "parity_inputs",
    "pt2_unavailable_reason",
    "quiet_jit",
    "reference_outputs",
    "shifted_copy",
    "trace_deploy_model",
    "triton_config",
]
