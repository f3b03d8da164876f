"""``.pt2`` export: ``torch.export`` of :class:`DeployModel`, compiled and packaged by AOTInductor, with ``meta.json`` inside.

The package is what ``torch._inductor.aoti_compile_and_package`` writes: a zip (PT2 archive) holding the compiled
model (a shared library with its weights) for one device kind, the CPU or CUDA, and for the torch version that
wrote it. ``meta.json`` (the same facts as the TorchScript artifact's, :func:`checkpoint_meta`) travels as the
AOTInductor metadata entry ``"meta.json"`` (``inductor_configs["aot_inductor.metadata"]``): Python reads it with
``aoti_load_package(path).get_metadata()`` (or :func:`read_pt2_meta` without loading the model), C++ with
``torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path, "model")`` or ``loader.get_metadata()``.

The layer statistics come from :class:`~defect_detector.monitor.hooks.ActivationMonitor`'s forward hooks:
``torch.export`` (non-strict, the default) runs the Python forward, hooks included, and records their tensor ops,
so the exported graph returns the same ``stats`` as eager (checked by the parity run, as for TorchScript).

A siamese golden-template model's package holds three AOTInductor models (``torch._inductor.aot_compile`` each, then
``package_aoti``, the recipe ``aoti_compile_and_package`` documents for several models): ``model`` (``forward``, what
``aoti_load_package`` loads), ``golden`` and ``frame`` (meta ``graphs.<name>.model_name``; C++:
``AOTIModelPackageLoader(path, "golden")``). The frame model takes the golden features at the frames' batch: one
compiled graph cannot both broadcast a batch of 1 and take a batch of B, so the runtime expands them.

The batch dimension is dynamic (``torch.export.Dim``, at least 1). The graph is the portable one (no oneDNN
conv + SiLU op of :mod:`.onednn`): Inductor generates and fuses its own kernels. A package compiled on the CPU runs
only on the CPU (meta ``cpu_only`` and ``"aoti_device": "cpu"``); one compiled where CUDA is available runs on CUDA.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import tempfile
import time
import warnings
import zipfile
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
    graphs_meta,
)
from defect_detector.export.digest import PT2_COVERS, check_recorded, is_aoti_metadata, pt2_digest, signed
from defect_detector.export.exporter import finish_export, start_export
from defect_detector.export.parity import cached_outputs, check_parity, max_diffs, parity_inputs, reference_outputs
from defect_detector.export.torchscript import TRACE_BATCH
from defect_detector.model.checkpoint import LoadedModel

log = logging.getLogger("defect_detector.export")

PT2_TOLERANCE = 1e-4
"""Most abs difference of a ``.pt2`` package from the eager :class:`DeployModel` it was exported from (BatchNorm folded, as
in every artifact) on boxes (px) and scores. Against the unfused training-form model the ``FP32_TOLERANCE`` of every
export applies: folding BatchNorm alone moves boxes by a few float32 ulps at 640 px (1.8e-4 px measured on the bundled
model), more than 1e-4."""

PT2_BOX_ULPS = 4
"""Boxes are compared at float32's resolution where it is coarser than :data:`PT2_TOLERANCE`: a box coordinate near
``imgsz`` (640 px) is stored to 6.1e-5 px, so a compiled graph that sums the distribution box head's bins in another
order moves it by 1-2 ulps (1.2e-4 px measured on the bundled v0.10 model). The box tolerance is the larger of
``PT2_TOLERANCE`` and this many float32 ulps at ``imgsz``."""


def box_tolerance(imgsz: int) -> float:
    """The ``.pt2`` parity tolerance on boxes (px) for an input of ``imgsz``: see :data:`PT2_BOX_ULPS`."""
    ulp = float(np.spacing(np.float32(imgsz)))
    return max(PT2_TOLERANCE, PT2_BOX_ULPS * ulp)


INDUCTOR_CONFIGS: dict[str, Any] = {}
"""AOTInductor options besides the metadata (none: Inductor's defaults; ``freezing`` measured no faster here)."""


PT2_MIN_TORCH = (2, 6)
"""The first torch with ``torch._inductor.aoti_compile_and_package`` and ``aoti_load_package``."""


def pt2_unavailable_reason() -> str | None:
    """Why ``.pt2`` cannot be exported here (None when it can): a torch older than :data:`PT2_MIN_TORCH` (JetPack's,
    say), or no C++ compiler for AOTInductor (``CXX``, ``c++``, ``g++`` or ``clang++``). ``export`` then defaults
    to TorchScript."""
    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2] if p.isdigit())
    if version < PT2_MIN_TORCH:
        return f"torch {torch.__version__} is older than {'.'.join(map(str, PT2_MIN_TORCH))} (no AOTInductor packages)"
    compilers = [os.environ.get("CXX"), "c++", "g++", "clang++"]
    if not any(c and shutil.which(c) for c in compilers):
        return "no C++ compiler found for AOTInductor (set CXX, or install g++)"
    return None


