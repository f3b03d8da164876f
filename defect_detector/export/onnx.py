"""ONNX export of :class:`DeployModel` (opset :data:`ONNX_OPSET`), with its meta embedded and beside the model."""

from __future__ import annotations

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
from defect_detector.core.io import atomic_write_bytes, atomic_write_json
from defect_detector.export.baseline import BaselineArg, export_baseline
from defect_detector.export.deploy_model import META_FILE, DeployModel, ExportError, checkpoint_meta
from defect_detector.export.parity import check_parity, max_diffs, parity_inputs, reference_outputs
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
    """
    imgsz = int(imgsz or loaded.config.data.imgsz)
    deploy = DeployModel(loaded.model, imgsz, layers).float().cpu()
    embedded, baseline_source = export_baseline(loaded, baseline, deploy.layer_names, imgsz)
    if importlib.util.find_spec("onnx") is None:
        raise ExportError(f"{out_path}: ONNX export needs the onnx package (pip install '.[onnx]')")
    meta = checkpoint_meta(loaded, deploy, embedded)
    meta["onnx_opset"] = ONNX_OPSET
    data = _with_onnx_metadata(_onnx_bytes(deploy), meta)

    report: dict[str, Any] = {
        "path": str(out_path),
        "bytes": len(data),
        "opset": ONNX_OPSET,
        "meta": meta,
        "parity": None,
        "baseline_source": baseline_source,
    }
    report.update(_onnx_parity(data, loaded, deploy, check_images))
    out_path = Path(out_path)
    atomic_write_bytes(out_path, data)
    atomic_write_json(onnx_meta_path(out_path), meta)
    return report


def _onnx_bytes(deploy: DeployModel) -> bytes:
    """The ONNX model of ``deploy`` (float32 on the CPU), traced on a random ``[TRACE_BATCH, C, S, S]`` batch, with the
    batch axis of ``images``, ``pred`` and ``stats`` dynamic."""
    buffer = io.BytesIO()
    example = torch.rand(TRACE_BATCH, deploy.in_channels, deploy.imgsz, deploy.imgsz)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*legacy TorchScript-based ONNX export")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
        # the layer statistics read layer shapes as Python ints: constants for the exported imgsz, as intended
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning, module=r"defect_detector\.monitor\.hooks")
        torch.onnx.export(
            deploy,
            (example,),
            buffer,
            input_names=["images"],
            output_names=["pred", "stats"],
            opset_version=ONNX_OPSET,
            dynamic_axes={"images": {0: "batch"}, "pred": {0: "batch"}, "stats": {0: "batch"}},
            dynamo=False,
        )
    return buffer.getvalue()


def _onnx_parity(data: bytes, loaded: LoadedModel, deploy: DeployModel, check_images: Sequence[np.ndarray] | None) -> dict[str, Any]:
    """The report's parity entries for the ONNX model ``data``: ``parity`` (max abs diffs from the unfused float32 eager
    model, checked) and ``parity_images`` with ``onnxruntime``; ``parity_skipped`` (logged) without it."""
    try:
        import onnxruntime as ort
    except ImportError:
        log.warning("onnxruntime is not installed: ONNX parity check skipped (pip install onnxruntime)")
        return {"parity_skipped": "onnxruntime not installed"}
    x = parity_inputs(deploy.imgsz, check_images, channels=deploy.in_channels)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = [torch.from_numpy(a) for a in session.run(["pred", "stats"], {"images": x.numpy()})]
    diffs = max_diffs(got, reference_outputs(loaded, deploy.imgsz, deploy.layer_names, x))
    check_parity(diffs, False, "ONNX")
    log.debug(
        "ONNX parity on %d images (onnxruntime %s): max abs diff pred %.3g, stats %.3g",
        len(x),
        ort.__version__,
        diffs["pred"],
        diffs["stats"],
    )
    return {"parity": diffs, "parity_images": len(x)}


def onnx_meta_path(onnx_path: str | os.PathLike[str]) -> Path:
    """``model.onnx`` -> ``model.meta.json`` (the sidecar meta written by :func:`export_onnx`)."""
    path = Path(onnx_path)
    return path.with_name(path.stem + ".meta.json")


def _with_onnx_metadata(data: bytes, meta: dict[str, Any]) -> bytes:
    import onnx

    model = onnx.load_from_string(data)
    entry = model.metadata_props.add()
    entry.key, entry.value = META_FILE, json.dumps(meta)
    return model.SerializeToString()
