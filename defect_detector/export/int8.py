"""int8 export: ONNX Runtime post-training static quantization (QDQ) of the float32 ONNX model, calibrated on training frames.

Flow (:func:`export_int8`): the float32 ONNX export of :class:`DeployModel` (:mod:`.onnx`) -> ONNX Runtime's
pre-processing (shape inference) -> ``quantize_static`` in QDQ format, per-channel int8 weights, uint8 activations
(ONNX Runtime's advice for x86 CPUs with VNNI), ranges from MinMax calibration on
:func:`~.calibration_data.calibration_sets` -> the model with ``meta.json`` embedded. ``target="tensorrt"`` writes
symmetric int8 activations instead (zero point 0), the form TensorRT's explicit quantization takes (deploy/JETSON.md).

The drift statistics stay float: every node that feeds only the ``stats`` output (the reductions over the monitored
layers, ``monitor/hooks.py``) is kept out of quantization, so the statistics are float32 sums over the layer outputs
as the int8 model computes them. The box decoding that feeds ``pred`` after the last convolutions (anchor arithmetic,
sigmoid) stays float too: only convolutions, and the element-wise ops between them, run in int8. The layer outputs
themselves are the int8 network's, so their statistics move: on the bundled single-image model the largest per-layer
shift of a statistic's mean was 1.02 baseline spreads (100 calibration frames, 7-bit weights): ``report["stats_shift"]``,
in units of the float baseline's per-layer standard deviation over frames. ``export_int8`` embeds the float baseline (checked as every
export checks it); ``export --int8`` then calibrates the baseline again through the int8 model on the same ``--data``
frames (``jobs/calibrate.py``, as ``calibrate --weights model.int8.onnx`` does) and embeds that one
(:func:`embed_baseline`), so drift compares the int8 model's statistics with its own clean level.

Weights are quantized to 7 bits (``reduce_range``) for the ``cpu`` target. ONNX Runtime's uint8 x int8 convolutions
on x86 CPUs without VNNI (AVX2, AVX-512F without VNNI) add pairs of products in int16 (``vpmaddubsw``), which
saturates when both weights of a pair are large and the input is bright: 2 x 255 x 127 > 32767. DeepPCB's frames are
binarized white, so they hit it: the same int8 model gave 105 class scores above 0.4 on two sample frames on a VNNI
CPU and 40 under ``qemu-x86_64 -cpu Haswell``, and held-out mAP@0.5 fell from 0.92 to 0.60 on a CPU without VNNI
(issue 33). With 7-bit weights, 2 x 255 x 64 fits in int16 and both CPUs give bit-identical outputs. ``export_int8``
then checks its own accuracy against float32 on held-back frames and refuses to write a model that disagrees
(:mod:`.int8_check`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from defect_detector.core.constants import DEFAULT_LAYERS
from defect_detector.core.io import atomic_write_bytes, atomic_write_json
from defect_detector.data.dataset import evenly_spaced
from defect_detector.export.baseline import BaselineArg
from defect_detector.export.calibration_data import CALIBRATION_IMAGES, HeldBack, calibration_sets
from defect_detector.export.deploy_model import META_FILE, ExportError
from defect_detector.export.exporter import finish_export
from defect_detector.export.int8_check import CHECK_FRAMES, Accuracy, Agreement, held_back_check, refusal
from defect_detector.export.onnx import export_onnx, onnx_meta_path, sign_onnx, split_onnx_meta
from defect_detector.model.checkpoint import LoadedModel

log = logging.getLogger("defect_detector.export")

QUANTIZED_OPS = ("Conv", "Mul", "Add", "Sigmoid", "Concat", "MaxPool", "Resize", "Split", "Slice")
"""Op types quantized (where they feed ``pred`` through the network trunk; see :func:`float_only_nodes`)."""


def float_only_nodes(model: Any, outputs: Sequence[str] = ("stats",), keep: str = "pred") -> list[str]:
    """Names of the nodes of ONNX ``model`` (a ModelProto) that stay float: those that feed only ``outputs``, not
    ``keep`` (the statistics' reductions), and those after the last convolution on the way to ``keep`` (decoding)."""
    producers = {out: node for node in model.graph.node for out in node.output}

    def ancestors(names: Sequence[str]) -> set[str]:
        seen: set[str] = set()
        stack = list(names)
        while stack:
            node = producers.get(stack.pop())
            if node is None or node.name in seen:
                continue
            seen.add(node.name)
            stack.extend(node.input)
        return seen

    feeds_keep = ancestors([keep])
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    trunk = ancestors([o for n in convs for o in n.output])  # every node up to some convolution's output
    return [n.name for n in model.graph.node if n.name not in feeds_keep or (n.name not in trunk and n.op_type != "Conv")]


CALIBRATION_STRIDE = 10
"""At most this many frames' tensors are held at once while calibrating (``CalibStridedMinMax``): the calibrator keeps
every intermediate tensor of a chunk (tens of MB a frame at 640; a histogram calibration that holds all of 300
frames ran out of memory at 18 GB), then merges its ranges."""


class _Reader:
    """``onnxruntime.quantization.CalibrationDataReader`` over uint8 ``[N, C, S, S]`` frames, one float32 frame at a time,
    in the ranges ``set_range`` chooses (ONNX Runtime's strided calibration)."""

    def __init__(self, frames: np.ndarray, input_name: str) -> None:
        self.frames, self.input_name = frames, input_name
        self.index, self.end = 0, len(frames)

    def __len__(self) -> int:
        return len(self.frames)

    def set_range(self, start_index: int, end_index: int) -> None:
        self.index, self.end = start_index, min(end_index, len(self.frames))

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.index >= self.end:
            return None
        x = self.frames[self.index : self.index + 1].astype(np.float32) / 255.0
        self.index += 1
        return {self.input_name: x}

    def rewind(self) -> None:
        self.index, self.end = 0, len(self.frames)


def calibration_stride(n: int, most: int = CALIBRATION_STRIDE) -> int:
    """The largest divisor of ``n`` up to ``most`` (ONNX Runtime's strided calibration needs one)."""
    return max(d for d in range(1, min(n, most) + 1) if n % d == 0)


INT8_TARGETS = {
    "cpu": "uint8 activations (asymmetric), per-channel int8 weights: ONNX Runtime on x86 CPUs",
    "tensorrt": "int8 activations and weights, symmetric (zero point 0): TensorRT's explicit quantization (trtexec --int8)",
}


def quantize_onnx(float_path: Path, out_path: Path, frames: np.ndarray, target: str = "cpu") -> None:
    """ONNX Runtime static QDQ quantization of the float32 model at ``float_path`` into ``out_path``, calibrated on
    ``frames`` (uint8 ``[N, C, S, S]``); the statistics and decoding stay float (:func:`float_only_nodes`). ``target``:
    a key of :data:`INT8_TARGETS`."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quant_pre_process, quantize_static

    with tempfile.TemporaryDirectory() as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        quant_pre_process(str(float_path), str(prepared), skip_symbolic_shape=True)
        model = onnx.load(str(prepared))
        excluded = float_only_nodes(model)
        symmetric = target == "tensorrt"
        with _root_log_quiet():
            quantize_static(
                str(prepared),
                str(out_path),
                _Reader(frames, model.graph.input[0].name),
                quant_format=QuantFormat.QDQ,
                op_types_to_quantize=list(QUANTIZED_OPS),
                per_channel=True,
                reduce_range=not symmetric,  # 7-bit weights: no int16 saturation on CPUs without VNNI (module docstring)
                activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                nodes_to_exclude=excluded,
                calibrate_method=CalibrationMethod.MinMax,
                extra_options={
                    "ActivationSymmetric": symmetric,
                    "WeightSymmetric": True,
                    # TensorRT's explicit quantization: float weights through a Q/DQ pair, float biases
                    **({"AddQDQPairToWeight": True, "QuantizeBias": False} if symmetric else {}),
                    "CalibStridedMinMax": calibration_stride(len(frames)),  # bounded memory; the same global min / max
                },
            )


@contextlib.contextmanager
def _root_log_quiet() -> Iterator[None]:
    """ONNX Runtime's quantizer logs every bias it copies at INFO on the root logger (hundreds of lines for the
    golden-template model): the root logger keeps WARNING and above while it runs."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        root.setLevel(level)