FORWARD_MODEL = "model"
"""The AOTInductor model name of ``forward`` in a package (AOTInductor's default, which ``aoti_load_package`` loads); a
siamese model's ``golden`` and ``frame`` graphs are the package's models of those names (meta ``graphs.<name>.model_name``)."""


def export_program(deploy: DeployModel, device: torch.device | str = "cpu", graph: str = "forward") -> torch.export.ExportedProgram:
    """``torch.export`` of ``deploy``'s ``graph`` (on ``device``, float32) with a dynamic batch dimension (B >= 1):
    ``forward`` (``[B, C, S, S]``), or for a siamese model ``golden`` (``[B, 1, S, S]``) or ``frame`` (``[B, 1, S, S]``
    and the golden features, contiguous, of the same batch ``B``: one compiled graph cannot both broadcast a batch of 1
    and take a batch of B, so a runtime expands a golden image's features to the frames' batch).

    :class:`ExportError` naming the cause when ``torch.export`` cannot capture the graph."""
    size = deploy.imgsz
    batch = torch.export.Dim("batch", min=1)
    module: torch.nn.Module = deploy
    if graph == "forward":
        example: tuple[torch.Tensor, ...] = (torch.rand(TRACE_BATCH, deploy.in_channels, size, size, device=device),)
        dynamic: dict[str, Any] = {"x": {0: batch}}
    elif graph == "golden":
        module, example, dynamic = GoldenGraph(deploy), (torch.rand(TRACE_BATCH, 1, size, size, device=device),), {"reference": {0: batch}}
    else:
        with torch.no_grad():
            golden = deploy.golden(torch.rand(TRACE_BATCH, 1, size, size, device=device))
            features = tuple(f.contiguous() for f in golden[: len(GOLDEN_FEATURES)])
        module = FrameGraph(deploy)
        example = (torch.rand(TRACE_BATCH, 1, size, size, device=device), *features)
        dynamic = {"image": {0: batch}, "c3": {0: batch}, "c4": {0: batch}}
    try:
        with torch.no_grad():
            return torch.export.export(module, example, dynamic_shapes=dynamic)
    except Exception as exc:  # torch.export raises many types (UserError, GuardOnDataDependentSymNode, ...)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExportError(f"torch.export failed on the deploy model ({graph}): {type(exc).__name__}: {first}") from exc


