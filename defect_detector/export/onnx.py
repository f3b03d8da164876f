"""ONNX export of :class:`DeployModel` (opset :data:`ONNX_OPSET`), with its meta embedded and beside the model."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import logging
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from defect_detector.core.constants import DEFAULT_LAYERS
from defect_detector.export.baseline import BaselineArg
from defect_detector.export.deploy_model import (
    GOLDEN_FEATURES,
    META_FILE,
    DeployModel,
    ExportError,
    FrameGraph,
    GoldenGraph,
)
from defect_detector.export.digest import ONNX_COVERS, onnx_digest, signed
from defect_detector.export.exporter import finish_export, start_export
from defect_detector.export.parity import cached_outputs, check_parity, max_diffs, parity_inputs, reference_outputs
from defect_detector.export.torchscript import TRACE_BATCH
from defect_detector.model.checkpoint import LoadedModel

log = logging.getLogger("defect_detector.export")

ONNX_OPSET = 17


def export_onnx(
    loaded: LoadedModel,
    out_path: str | os.PathLike[str],
    imgsz: int | None = None,
    baseline: BaselineArg = None,
    check_images: Sequence[np.ndarray] | None = None,
    layers: Sequence[str] = DEFAULT_LAYERS,
) -> dict[str, Any]:
    """Export ``loaded`` as ONNX (opset :data:`ONNX_OPSET`), input ``images`` float32 ``[B, C, S, S]`` (C: the
    model's channels, meta ``channels``) and outputs ``pred``, ``stats``.

    Uses the TorchScript-based exporter (``dynamo=False``): it traces the same :class:`DeployModel`
    (hooks included) and needs the ``onnx`` package (torch 2.14's exporter imports it; :class:`ExportError`
    when it is missing) but not ``onnxscript``. The batch axis is dynamic. The meta is embedded as
    ``metadata_props["meta.json"]`` and also written beside the model as ``<out>.meta.json``. ``baseline``
    as for :func:`export_torchscript` (a file or dict, default the checkpoint's; checked before export).
    Parity with the eager model is checked with ``onnxruntime`` when it is importable (skipped with a log
    message otherwise). Float32 only: use TensorRT's ``--fp16`` on the ONNX model for half precision.

    A siamese model's ``golden`` and ``frame`` graphs (meta ``graphs``, :func:`~.deploy_model.graphs_meta`) go beside
    the model as ``<out stem>.golden.onnx`` (input ``reference``, outputs ``c3``, ``c4``, ``stats``) and ``<out stem>.frame.onnx``
    (inputs ``image``, ``c3``, ``c4``, the features of batch 1 or B; outputs ``pred``, ``stats``), plain ONNX models
    without meta: the model's meta names each file (``graphs.<name>.file``, relative to the model) with its SHA-256
    (``graphs.<name>.sha256``), which the meta's digest covers. Their parity is checked with the model's.
    """
    start = start_export(loaded, imgsz, baseline, layers)
    deploy = start.deploy
    if importlib.util.find_spec("onnx") is None:
        raise ExportError(f"{out_path}: ONNX export needs the onnx package (pip install '.[onnx]')")
    out_path = Path(out_path)
    meta = start.meta()
    meta["onnx_opset"] = ONNX_OPSET
    siblings = _golden_graphs(deploy, out_path)
    for name, data in siblings.items():
        meta["graphs"][name].update({"file": golden_graph_path(out_path, name).name, "sha256": hashlib.sha256(data).hexdigest()})
    data, meta = sign_onnx(_onnx_bytes(deploy, (_example(deploy, deploy.in_channels),), ["images"]), meta)

    facts = {"opset": ONNX_OPSET, "parity": None, "graphs": {name: str(golden_graph_path(out_path, name)) for name in siblings}}
    facts |= _onnx_parity(data, loaded, deploy, check_images, siblings)
    files = {golden_graph_path(out_path, name): graph for name, graph in siblings.items()}
    return finish_export(out_path, data, meta, start.baseline_source, files, onnx_meta_path(out_path), **facts)


def golden_graph_path(onnx_path: str | os.PathLike[str], name: str) -> Path:
    """``model.onnx`` -> ``model.<name>.onnx``: where :func:`export_onnx` writes a siamese model's ``golden`` and
    ``frame`` graphs."""
    path = Path(onnx_path)
    return path.with_name(f"{path.stem}.{name}{path.suffix}")


def _example(deploy: DeployModel, planes: int, batch: int = TRACE_BATCH) -> torch.Tensor:
    return torch.rand(batch, planes, deploy.imgsz, deploy.imgsz)


def _golden_graphs(deploy: DeployModel, out_path: Path) -> dict[str, bytes]:
    """``{"golden": bytes, "frame": bytes}``: the ONNX models of a siamese ``deploy``'s :class:`GoldenGraph` and
    :class:`FrameGraph` (features of any batch, 1 broadcast); ``{}`` for any other model."""
    if not deploy.caches_golden:
        return {}
    with torch.no_grad():
        c3, c4 = (f.contiguous() for f in deploy.golden(_example(deploy, 1, 1))[: len(GOLDEN_FEATURES)])
    golden = _onnx_bytes(GoldenGraph(deploy), (_example(deploy, 1),), ["reference"], ["c3", "c4", "stats"])
    frame = _onnx_bytes(FrameGraph(deploy), (_example(deploy, 1), c3, c4), ["image", "c3", "c4"], golden_batch=("c3", "c4"))
    return {"golden": golden, "frame": frame}


def _onnx_bytes(
    module: torch.nn.Module,
    example: tuple[torch.Tensor, ...],
    input_names: Sequence[str],
    output_names: Sequence[str] = ("pred", "stats"),
    golden_batch: Sequence[str] = (),
) -> bytes:
    """The ONNX model of ``module`` (float32 on the CPU: a :class:`DeployModel` or one of its graphs) traced on
    ``example``, with the batch axis of every input and output dynamic (``golden_batch``: inputs whose batch is its own,
    ``golden_batch``, 1 or the frames')."""
    buffer = io.BytesIO()
    axes = {name: {0: "golden_batch" if name in golden_batch else "batch"} for name in (*input_names, *output_names)}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*legacy TorchScript-based ONNX export")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
        # the layer statistics read layer shapes as Python ints: constants for the exported imgsz, as intended
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning, module=r"defect_detector\.monitor\.hooks")
        torch.onnx.export(
            module,
            example,
            buffer,
            input_names=list(input_names),
            output_names=list(output_names),
            opset_version=ONNX_OPSET,
            dynamic_axes=axes,
            dynamo=False,
        )
    return buffer.getvalue()


def _onnx_parity(
    data: bytes, loaded: LoadedModel, deploy: DeployModel, check_images: Sequence[np.ndarray] | None, siblings: dict[str, bytes]
) -> dict[str, Any]:
    """The report's parity entries for the ONNX model ``data`` (and a siamese model's ``golden`` and ``frame`` graphs
    ``siblings``, checked alike; ``parity`` is the worst): ``parity`` (max abs diffs from the unfused float32 eager
    model, checked) and ``parity_images`` with ``onnxruntime``; ``parity_skipped`` (logged) without it."""
    try:
        import onnxruntime as ort
    except ImportError:
        log.warning("onnxruntime is not installed: ONNX parity check skipped (pip install onnxruntime)")
        return {"parity_skipped": "onnxruntime not installed"}
    x = parity_inputs(deploy.imgsz, check_images, channels=deploy.in_channels)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = [torch.from_numpy(a) for a in session.run(["pred", "stats"], {"images": x.numpy()})]
    want = reference_outputs(loaded, deploy.imgsz, deploy.layer_names, x)
    diffs = max_diffs(got, want)
    check_parity(diffs, False, "ONNX")
    if siblings:
        golden, frame = (OnnxGraph(ort.InferenceSession(siblings[n], providers=["CPUExecutionProvider"])) for n in ("golden", "frame"))
        cached = max_diffs(cached_outputs(golden, frame, x), want)
        check_parity(cached, False, "ONNX golden + frame graphs")
        diffs = {k: max(v, cached[k]) for k, v in diffs.items()}
    log.debug(
        "ONNX parity on %d images (onnxruntime %s): max abs diff pred %.3g, stats %.3g",
        len(x),
        ort.__version__,
        diffs["pred"],
        diffs["stats"],
    )
    return {"parity": diffs, "parity_images": len(x)}


class OnnxGraph:
    """An ONNX Runtime session as a callable: tensors (any device, in the session's input order) -> a tuple of float32
    CPU tensors (the session's outputs in order)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.input_names = [i.name for i in session.get_inputs()]
        self.output_names = [o.name for o in session.get_outputs()]

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        feed = {name: x.detach().to("cpu", torch.float32).contiguous().numpy() for name, x in zip(self.input_names, inputs)}
        return tuple(torch.from_numpy(a) for a in self.session.run(self.output_names, feed))


def onnx_meta_path(onnx_path: str | os.PathLike[str]) -> Path:
    """``model.onnx`` -> ``model.meta.json`` (the sidecar meta written by :func:`export_onnx`)."""
    path = Path(onnx_path)
    return path.with_name(path.stem + ".meta.json")


_METADATA_PROPS = 14  # ModelProto.metadata_props: repeated StringStringEntryProto {key = 1, value = 2}
_LENGTH_DELIMITED = 2


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated or corrupt protobuf (a varint runs past the end)")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _fields(data: bytes) -> list[tuple[int, int, int, int]]:
    """The top-level fields of protobuf ``data``: ``(number, wire type, start, end)``, ``start:end`` the whole field
    (tag included); the payload of a length-delimited field is its last ``length`` bytes. ``ValueError`` for bytes
    that are not a protobuf message (a truncated file)."""
    out, pos = [], 0
    while pos < len(data):
        start = pos
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = _varint(data, pos)
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        elif wire == _LENGTH_DELIMITED:
            length, pos = _varint(data, pos)
            pos += length
        else:
            raise ValueError(f"truncated or corrupt protobuf (wire type {wire})")
        if pos > len(data) or number == 0:
            raise ValueError("truncated or corrupt protobuf (a field runs past the end)")
        out.append((number, wire, start, pos))
    return out


def _entry(field: bytes) -> dict[int, bytes]:
    """The string fields of one serialized ``StringStringEntryProto`` (its tag and length included in ``field``)."""
    _, pos = _varint(field, 0)
    _, pos = _varint(field, pos)
    body = field[pos:]
    out = {}
    for number, wire, start, end in _fields(body):
        if wire == _LENGTH_DELIMITED:
            _, at = _varint(body, start)
            length, at = _varint(body, at)
            out[number] = body[end - length : end]
    return out


def split_onnx_meta(data: bytes) -> tuple[bytes, list[str]]:
    """``(the ONNX model bytes without their metadata_props entries "meta.json", the texts of those entries)``, read
    from the protobuf wire format (no onnx package needed). The first part is what the digest covers
    (:mod:`.digest`). ``ValueError`` for bytes that are not a protobuf message (a truncated file)."""
    kept, metas = [], []
    for number, wire, start, end in _fields(data):
        if number == _METADATA_PROPS and wire == _LENGTH_DELIMITED:
            entry = _entry(data[start:end])
            if entry.get(1) == META_FILE.encode():
                metas.append(entry.get(2, b"").decode("utf-8", "replace"))
                continue
        kept.append(data[start:end])
    return b"".join(kept), metas


def _meta_entry(text: str) -> bytes:
    """The serialized ``metadata_props`` field ``{key: "meta.json", value: text}``."""
    key, value = META_FILE.encode(), text.encode("utf-8")
    body = b"\x0a" + _encode_varint(len(key)) + key + b"\x12" + _encode_varint(len(value)) + value
    return _encode_varint(_METADATA_PROPS << 3 | _LENGTH_DELIMITED) + _encode_varint(len(body)) + body


def sign_onnx(data: bytes, meta: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    """ONNX model ``data`` with ``meta`` and its digest (:func:`~defect_detector.export.digest.onnx_digest` over the
    model without any earlier ``meta.json``) as the ``metadata_props`` entry ``meta.json``; returns the bytes and the
    signed meta (what the sidecar holds)."""
    stripped, _ = split_onnx_meta(data)
    sealed = signed(meta, onnx_digest(stripped, meta), ONNX_COVERS)
    return stripped + _meta_entry(json.dumps(sealed)), sealed
