"""The cached golden path of a siamese golden-template model, for every artifact kind: its ``golden`` graph (the golden
image's trunk features, once per golden image) and its ``frame`` graph (a frame against those features: one trunk pass).

Where each kind keeps them (meta ``graphs``, ``export/deploy_model.py`` ``graphs_meta``): a checkpoint's
:class:`~defect_detector.export.DeployModel` (eager or traced at load) and a TorchScript artifact have the methods
``golden`` and ``frame``; a ``.pt2`` package the AOTInductor models ``golden`` and ``frame`` (whose frame graph takes the
features at the frames' batch: batch-1 features are expanded here); an ONNX float32 model the files
``<name>.golden.onnx`` and ``<name>.frame.onnx`` beside it, checked against the SHA-256 its meta records. An int8 ONNX
model, a non-siamese model and an artifact exported before these graphs existed have none: :func:`load_golden_graphs`
returns None and the runtime serves only the two-channel ``forward``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from defect_detector.export import GOLDEN_FEATURES, GOLDEN_GRAPHS, DeployModel, ExportError
from defect_detector.export.onnx import OnnxGraph
from defect_detector.export.parity import check_parity, max_diffs
from defect_detector.export.pt2 import load_pt2_model
from defect_detector.inspect.artifacts import onnx_session

log = logging.getLogger("defect_detector.inspect")

LOCATION_KEYS = {"torchscript": "method", "pt2": "model_name", "onnx": "file"}
"""The meta ``graphs.<name>`` key that says where an artifact of each kind keeps a graph."""


class GoldenGraphs:
    """A model's two cached-path graphs as callables on tensors of the runtime's device and dtype.

    :meth:`golden_pass` ``(reference [B, 1, S, S]) -> (feature tensors, the golden image's drift statistics when its
    graph returns them)``; ``frame(image [B, 1, S, S], features) -> (pred [B, A, 4 + C], stats [B, L, 2])``, the
    features of batch 1 (broadcast) or B. ``same_batch``: the frame graph takes features at the frames' batch only
    (``.pt2``), so batch-1 features are expanded (contiguous) before the call.
    """

    def __init__(
        self, golden: Callable[..., Sequence[torch.Tensor]], frame: Callable[..., Sequence[torch.Tensor]], same_batch: bool
    ) -> None:
        self._golden = golden
        self._frame = frame
        self.same_batch = same_batch

    def golden_pass(self, reference: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
        """``(features, stats)``: the :data:`GOLDEN_FEATURES` tensors and float32 ``[B, L, 2]``, the drift statistics of
        the golden image paired with itself, or None when the graph gives none (exported before v0.17) or cannot (NaN:
        a monitored layer outside the trunk, ``DeployModel.golden``)."""
        outputs = tuple(self._golden(reference))
        features = outputs[: len(GOLDEN_FEATURES)]
        features = tuple(f.contiguous() for f in features) if self.same_batch else features
        stats = outputs[len(GOLDEN_FEATURES)] if len(outputs) > len(GOLDEN_FEATURES) else None
        if stats is not None and not bool(torch.isfinite(stats).all()):
            stats = None
        return features, stats

    def frame(self, image: torch.Tensor, features: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        if self.same_batch:
            features = [f.expand(len(image), *f.shape[1:]).contiguous() if len(f) != len(image) else f.contiguous() for f in features]
        pred, stats = self._frame(image, *features)
        return pred, stats


def module_graphs(module: Any) -> GoldenGraphs | None:
    """The ``golden`` and ``frame`` methods of a siamese :class:`DeployModel` or of a TorchScript module traced from one
    (:func:`~defect_detector.export.trace_deploy_model`); None when ``module`` has none."""
    if isinstance(module, DeployModel):
        return GoldenGraphs(module.golden, module.frame, same_batch=False) if module.caches_golden else None
    if all(hasattr(module, name) for name in GOLDEN_GRAPHS):
        return GoldenGraphs(module.golden, module.frame, same_batch=False)
    return None


def load_golden_graphs(
    kind: str, path: Path, model: Any, meta: dict[str, Any], device: torch.device, threads: int | None = None
) -> GoldenGraphs | None:
    """The cached-path graphs of the loaded artifact (``kind``: ``checkpoint``, ``torchscript``, ``pt2`` or ``onnx``;
    ``model`` its loaded forward), or None when it has none (see the module docstring). ``ValueError`` naming ``path``
    when the meta names graphs the artifact cannot give: a missing TorchScript method, a ``.pt2`` model that does not
    load, an ONNX graph file whose SHA-256 is not the one recorded (a file from another export). A missing ONNX graph
    file (the model copied alone) is logged and the runtime serves ``forward`` only."""
    if kind == "checkpoint":
        return module_graphs(model)
    graphs = meta.get("graphs") or {}
    key = LOCATION_KEYS.get(kind)
    entries = [graphs.get(name) for name in GOLDEN_GRAPHS]
    if key is None or not all(isinstance(e, dict) and isinstance(e.get(key), str) for e in entries):
        return None
    if kind == "torchscript":
        found = module_graphs(model)
        if found is None:
            raise ValueError(f"{path}: meta.json graphs name the methods golden and frame, which the module lacks; export it again")
        return found
    if kind == "pt2":
        golden, frame = (load_pt2_model(path, device, str(e[key])) for e in entries)
        return GoldenGraphs(golden, frame, same_batch=True)
    return _onnx_graphs(path, entries, threads)


def _onnx_graphs(path: Path, entries: list[dict[str, Any]], threads: int | None) -> GoldenGraphs | None:
    """ONNX Runtime sessions of the ``golden`` and ``frame`` files beside the model at ``path`` (``entries``: their meta)."""
    files = [path.parent / Path(str(e["file"])).name for e in entries]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        log.warning("%s: %s not found beside it: no cached golden path (copy them with the model)", path, ", ".join(missing))
        return None
    sessions = []
    for file, entry in zip(files, entries):
        data = file.read_bytes()
        if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
            raise ValueError(f"{file}: not the graph exported with {path.name} (SHA-256 differs from its meta); export the model again")
        sessions.append(OnnxGraph(onnx_session(data, file, threads)))
    return GoldenGraphs(sessions[0], sessions[1], same_batch=False)


def check_golden_graphs(runtime: Any) -> None:
    """Run ``runtime``'s cached path once on a seeded random pair ``[1, 2, S, S]`` and compare it with its ``forward``
    (the parity tolerances of :mod:`~defect_detector.export.parity`, float16 ones for a float16 model): ``ValueError``
    naming the artifact when the graphs do not fit it (another model's, or edited). Nothing without a cached path."""
    if not runtime.caches_golden:
        return
    generator = torch.Generator().manual_seed(0)
    pair = torch.rand(1, 2, runtime.imgsz, runtime.imgsz, generator=generator).to(runtime.device, runtime.dtype)
    try:
        with torch.inference_mode():
            want = runtime.model(pair)
        got = runtime.infer_cached(pair[:, :1], runtime.golden_features(pair[:, 1:2]))
        check_parity(max_diffs(got, want), runtime.dtype == torch.float16, "golden + frame graphs against forward")
    except (RuntimeError, ExportError, TypeError) as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        raise ValueError(f"{runtime.path}: the golden and frame graphs do not reproduce forward: {lines[-1] if lines else exc!r}") from exc