def export_int8(  # noqa: PLR0913 - one keyword per export --int8 flag; data, max_images, images_root: calibration_sets'
    loaded: LoadedModel,
    out_path: str | os.PathLike[str],
    data: str | os.PathLike[str],
    imgsz: int | None = None,
    baseline: BaselineArg = None,
    max_images: int = CALIBRATION_IMAGES,
    images_root: str | None = None,
    layers: Sequence[str] = DEFAULT_LAYERS,
    target: str = "cpu",
    check: bool = True,
    accept_loss: bool = False,
) -> dict[str, Any]:
    """Export ``loaded`` as an int8 ONNX model (``<out>`` and ``<out stem>.meta.json``), calibrated on up to
    ``max_images`` frames of the COCO json ``data`` (training images; with their golden images for a golden-template
    model). The meta is the float export's, with ``"int8"`` describing the quantization and its calibration set.
    ``target``: ``cpu`` (ONNX Runtime) or ``tensorrt`` (symmetric, for ``trtexec --int8``; see :data:`INT8_TARGETS`).

    Up to :data:`~.int8_check.CHECK_FRAMES` other images of ``data`` are held back and checked (:mod:`.int8_check`: calls
    that disagree with float32's refuse the model with :class:`ExportError`, nothing written, as does an accuracy loss on
    their ground truth over the tolerances unless ``accept_loss``, then warned about; a json with none to hold back skips
    it, warned). ``check=False`` skips it for a model to be timed, not deployed (``benchmarks/bench_kinds``: score ties).

    Returns a report with the meta, the calibration frame count, ``check`` (the :class:`~.int8_check.Agreement`),
    ``accuracy`` (the :class:`~.int8_check.Accuracy`, None without ground truth) and ``stats_shift`` (the largest per-layer
    shift of the int8 statistics' means from the float model's on the calibration frames, in units of the baseline's
    spread; None without a baseline). :class:`ExportError` without ``onnxruntime``; ``ValueError`` naming ``data`` for a bad json."""
    if target not in INT8_TARGETS:
        raise ValueError(f"int8 target must be one of {', '.join(INT8_TARGETS)}, got {target!r}")
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise ExportError(f"{out_path}: int8 export needs onnxruntime (pip install '.[onnx]')") from exc
    imgsz = int(imgsz or loaded.config.data.imgsz)
    channels = int(getattr(loaded.model, "in_channels", 1))
    frames, held = calibration_sets(data, imgsz, channels, max_images, images_root, held_back=CHECK_FRAMES if check else 0)
    out_path = Path(out_path)
    with tempfile.TemporaryDirectory() as tmp:
        float_path = Path(tmp) / "float.onnx"
        report = export_onnx(loaded, float_path, imgsz=imgsz, baseline=baseline, layers=layers)
        quantized = Path(tmp) / "int8.onnx"
        quantize_onnx(float_path, quantized, frames, target)
        meta = dict(report["meta"])
        # the forward graph only: a siamese model's golden and frame graphs stay float32 ONNX exports (not quantized)
        meta["graphs"] = {"forward": meta["graphs"]["forward"]}
        checked = _checked(float_path, quantized, held, loaded.class_names, meta, out_path, accept_loss) if check else None
        agreement, accuracy = checked or (Agreement(0, 0, 0, 0), None)
        meta["int8"] = _int8_facts(target, data, len(frames), agreement, accuracy, ort.__version__)
        shift = _stats_shift(float_path, quantized, frames, meta.get("baseline"))
        data_bytes, meta = sign_onnx(quantized.read_bytes(), meta)
    facts = {"calibration_frames": len(frames), "check": agreement, "accuracy": accuracy, "stats_shift": shift}
    facts |= {"parity": None, "parity_skipped": "int8: scored by val instead"}
    return finish_export(out_path, data_bytes, meta, report["baseline_source"], meta_file=onnx_meta_path(out_path), **facts)