class _DropMessage(logging.Filter):
    """A logging filter that drops the records whose message starts with ``prefix``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def _import_cpp_extension() -> None:
    """Import ``torch.utils.cpp_extension`` (AOTInductor's C++ build imports it) without the one warning its import logs
    on a machine with a CUDA toolkit and no GPU, "No CUDA runtime is found, using CUDA_HOME=...": a CPU package needs
    no CUDA runtime. Only that message of that logger is dropped, only while the module is first imported."""
    probe, quiet = logging.getLogger("torch.utils.cpp_extension"), _DropMessage("No CUDA runtime is found")
    probe.addFilter(quiet)
    try:
        import torch.utils.cpp_extension  # noqa: F401
    finally:
        probe.removeFilter(quiet)


def compile_package(programs: dict[str, torch.export.ExportedProgram], meta: dict[str, Any]) -> bytes:
    """AOTInductor-compile ``programs`` (AOTInductor model name -> program; :data:`FORWARD_MODEL` first) into ``.pt2``
    package bytes holding ``meta`` as the metadata entry ``meta.json`` of each model.

    Needs a C++ compiler (Inductor's CPU backend builds each model as a shared library); tens of seconds a model."""
    import torch._inductor
    from torch._inductor.package import package_aoti

    _import_cpp_extension()
    configs = {**INDUCTOR_CONFIGS, "aot_inductor.metadata": {META_FILE: json.dumps(meta)}}
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\._inductor")
        if list(programs) == [FORWARD_MODEL]:
            torch._inductor.aoti_compile_and_package(programs[FORWARD_MODEL], package_path=buffer, inductor_configs=configs)
        else:  # several models in one package: torch._inductor.aoti_compile_and_package's documented recipe
            files = {}
            for name, program in programs.items():
                options = {**configs, "aot_inductor.package": True}
                files[name] = torch._inductor.aot_compile(program.module(), tuple(program.example_inputs[0]), options=options)
            package_aoti(buffer, files)
    return buffer.getvalue()


def sign_pt2(data: bytes, meta: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    """The ``.pt2`` package ``data`` with ``meta`` and its digest (:func:`~defect_detector.export.digest.pt2_digest`)
    in every AOTInductor metadata file; returns the bytes and the signed meta. The package is rewritten member by
    member (stored, as AOTInductor writes it); only the metadata files change."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        aoti = _aoti_metadata(archive)
        sealed = signed(meta, pt2_digest(archive, meta, aoti), PT2_COVERS)
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
            for info in archive.infolist():
                member = archive.read(info)
                if is_aoti_metadata(info.filename):
                    member = json.dumps({**json.loads(member), META_FILE: json.dumps(sealed)}).encode()
                target.writestr(zipfile.ZipInfo(info.filename, date_time=info.date_time), member)
    return out.getvalue(), sealed


def _aoti_metadata(archive: zipfile.ZipFile) -> dict[str, str]:
    """The AOTInductor metadata of the package ``archive`` (its wrapper's ``*_metadata.json``); ``{}`` when absent."""
    name = _forward_member(archive, "wrapper_metadata.json")
    aoti = json.loads(archive.read(name)) if name else {}
    return aoti if isinstance(aoti, dict) else {}


def _forward_member(archive: zipfile.ZipFile, suffix: str) -> str | None:
    """The member of the package ``archive`` ending in ``suffix`` that belongs to the AOTInductor model of ``forward``
    (:data:`FORWARD_MODEL`: ``.../aotinductor/model/...``), None when absent."""
    names = [n for n in archive.namelist() if n.endswith(suffix) and "/aotinductor/" in f"/{n}"]
    return next((n for n in names if f"/aotinductor/{FORWARD_MODEL}/" in f"/{n}"), names[0] if names else None)


def check_pt2(path: str | os.PathLike[str], meta: dict[str, Any]) -> None:
    """Refuse (``ValueError``, one line naming ``path``) a ``.pt2`` package whose ``meta`` (the text the runtime reads)
    is not the one in every AOTInductor metadata copy, does not match its digest, or names another input size than the
    compiled model's (read from its generated C++, before anything runs: a model run on the wrong input size crashes
    the process)."""
    try:
        with zipfile.ZipFile(path) as archive:
            copies = {json.loads(archive.read(n)).get(META_FILE) for n in archive.namelist() if is_aoti_metadata(n)}
            if len({json.dumps(json.loads(c or "null"), sort_keys=True) for c in copies}) > 1:
                raise ValueError(f"{path}: the package's metadata copies hold different meta.json texts (edited); export the model again")
            actual = pt2_digest(archive, meta, _aoti_metadata(archive))
            dims = _input_dims(archive)
    except (OSError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: truncated or corrupt .pt2 file: {exc}") from exc
    check_recorded(path, meta, actual)
    want = {1: int(meta.get("channels", 1)), 2: int(meta["imgsz"]), 3: int(meta["imgsz"])}
    wrong = {k: (v, dims[k]) for k, v in want.items() if k in dims and dims[k] != v}
    if wrong:
        raise ValueError(
            f"{path}: meta.json describes input [B, {want[1]}, {want[2]}, {want[3]}], but the package was compiled for "
            f"[B, {dims.get(1)}, {dims.get(2)}, {dims.get(3)}]; export the model again"
        )


_INPUT_DIM = re.compile(r"if \((\d+) != \w+_size\[(\d+)\]\)")


def _input_dims(archive: zipfile.ZipFile) -> dict[int, int]:
    """The fixed input dimensions (index -> size) the package's model was compiled for, read from the input check
    AOTInductor generates (``check_input_0`` in the wrapper's C++); ``{}`` when it cannot be found."""
    name = _forward_member(archive, ".wrapper.cpp")
    if name is None:
        return {}
    code = archive.read(name).decode("utf-8", "replace")
    start = code.find("static void check_input_0(")
    if start < 0:
        return {}
    body = code[start : code.find("\n}\n", start)]
    return {int(index): int(size) for size, index in _INPUT_DIM.findall(body)}


def load_pt2(path: str | os.PathLike[str], device: torch.device | str = "cpu") -> tuple[Any, str]:
    """``aoti_load_package`` of the ``.pt2`` at ``path`` and its ``meta.json`` text (``""`` when absent).

    The loaded model is a callable ``[B, C, S, S] -> [pred, stats]`` (a list of tensors). ``device`` picks the CUDA
    device index for a CUDA package; a CPU package ignores it. ``ValueError`` naming ``path`` when it cannot load."""
    model = load_pt2_model(path, device)
    return model, model.get_metadata().get(META_FILE, "")


def load_pt2_model(path: str | os.PathLike[str], device: torch.device | str = "cpu", name: str = FORWARD_MODEL) -> Any:
    """The AOTInductor model ``name`` of the ``.pt2`` package at ``path`` (:data:`FORWARD_MODEL`, or a siamese model's
    ``golden`` or ``frame``), a callable ``(*tensors) -> list of tensors``. ``device`` picks the CUDA device index for
    a CUDA package; a CPU package ignores it. ``ValueError`` naming ``path`` when it cannot load."""
    import torch._inductor
    from torch._inductor.package import load_package

    _import_cpp_extension()
    device = torch.device(device)
    index = device.index if device.type == "cuda" and device.index is not None else -1
    try:
        if name == FORWARD_MODEL:
            return torch._inductor.aoti_load_package(os.fspath(path), device_index=index)
        return load_package(os.fspath(path), name, device_index=index)
    except (RuntimeError, OSError) as exc:
        lines = [line for line in str(exc).strip().splitlines() if line.strip()]
        raise ValueError(f"{path}: not a loadable AOTInductor .pt2 package ({name}): {lines[0] if lines else type(exc).__name__}") from exc


def read_pt2_metadata(path: str | os.PathLike[str]) -> tuple[str, dict[str, str]]:
    """``(meta.json text, the rest of the AOTInductor metadata)`` of a ``.pt2`` read straight from the zip: nothing of
    the package is loaded (loading it runs its compiled code). The AOTInductor metadata holds, besides ``meta.json``,
    the device kind the package was compiled for (``AOTI_DEVICE_KEY``: ``cpu`` or ``cuda``). ``("", {})`` when absent
    or unreadable."""
    try:
        with zipfile.ZipFile(path) as archive:
            name = _forward_member(archive, "wrapper_metadata.json")
            aoti = json.loads(archive.read(name)) if name else {}
    except (zipfile.BadZipFile, OSError, ValueError):
        return "", {}
    if not isinstance(aoti, dict):
        return "", {}
    text = aoti.get(META_FILE, "")
    return (text if isinstance(text, str) else ""), {k: v for k, v in aoti.items() if k != META_FILE}


def read_pt2_meta(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """``(meta.json, AOTInductor metadata)`` of a ``.pt2`` read straight from the zip, without loading the model
    (:func:`read_pt2_metadata`, the meta parsed). Empty dicts when absent or unreadable."""
    text, aoti = read_pt2_metadata(path)
    try:
        meta = json.loads(text or "{}")
    except ValueError:
        meta = {}
    return (meta if isinstance(meta, dict) else {}), aoti


def is_pt2_package(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an AOTInductor ``.pt2`` package (a zip with ``archive_format`` ``pt2`` and an ``aotinductor`` folder)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            fmt = next((n for n in names if n.endswith("/archive_format") or n == "archive_format"), None)
            return fmt is not None and archive.read(fmt).strip() == b"pt2" and any("/aotinductor/" in n for n in names)
    except (zipfile.BadZipFile, OSError):
        return False


def _worst(*diffs: dict[str, float]) -> dict[str, float]:
    return {k: max(d[k] for d in diffs) for k in diffs[0]}


def export_pt2(
    loaded: LoadedModel,
    out_path: str | os.PathLike[str],
    imgsz: int | None = None,
    baseline: BaselineArg = None,
    check_images: Sequence[np.ndarray] | None = None,
    layers: Sequence[str] = DEFAULT_LAYERS,
) -> dict[str, Any]:
    """Export ``loaded`` as an AOTInductor ``.pt2`` package (float32, dynamic batch) with ``meta.json``, checked and
    written atomically.

    Compiled for CUDA when it is available, else for the CPU (meta ``"aoti_device"``; ``cpu_only`` for the CPU).
    ``imgsz`` defaults to the training config's; ``baseline`` as for :func:`export_torchscript` (a file or dict,
    default the checkpoint's; checked against the model before the export). Parity: the package bytes are loaded
    back and compared with the unfused float32 eager model on ``check_images`` (default: two synthetic boards, see
    :func:`parity_inputs`), as a batch and the first image alone (the batch is dynamic): within ``FP32_TOLERANCE`` of
    the unfused float32 eager model (``report["parity"]``, as every export), and boxes, scores and stats within
    :data:`PT2_TOLERANCE` of the eager :class:`DeployModel` that was exported (``report["parity_exported"]``). Returns a
    report with the meta, both parity diffs, file size, path, device, compile seconds and ``baseline_source``; raises
    :class:`ExportError` on a failed check.
    """
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    start = start_export(loaded, imgsz, baseline, layers, device)
    deploy = start.deploy
    optimize = {"applied": False, "reason": "TorchScript only: AOTInductor compiles and fuses the graph itself"}
    meta = start.meta(optimize=optimize, cpu_only=device.type == "cpu")
    meta["aoti_device"] = device.type
    meta["graphs"] = graphs_meta(deploy, golden_batch="B")
    names = {graph: FORWARD_MODEL if graph == "forward" else graph for graph in meta["graphs"]}
    for graph, name in names.items():
        meta["graphs"][graph]["model_name"] = name
    compiling = time.perf_counter()
    programs = {name: export_program(deploy, device, graph) for graph, name in names.items()}
    data, meta = sign_pt2(compile_package(programs, meta), meta)
    seconds = time.perf_counter() - compiling

    x = parity_inputs(start.imgsz, check_images, channels=deploy.in_channels)
    diffs, exported_diffs = _check_package(data, meta, loaded, deploy, x, device)
    log.debug(
        ".pt2 parity on %d images: max abs diff boxes %.3g, scores %.3g, stats %.3g",
        len(x),
        diffs["boxes"],
        diffs["scores"],
        diffs["stats"],
    )
    facts = {"device": str(device), "compile_s": round(seconds, 1), "parity": diffs, "parity_exported": exported_diffs}
    return finish_export(out_path, data, meta, start.baseline_source, **facts, parity_images=len(x))


def _check_package(
    data: bytes, meta: dict[str, Any], loaded: LoadedModel, deploy: DeployModel, x: torch.Tensor, device: torch.device
) -> tuple[dict[str, float], dict[str, float]]:
    """Load the ``.pt2`` package ``data`` back and check it on ``x`` (float ``[B, C, S, S]``), as a batch and the first
    image alone: ``meta`` round-trips, outputs within ``FP32_TOLERANCE`` of the unfused float32 eager model, and scores
    and stats within :data:`PT2_TOLERANCE` (boxes: :func:`box_tolerance`) of ``deploy`` (both run on ``device``,
    ``deploy``'s). A siamese model's ``golden`` and ``frame`` models are checked alike on the batch (each frame with
    its own golden image's features). Returns the worst max abs diffs (the first against the unfused model);
    :class:`ExportError` on a failed check."""
    want = reference_outputs(loaded, deploy.imgsz, deploy.layer_names, x)
    with torch.no_grad():
        exported = [t.cpu() for t in deploy(x.to(device))]
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "check.pt2"
        staged.write_bytes(data)
        model, restored_meta = load_pt2(staged, device)
        if json.loads(restored_meta or "null") != meta:
            raise ExportError("meta.json did not round-trip through the .pt2 package")
        with torch.no_grad():
            runs = [([t.cpu() for t in model(x.to(device))], slice(None)), ([t.cpu() for t in model(x[:1].to(device))], slice(0, 1))]
        if deploy.caches_golden:
            golden, frame = (load_pt2_model(staged, device, name) for name in ("golden", "frame"))
            runs.append(([t.cpu() for t in cached_outputs(golden, frame, x.to(device), broadcast=False)], slice(None)))
    diffs = _worst(*(max_diffs(got, [t[rows] for t in want]) for got, rows in runs))
    check_parity(diffs, False, ".pt2")
    exported_diffs = _worst(*(max_diffs(got, [t[rows] for t in exported]) for got, rows in runs))
    limits = {"boxes": box_tolerance(deploy.imgsz), "scores": PT2_TOLERANCE, "stats": PT2_TOLERANCE}
    failed = {k: exported_diffs[k] for k, limit in limits.items() if not exported_diffs[k] <= limit}
    if failed:
        raise ExportError(f".pt2 parity check failed: max abs diff from the exported eager model {failed} exceeds {limits}")
    return diffs, exported_diffs
