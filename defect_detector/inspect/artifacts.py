"""Exported artifacts read into a model callable and their ``meta.json``: TorchScript, AOTInductor ``.pt2``, ONNX
(float32, and the int8 ``export --int8`` writes).

Every loader returns ``(model, meta text, device)``: ``model(x)`` takes ``[B, C, S, S]`` (meta ``channels`` and
``imgsz``; float32, or float16 for a ``--half`` TorchScript) on ``device`` and returns ``(pred float32 [B, A, 4 + C],
stats float32 [B, L, 2])`` (a tuple or list), whatever the kind. :class:`~defect_detector.inspect.runtime.Runtime`
checks the meta (``export/meta.py``) and the outputs the same way for all of them.
"""

from __future__ import annotations

import json
import logging
import os
import zipfile
from pathlib import Path
from typing import Any

import torch

from defect_detector.export import META_FILE, quiet_jit
from defect_detector.export.digest import check_digest, check_recorded, onnx_digest
from defect_detector.export.meta import parse_meta
from defect_detector.export.onnx import onnx_meta_path, split_onnx_meta
from defect_detector.export.pt2 import check_pt2, is_pt2_package, load_pt2, read_pt2_metadata
from defect_detector.model.checkpoint import is_torchscript_archive

log = logging.getLogger("defect_detector.inspect")

ONNX_SUFFIX = ".onnx"


def artifact_kind(path: str | os.PathLike[str]) -> str:
    """What ``path`` holds: ``"pt2"`` (AOTInductor package), ``"onnx"`` (by its ``.onnx`` suffix: ONNX files carry no
    magic number), ``"torchscript"`` (a ``torch.jit.save`` archive) or ``"checkpoint"`` (anything else: a training
    checkpoint, or a file that ``load_checkpoint`` will refuse with one line). ``ValueError`` naming ``path`` for a zip
    that cannot be read whose bytes show a ``.pt2`` package or a TorchScript archive: "truncated or corrupt"."""
    if Path(path).suffix.lower() == ONNX_SUFFIX:
        return "onnx"
    if is_pt2_package(path):
        return "pt2"
    if is_torchscript_archive(path):
        return "torchscript"
    _refuse_broken_archive(Path(path))
    return "checkpoint"


def _refuse_broken_archive(path: Path) -> None:
    """``ValueError`` for a zip (``PK`` magic) that ``zipfile`` cannot open (a copy cut short, a disk error) whose
    member names show a ``.pt2`` package (``/aotinductor/``) or a TorchScript archive (``/code/``); anything else is
    left to ``load_checkpoint``."""
    try:
        with path.open("rb") as fh:
            if fh.read(4) != b"PK\x03\x04":
                return
            zipfile.ZipFile(fh).close()
            return
    except zipfile.BadZipFile as exc:
        why = str(exc)
    except OSError:
        return
    data = path.read_bytes()
    kind = ".pt2" if b"/aotinductor/" in data else "TorchScript" if b"/code/" in data else None
    if kind is not None:
        raise ValueError(f"{path}: truncated or corrupt {kind} file ({why}; {path.stat().st_size} bytes); copy or export it again")


def archive_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``meta.json`` of a TorchScript archive read straight from the zip (no model load); ``{}`` when absent or unreadable."""
    try:
        with zipfile.ZipFile(path) as archive:
            name = next((n for n in archive.namelist() if n.endswith(f"/extra/{META_FILE}")), None)
            meta = json.loads(archive.read(name)) if name else {}
            return meta if isinstance(meta, dict) else {}
    except (zipfile.BadZipFile, OSError, ValueError):
        return {}


def cpu_fallback(path: Path, device: torch.device, explicit_device: bool, why: str, fix: str) -> torch.device:
    """The device a CPU-only artifact runs on: the CPU. ``ValueError`` when another device was asked for explicitly,
    else a warning that names ``why`` it is CPU-only and the ``fix``."""
    if device.type == "cpu":
        return device
    if explicit_device:
        raise ValueError(f"{path}: {why}; {fix} to run on {device}")
    log.warning("%s: %s, running on the CPU; %s for %s", path, why, fix, device)
    return torch.device("cpu")


def read_torchscript(path: Path, device: torch.device, explicit_device: bool) -> tuple[torch.jit.ScriptModule, str, torch.device]:
    """``torch.jit.load`` onto ``device`` (the CPU for a ``cpu_only`` export) with its ``meta.json`` text.

    torch 2.14 marks ``torch.jit.load`` deprecated with a FutureWarning on every call; it is filtered here
    (:func:`quiet_jit`) on purpose: TorchScript is the artifact for Jetson and older torch, and ``.pt2`` the default
    export for a recent one. ``ValueError`` naming ``path`` when the archive or its meta is missing."""
    if archive_meta(path).get("cpu_only"):
        device = cpu_fallback(
            path, device, explicit_device, "exported with CPU-only (oneDNN) kernels", "export with --portable (or --half)"
        )
    extra = {META_FILE: ""}
    try:
        with quiet_jit():
            module = torch.jit.load(str(path), map_location=device, _extra_files=extra)
    except RuntimeError as exc:
        raise ValueError(f"{path}: not a loadable TorchScript archive: {exc}") from exc
    if not extra[META_FILE]:
        raise ValueError(f"{path}: TorchScript archive without {META_FILE}; export it with `defect-detector export`")
    module.eval()
    return module, extra[META_FILE], device


def read_pt2(path: Path, device: torch.device, explicit_device: bool) -> tuple[Any, str, torch.device]:
    """``aoti_load_package`` of an AOTInductor ``.pt2`` on the device kind it was compiled for (AOTInductor metadata
    ``AOTI_DEVICE_KEY``), with its ``meta.json`` text. Loading a package runs its compiled code, so its ``meta.json`` is
    read from the zip and checked first, nothing of it loaded: its keys (``parse_meta``), the digest of the package and
    the input size it was compiled for (:func:`verify_artifact`: an edited meta, a replaced library, another input
    size). ``ValueError`` naming ``path`` for any of those, a package without ``meta.json``, one compiled for CUDA on a
    machine without it, or one this torch cannot load."""
    text, aoti = read_pt2_metadata(path)
    if not text:
        raise ValueError(f"{path}: .pt2 package without {META_FILE}; export it with `defect-detector export --format pt2`")
    meta = parse_meta(path, text)
    verify_artifact(path, "pt2", meta)
    compiled_for = aoti.get("AOTI_DEVICE_KEY", meta.get("aoti_device", "cpu"))
    if compiled_for == "cpu":
        device = cpu_fallback(path, device, explicit_device, "compiled for the CPU", "export it again on a CUDA machine")
    elif not torch.cuda.is_available():
        raise ValueError(f"{path}: compiled for {compiled_for}, which this machine lacks; export it again here (or --format torchscript)")
    elif device.type != "cuda":
        device = torch.device("cuda")
    model, _ = load_pt2(path, device)
    return model, text, device


class OnnxModel:
    """An ONNX Runtime session as a model callable: ``x`` ``[B, C, S, S]`` (any device) -> ``(pred, stats)`` float32 CPU tensors."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.input_name = session.get_inputs()[0].name
        self.output_names = [o.name for o in session.get_outputs()]

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        feed = {self.input_name: x.detach().to("cpu", torch.float32).contiguous().numpy()}
        return tuple(torch.from_numpy(a) for a in self.session.run(self.output_names, feed))