def _checked(  # noqa: PLR0913 - the two models, the held-back set, how to read calls, where it goes, whether a loss is accepted
    float_path: Path,
    int8_path: Path,
    held: HeldBack,
    class_names: Sequence[str],
    meta: dict[str, Any],
    out_path: Path,
    accept_loss: bool = False,
) -> tuple[Agreement, Accuracy | None]:
    """The int8 model's :class:`Agreement` with float32 on the held-back images (calls at ``meta``'s operating point) and
    both models' :class:`Accuracy` on their ground truth; :class:`ExportError` naming ``out_path`` when the calls
    disagree (:func:`~.int8_check.refusal`) or when int8 loses more than the tolerances (mAP@0.5, mAP@0.5:0.95, defects
    found at the operating point) and ``accept_loss`` is False; a warning when there were too few calls to judge, or for
    a loss accepted."""
    agreement, accuracy = held_back_check(float_path, int8_path, held, list(class_names), meta.get("operating_point"))
    if (reason := refusal(agreement, out_path)) is not None:
        raise ExportError(reason)
    if not len(held.frames):
        log.warning("int8 accuracy check skipped: --data has no image beyond those it calibrates on (--calib-images)")
    elif not agreement.conclusive:
        few = "int8 accuracy check: %d float32 calls on %d held-back frames, too few to judge"
        log.warning(few, agreement.float_calls, len(held.frames))
    if accuracy is not None and accuracy.losses() and not accept_loss:
        raise ExportError(
            f"{out_path}: not written: int8 loses accuracy against float32 over the tolerance on {accuracy.frames} held-back "
            f"images: {'; '.join(accuracy.losses())}; score it with val on your own held-out set, and export with "
            "--accept-loss to write it anyway"
        )
    if accuracy is not None and accuracy.losses():
        log.warning("%s: int8 loses accuracy against float32 %s: %s", out_path, accuracy.line(), "; ".join(accuracy.losses()))
    return agreement, accuracy


