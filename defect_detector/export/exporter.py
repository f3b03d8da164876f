"""One export skeleton, one writer per format (as ultralytics' ``Exporter`` dispatches on the format).

Every format runs the same three steps, and only the middle one is its own:

1. :func:`start_export`: the input size, the :class:`~.deploy_model.DeployModel` graph (detector, box decoding, drift
   statistics) and the drift baseline to embed, checked against the model (``export/baseline.py``);
2. the format's writer: trace, compile or convert the graph, fill the meta (:meth:`ExportStart.meta`, the checkpoint's
   facts plus the format's own), sign it and check the result against the eager model (``export/parity.py``);
3. :func:`finish_export`: write the artifact and its companion files atomically (``core/io.py``: the companions first,
   the model last, so a crash never leaves a model whose companions are missing) and report what was written.

:data:`FORMATS` names the writers; :func:`export_model` is the one entry point that dispatches to them (``export``
CLI). A new format is its module (a writer between these two steps) and one line in :data:`FORMATS`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from defect_detector.core.constants import DEFAULT_LAYERS
from defect_detector.core.io import atomic_write_bytes, atomic_write_json
from defect_detector.export.baseline import BaselineArg, export_baseline
from defect_detector.export.deploy_model import DeployModel, checkpoint_meta
from defect_detector.model.checkpoint import LoadedModel


@dataclass(frozen=True)
class ExportStart:
    """What every format starts from: the checkpoint ``loaded``, the square input size ``imgsz`` (px), the ``deploy``
    graph (float32, on the export's device), the drift baseline ``embedded`` in the meta (``Baseline.to_dict()`` form,
    None without one) and where it came from (``baseline_source``: ``checkpoint``, ``file PATH``, ``argument``,
    ``none``)."""

    loaded: LoadedModel
    imgsz: int
    deploy: DeployModel = field(repr=False)
    embedded: dict[str, Any] | None = field(repr=False)
    baseline_source: str

    def meta(self, **facts: Any) -> dict[str, Any]:
        """The artifact's ``meta.json`` (:func:`~.deploy_model.checkpoint_meta`), ``facts`` (``half``, ``optimize``,
        ``cpu_only``) as the format gives them."""
        return checkpoint_meta(self.loaded, self.deploy, self.embedded, **facts)


def start_export(
    loaded: LoadedModel,
    imgsz: int | None = None,
    baseline: BaselineArg = None,
    layers: Sequence[str] = DEFAULT_LAYERS,
    device: torch.device | str = "cpu",
    cpu_fusion: bool = False,
) -> ExportStart:
    """Step 1 (module docstring): ``imgsz`` (None: the training config's), the deploy graph of ``loaded`` monitoring
    ``layers`` on ``device`` (``cpu_fusion``: oneDNN conv + SiLU kernels, TorchScript on the CPU only) and ``baseline``
    (a file, a dict, or None for the checkpoint's) checked against it: ``BaselineError`` / ``ExportError`` in one line
    before anything is traced."""
    size = int(imgsz or loaded.config.data.imgsz)
    deploy = DeployModel(loaded.model, size, layers, cpu_fusion=cpu_fusion).float().to(device)
    embedded, source = export_baseline(loaded, baseline, deploy.layer_names, size)
    return ExportStart(loaded, size, deploy, embedded, source)


def finish_export(  # noqa: PLR0913 - what an artifact is written as, each named
    out_path: str | os.PathLike[str],
    data: bytes,
    meta: dict[str, Any],
    baseline_source: str,
    files: dict[Path, bytes] | None = None,
    meta_file: Path | None = None,
    **facts: Any,
) -> dict[str, Any]:
    """Step 3 (module docstring): the companion ``files`` written, then ``data`` at ``out_path``, then ``meta`` beside it
    at ``meta_file`` when the format keeps it outside the model (ONNX), each atomically; the report ``{"path",
    "bytes", "meta", "baseline_source", **facts}`` (``baseline_source``: :attr:`ExportStart.baseline_source`; ``facts``:
    the format's own, its parity diffs among them)."""
    for path, content in (files or {}).items():
        atomic_write_bytes(path, content)
    out_path = Path(out_path)
    atomic_write_bytes(out_path, data)
    if meta_file is not None:
        atomic_write_json(meta_file, meta)
    return {"path": str(out_path), "bytes": len(data), "meta": meta, "baseline_source": baseline_source, **facts}


FORMATS: dict[str, str] = {
    "torchscript": "defect_detector.export.torchscript:export_torchscript",
    "pt2": "defect_detector.export.pt2:export_pt2",
    "onnx": "defect_detector.export.onnx:export_onnx",
    "int8": "defect_detector.export.int8:export_int8",
    "triton": "defect_detector.export.triton:export_triton",
}
"""Each format's writer (``module:function``), imported when it is asked for (each writer's module imports this
skeleton, so it cannot import them first)."""


def writer(fmt: str) -> Callable[..., dict[str, Any]]:
    """The writer of ``fmt`` (:data:`FORMATS`); ``ValueError`` in one line for an unknown format."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}: one of {', '.join(FORMATS)}")
    module, name = FORMATS[fmt].split(":")
    return getattr(importlib.import_module(module), name)


def export_model(loaded: LoadedModel, fmt: str, out: str | os.PathLike[str], **options: Any) -> dict[str, Any]:
    """Export ``loaded`` as ``fmt`` (:data:`FORMATS`) to ``out`` (a Triton repository's folder for ``triton``) with the
    writer's keyword ``options``; its report (:func:`finish_export`)."""
    return writer(fmt)(loaded, out, **options)


__all__ = ["FORMATS", "ExportStart", "export_model", "finish_export", "start_export", "writer"]