def read_onnx(path: Path, device: torch.device, explicit_device: bool, threads: int | None = None) -> tuple[OnnxModel, str, torch.device]:
    """An ONNX Runtime CPU session of the ONNX model at ``path`` (float32 or int8 QDQ) with its ``meta.json`` text: the
    model's ``metadata_props["meta.json"]``, else the ``<name>.meta.json`` beside it. ``threads``: ONNX Runtime's
    intra-op threads (None: torch's current thread count, which ``Runtime.load(threads=)`` sets). ``ValueError``
    naming ``path`` without onnxruntime, for a file it cannot load, or without meta."""
    device = cpu_fallback(
        path, device, explicit_device, "ONNX models run on ONNX Runtime's CPU provider here", "use a .pt2 or TorchScript export"
    )
    return OnnxModel(onnx_session(str(path), path, threads)), onnx_meta_text(path), device


def onnx_session(source: str | bytes, path: Path, threads: int | None = None) -> Any:
    """An ONNX Runtime CPU session of ``source`` (a file name, or the model's bytes read from ``path``) with ``threads``
    intra-op threads (None: torch's current thread count) that park between calls. ``ValueError`` naming ``path``
    without onnxruntime or for a model it cannot load."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise ValueError(f"{path}: running ONNX models needs onnxruntime (pip install '.[onnx]')") from exc
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(threads or torch.get_num_threads())
    options.inter_op_num_threads = 1
    # Threads that spin between calls would take the cores from frame decoding and from everything else on a line PC
    # (and, in an interleaved benchmark, from the candidate timed next): park them instead.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3  # errors only
    try:
        return ort.InferenceSession(source, sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types (Fail, InvalidProtobuf, NoSuchFile, ...)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: not a loadable ONNX model: {first}") from exc


def onnx_meta_text(path: Path) -> str:
    """The ``meta.json`` text of the ONNX model at ``path``: its ``metadata_props["meta.json"]``, else the
    ``<name>.meta.json`` beside it. ``ValueError`` naming ``path`` without either, or when both exist and differ
    (a sidecar edited, or left from another export: which one would the C++ or Triton client read?)."""
    sidecar = onnx_meta_path(path)
    try:
        _, texts = split_onnx_meta(path.read_bytes())
    except ValueError as exc:
        raise ValueError(f"{path}: truncated or corrupt ONNX file ({exc})") from exc
    text = texts[-1] if texts else ""
    if sidecar.is_file():
        beside = sidecar.read_text(encoding="utf-8")
        if not text:
            text = beside
        elif _json_or_none(beside) != _json_or_none(text):
            differ = _differing_keys(_json_or_none(beside), _json_or_none(text))
            raise ValueError(
                f"{path}: {sidecar.name} beside it differs from the meta.json embedded in the model ({differ}): edited, or left by "
                "another export; export the model again (or remove the sidecar)"
            )
    if not text:
        raise ValueError(
            f"{path}: ONNX model without {META_FILE} (embedded or {sidecar.name} beside it); export it with `defect-detector export`"
        )
    return text


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _differing_keys(a: Any, b: Any) -> str:
    if not isinstance(a, dict) or not isinstance(b, dict):
        return "not the same JSON"
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return "keys " + ", ".join(keys[:6]) + (" ..." if len(keys) > 6 else "")


def verify_artifact(path: Path, kind: str, meta: dict[str, Any]) -> None:
    """Refuse (``ValueError``, one line naming ``path``) an artifact whose ``meta`` does not match the digest of its
    graph, weights and meta (:mod:`~defect_detector.export.digest`), and a ``.pt2`` whose meta names another input size
    than the compiled model's: before the model runs once."""
    if kind == "torchscript":
        check_digest(path, meta)
    elif kind == "pt2":
        check_pt2(path, meta)
    elif kind == "onnx":
        stripped, _ = split_onnx_meta(path.read_bytes())
        check_recorded(path, meta, onnx_digest(stripped, meta))