def _int8_facts(
    target: str, data: str | os.PathLike[str], frames: int, agreement: Agreement, accuracy: Accuracy | None, ort_version: str
) -> dict[str, Any]:
    """``meta["int8"]``: how the model was quantized, on what, and its accuracy check (``check.accuracy``: float32
    and int8 on the held-back images' ground truth, None without any)."""
    return {
        "method": f"onnxruntime static QDQ, MinMax calibration, 7-bit weights on cpu; {INT8_TARGETS[target]}",
        "target": target,
        "calibration": {"data": str(data), "frames": frames, "held_back": agreement.frames},
        "check": {**agreement.to_dict(), "accuracy": None if accuracy is None else accuracy.to_dict()},
        "float_nodes": "layer statistics and box decoding",
        "onnxruntime": ort_version,
    }


def embed_baseline(path: str | os.PathLike[str], baseline: dict[str, Any], source: str) -> dict[str, Any]:
    """Replace the drift baseline in the meta of the ONNX model at ``path`` (embedded and the ``.meta.json`` beside it),
    atomically, and sign the final model and meta again (the digest covers the new baseline: :mod:`.digest`);
    ``meta["int8"]["baseline"]`` records ``source``. Returns the new meta. Used by ``export --int8`` to carry a baseline
    calibrated through the int8 model itself (see the module docstring)."""
    path = Path(path)
    _, texts = split_onnx_meta(path.read_bytes())
    if not texts:
        raise ValueError(f"{path}: ONNX model without {META_FILE}")
    meta = json.loads(texts[-1])
    meta["baseline"] = baseline
    meta.setdefault("int8", {})["baseline"] = source
    data, meta = sign_onnx(path.read_bytes(), meta)
    atomic_write_bytes(path, data)
    atomic_write_json(onnx_meta_path(path), meta)
    return meta


def _stats_shift(float_path: Path, int8_path: Path, frames: np.ndarray, baseline: dict[str, Any] | None, n: int = 16) -> float | None:
    """Largest ``|mean_int8 - mean_float| / spread`` over layers and statistics (mean, std) of ``n`` calibration frames,
    ``spread`` the baseline's per-layer standard deviation of that statistic (None without a baseline)."""
    if baseline is None:
        return None
    import onnxruntime as ort

    from defect_detector.monitor.baseline import Baseline

    scale = Baseline.from_dict(baseline).std  # [L, 2]
    x = frames[evenly_spaced(len(frames), n)].astype(np.float32) / 255.0
    outs = []
    for path in (float_path, int8_path):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        outs.append(np.concatenate([session.run(["stats"], {session.get_inputs()[0].name: x[i : i + 1]})[0] for i in range(len(x))]))
    shift = np.abs(outs[1] - outs[0]).mean(0) / np.maximum(np.asarray(scale, dtype=np.float64), 1e-12)
    return float(shift.max())
