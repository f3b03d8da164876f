"""Loading checkpoints into models, and the bundled default weights."""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import warnings
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError

from defect_detector.core.config import Config, apply_overrides, config_from_dict, without_retired
from defect_detector.core.taught import AREA_KEYS, MAP_KEYS, TAUGHT_KEYS, TaughtEntry, entry_problem
from defect_detector.model.detector import TinyDetector, build_model

DEFAULT_WEIGHTS = Path(__file__).resolve().parent.parent / "weights" / "deeppcb.pt"
DEFAULT_REFERENCE_WEIGHTS = DEFAULT_WEIGHTS.with_name("deeppcb_ref.pt")  # golden-template model (in_channels 2)
PHOTO_REFERENCE_WEIGHTS = DEFAULT_WEIGHTS.with_name("photo_ref.pt")  # golden-template model for photographs (teach's start)


@dataclass
class LoadedModel:
    """An eval-mode model with the config and class names it was trained with."""

    model: TinyDetector
    config: Config
    class_names: tuple[str, ...]
    metrics: dict[str, Any]
    path: Path
    baseline: dict[str, Any] | None = None
    """The drift baseline the checkpoint carries (``Baseline.to_dict()`` form, see monitor/baseline.py), or None."""
    domain: dict[str, Any] | None = None
    """The design domain the checkpoint carries (``DomainModel.to_dict()`` form, see monitor/domain.py), or None."""
    taught: list[dict[str, Any]] = field(default_factory=list)
    """The designs ``teach`` taught these weights: ``[{"name": golden file name, "key": pixel fingerprint of the gray
    golden image (data/images.py pixel_fingerprint), "conf": its score threshold (absent: the weights' own), and when
    taught from good boards its tolerance map, "tolerance": [[x, y, score], ...] in golden-image pixels,
    "tolerance_radius", "tolerance_margin", and the calls operators rejected, "rejected": [[x, y, score], ...],
    "rejected_radius" (``inspect/tolerance.py``)}]``, [] when none."""


def is_torchscript_archive(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a TorchScript archive (``torch.jit.save``): a zip with a ``code/`` folder.

    A ``torch.save`` checkpoint is a zip too, but without ``code/``.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            return any("/code/" in name or name.startswith("code/") for name in archive.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def _first_line(message: str, limit: int = 200) -> str:
    """The first line of ``message``, cut to ``limit`` characters."""
    line = message.strip().splitlines()[0] if message.strip() else message
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _refusal(path: Path, message: str) -> str:
    """One line for torch's weights-only refusal ``message``: Python code (a pickled callable, named), or a corrupt
    file or a pickle torch's safe loader cannot read."""
    global_name = re.search(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) (\S+)", message)
    if global_name:
        return (
            f"{path}: refused: it holds Python code (a pickled {global_name.group(1)}), not only the tensors and plain values "
            "every checkpoint of this package holds; loading it could run that code: use a checkpoint written by train or strip"
        )
    operand = re.search(r"Unsupported operand \d+", message)
    if operand:
        return (
            f"{path}: not a readable checkpoint (corrupt, or a pickle that torch's safe loader rejects: {operand.group(0)}); "
            "write checkpoints with train or strip"
        )
    found = re.search(r"WeightsUnpickler error:\s*(.*?)(?:\n|$)", message.strip() + "\n", re.S)
    reason = " ".join(found.group(1).split()) if found else _first_line(message)
    return f"{path}: not a readable checkpoint (corrupt, or no torch file: {_first_line(reason, 120)})"


def _taught_entry(path: Path, raw: Any) -> list[dict[str, Any]]:
    """The checked ``taught`` entry of the checkpoint at ``path`` (None: []), each item a ``core/taught.py``
    :class:`~defect_detector.core.taught.TaughtEntry` (name, key, point, tolerance map, rejections, inspection area);
    a one-line ``ValueError`` naming ``path``, ``taught`` and the part that is wrong otherwise."""
    if raw is None:
        return []

    def cut(value: Any) -> str:
        shown = repr(value)
        return shown if len(shown) <= 80 else shown[:77] + "..."

    problems = [entry_problem(d) for d in raw] if isinstance(raw, list) else ["entry"]
    if "entry" in problems:
        raise ValueError(
            f"{path}: 'taught' entry must be a list of {{'name': str, 'key': str, 'conf': float in [0, 1] or absent}} "
            f"(what teach writes), got {cut(raw)}"
        )
    for d, problem in zip(raw, problems):
        if problem == "area":
            given = {k: cut(d.get(k)) for k in AREA_KEYS}
            raise ValueError(
                f"{path}: 'taught' entry of {d['name']}: its inspection area must be 'area': [[[x, y], ...], ...] (polygons of 3 "
                f"or more finite points) with 'area_shape': [height, width] (what teach writes), got {given}"
            )
        if problem in ("limits", "drift"):
            try:
                TaughtEntry.model_validate(d)
            except ValidationError as exc:
                why = next((str(e.get("ctx", {}).get("error", e["msg"])) for e in exc.errors()), str(exc))
                raise ValueError(f"{path}: 'taught' entry of {d['name']}: its {why} (what teach --good writes)") from None
        if problem == "map":
            given = {k: d.get(k) for k in MAP_KEYS}
            raise ValueError(
                f"{path}: 'taught' entry of {d['name']}: its tolerance map must be 'tolerance': [[x, y, score in [0, 1]], ...] "
                f"with 'tolerance_radius' > 0 and 'tolerance_margin' in [0, 1], and 'rejected' the same rows with "
                f"'rejected_radius' > 0 (what teach --good and teach --station write), got {cut(given)}"
            )
    return [{k: d[k] for k in TAUGHT_KEYS if d.get(k) is not None} for d in raw]


def read_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """``torch.load(weights_only=True)`` of a dict with a ``model`` entry; ``FileNotFoundError`` / ``ValueError`` naming
    ``path`` otherwise, in one line (a pickle that would run code is "refused: it holds Python code")."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: weights file not found")
    if is_torchscript_archive(path):
        raise ValueError(
            f"{path}: already an exported TorchScript model, not a training checkpoint; "
            "this command needs the .pt written by train (predict and Runtime take either)"
        )
    try:
        with warnings.catch_warnings():  # a raw pickle's protocol, warned about before the refusal below
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            ckpt = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as exc:  # torch's message: 654 characters that suggest loading it unsafely
        raise ValueError(_refusal(path, str(exc))) from exc
    except Exception as exc:
        raise ValueError(f"{path}: not a readable checkpoint ({type(exc).__name__}: {_first_line(str(exc))})") from exc
    if not isinstance(ckpt, dict) or "model" not in ckpt:
        raise ValueError(f"{path}: not a defect_detector checkpoint (needs 'model' and 'config' entries)")
    return ckpt


def load_checkpoint(path: str | Path | None = None, device: torch.device | str = "cpu", use_ema: bool = True) -> LoadedModel:
    """Load a training checkpoint (``.pt``) with ``weights_only=True``.

    ``path`` None means the bundled DeepPCB model. The EMA weights are used when
    present (they are what validation scored). Raises ``FileNotFoundError`` or
    ``ValueError`` with the path and the problem.
    """
    path = Path(path) if path is not None else DEFAULT_WEIGHTS
    ckpt = read_checkpoint(path, device)
    if "config" not in ckpt:
        raise ValueError(f"{path}: not a defect_detector checkpoint (needs 'model' and 'config' entries)")
    cfg = config_from_dict(without_retired(ckpt["config"], str(path)))
    class_names = tuple(ckpt.get("class_names", cfg.data.class_names))
    model = build_model(cfg.model, len(class_names))
    state = ckpt["ema"] if use_ema and "ema" in ckpt else ckpt["model"]
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise ValueError(f"{path}: weights do not fit the model its config describes: {exc}") from exc
    baseline = ckpt.get("baseline")
    if baseline is not None and not isinstance(baseline, dict):
        raise ValueError(f"{path}: 'baseline' entry must be a drift baseline object, got {type(baseline).__name__}")
    domain = ckpt.get("domain")
    if domain is not None and not isinstance(domain, dict):
        raise ValueError(f"{path}: 'domain' entry must be a design-domain object, got {type(domain).__name__}")
    taught = _taught_entry(path, ckpt.get("taught"))
    return LoadedModel(model.to(device).eval(), cfg, class_names, dict(ckpt.get("metrics", {})), path, baseline, domain, taught)


def weights_digest(model: torch.nn.Module) -> str:
    """The hex SHA-256 of ``model``'s state dict (every parameter and buffer: name, dtype, shape and bytes, in name
    order): which weights a drift baseline was measured with (``Baseline.model["weights_sha256"]``, written by
    ``calibrate`` for a checkpoint, compared by ``strip --baseline`` and ``export --baseline``)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"{name}\0{flat.dtype}\0{list(tensor.shape)}\0".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def strip_checkpoint(
    ckpt: dict[str, Any], overrides: Sequence[str] = (), baseline: dict[str, Any] | None = None, domain: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Inference-only checkpoint: EMA weights as ``model``, config (retired keys dropped, ``key=value`` ``overrides``
    applied, validated, e.g. ``eval.f1_conf=0.5``), class names, metrics (no optimizer state), the drift baseline
    (``baseline`` when given: a ``Baseline.to_dict()``, the caller validates it; else the one ``ckpt`` carries) and the
    design domain (``domain`` when given: a ``DomainModel.to_dict()``; else the one ``ckpt`` carries) and the designs
    ``teach`` taught (``taught``, as ``ckpt`` carries it; checked when the result is loaded)."""
    current = without_retired(ckpt["config"], "the checkpoint")  # an old checkpoint's retired keys would fail validation
    config = config_from_dict(apply_overrides(current, list(overrides))).to_dict()
    out = {
        "model": ckpt.get("ema", ckpt["model"]),
        "config": config,
        "class_names": ckpt["class_names"],
        "metrics": ckpt.get("metrics", {}),
        "epoch": ckpt.get("epoch", -1),
    }
    baseline = baseline if baseline is not None else ckpt.get("baseline")
    if baseline is not None:
        out["baseline"] = baseline
    domain = domain if domain is not None else ckpt.get("domain")
    if domain is not None:
        out["domain"] = domain
    if ckpt.get("taught") is not None:
        out["taught"] = ckpt["taught"]
    return out


def average_checkpoints(paths: Sequence[str | Path], overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Uniform weight average ("model soup") of two or more checkpoints of one architecture and class list.

    Each checkpoint contributes the weights :func:`load_checkpoint` uses (EMA when present). Floating-point
    tensors, BatchNorm running statistics included, are averaged; integer buffers come from the first
    checkpoint. Averaging suits fine-tunes of one parent, which share a loss basin; independently trained
    models do not average into a working one. Returns an inference-only checkpoint like
    :func:`strip_checkpoint`'s: the averaged ``model``, the first checkpoint's config with ``overrides``
    (``key=value``, validated) applied, its class names, and ``metrics = {"averaged_from": [paths]}``; no drift
    baseline, design domain or ``taught`` list (the average is another model: calibrate it, fit its domain, teach it).
    Raises ``ValueError`` naming the checkpoint whose class names or architecture differ from the first's.
    """
    if len(paths) < 2:
        raise ValueError(f"averaging needs at least two checkpoints, got {len(paths)}")
    first = load_checkpoint(paths[0])
    total = {k: v.double() if v.is_floating_point() else v for k, v in first.model.state_dict().items()}
    for path in paths[1:]:
        other = load_checkpoint(path)
        if other.class_names != first.class_names:
            raise ValueError(f"{path}: class names {list(other.class_names)} differ from {paths[0]}'s {list(first.class_names)}")
        if other.config.model != first.config.model:
            raise ValueError(f"{path}: model config {other.config.model} differs from {paths[0]}'s {first.config.model}")
        for k, v in other.model.state_dict().items():
            if v.is_floating_point():
                total[k] += v.double()
    state = {k: (v / len(paths)).float() if v.is_floating_point() else v for k, v in total.items()}
    config = config_from_dict(apply_overrides(first.config.to_dict(), list(overrides)))
    return {
        "model": state,
        "config": config.to_dict(),
        "class_names": list(first.class_names),
        "metrics": {"averaged_from": [str(p) for p in paths]},
        "epoch": -1,
    }


def load_matching_weights(model: torch.nn.Module, path: str | Path) -> tuple[list[str], list[str]]:
    """Copy into ``model`` every tensor of the checkpoint at ``path`` whose name and shape match.

    Uses the checkpoint's EMA weights when present, else its ``model`` weights.
    Tensors of other shapes (a wider stage, a different class count) keep their
    fresh initialisation, so a model can start from a checkpoint of another size
    or another label set. Returns ``(loaded, skipped)`` parameter/buffer names of
    ``model``; raises ``FileNotFoundError`` for a missing file and ``ValueError`` for an
    unreadable one or when nothing matches (wrong file).
    """
    ckpt = read_checkpoint(Path(path), "cpu")
    source = ckpt["ema"] if "ema" in ckpt else ckpt["model"]
    own = model.state_dict()
    loaded = [k for k, v in own.items() if k in source and source[k].shape == v.shape]
    skipped = [k for k in own if k not in loaded]
    if not loaded:
        raise ValueError(f"{path}: no tensor matches this model by name and shape; is it a defect_detector checkpoint?")
    model.load_state_dict({**own, **{k: source[k] for k in loaded}})
    return loaded, skipped


def attach_baseline(path: str | Path, baseline: dict[str, Any]) -> None:
    """Store a drift baseline (``Baseline.to_dict()``, already checked against the model) in the checkpoint at ``path``,
    rewritten atomically; every other entry stays as it was."""
    from defect_detector.core.io import atomic_torch_save

    ckpt = read_checkpoint(Path(path), "cpu")
    ckpt["baseline"] = baseline
    atomic_torch_save(ckpt, path)
