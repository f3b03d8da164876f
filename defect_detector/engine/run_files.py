"""The files of a run folder and how they change together.

``<out_dir>/<name>/`` holds ``config.yaml``, ``weights/last.pt`` and ``weights/best.pt``, ``metrics.jsonl``
(one JSON line per finished epoch) and ``plots/``. :func:`commit_epoch` ends an epoch: ``best.pt`` (when
chosen), then ``last.pt``, the commit point, each written atomically, then the epoch's line appended to
``metrics.jsonl``. A kill at any moment leaves an earlier epoch's complete ``last.pt``; :func:`prepare_run_dir`
then removes the killed writes' temp files and rewrites ``metrics.jsonl`` to the epochs that ``last.pt``
holds, so the file never lists an epoch twice or one that no checkpoint has. (``best.pt`` goes first: a kill
between the two reruns that epoch, which rewrites ``best.pt``; the other order could lose an improvement.)
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import torch

from defect_detector.core.config import Config, ConfigError, config_from_dict, save_config, without_retired
from defect_detector.core.io import atomic_write_bytes, atomic_write_text
from defect_detector.engine.errors import TrainingError
from defect_detector.model.checkpoint import read_checkpoint

log = logging.getLogger("defect_detector.engine")

RESUME_KEYS = ("model", "ema", "ema_updates", "optimizer", "scaler", "scheduler", "epoch", "config", "history")
"""The entries ``--resume`` needs in ``last.pt`` (an exported or stripped checkpoint lacks the optimizer's)."""

RESUME_MAY_CHANGE = ("data.workers", "out_dir", "name", "train.max_minutes", "eval.f1_conf")
"""Keys a resumed run may change (besides ``train.epochs``, which may grow): they do not change what is trained.
The loader's draws do not depend on the worker count (data/collate.py); ``train.max_minutes`` only says when to stop;
``eval.f1_conf`` is measured by each validation (the checkpoint records the run's, the config the starting one)."""


def read_resume_checkpoint(path: Path, device: torch.device) -> dict[str, Any]:
    """``last.pt`` for ``--resume``, read with the checked loader (``weights_only=True``); a missing, truncated,
    foreign or inference-only file raises an error whose one-line message names ``path``."""
    if not path.is_file():
        raise FileNotFoundError(f"--resume: {path} does not exist (nothing to resume; start the run without --resume)")
    try:
        ckpt = read_checkpoint(path, device)
    except ValueError as exc:
        raise TrainingError(_one_line(str(exc), path)) from exc
    missing = [key for key in RESUME_KEYS if key not in ckpt]
    if missing:
        raise TrainingError(f"{path}: not a resumable training checkpoint (no {', '.join(missing)}); start a new run (name=NEW)")
    return ckpt


def _one_line(message: str, path: Path, limit: int = 300) -> str:
    """``message`` as one line: torch's refusal of a foreign pickle spans many lines, so it is named instead."""
    if "Weights only load failed" in message:
        return f"{path}: not a readable checkpoint (it holds Python objects, not only tensors and plain values: not a training checkpoint)"
    line = re.sub(r"\x1b\[[0-9;]*m", "", message.strip().splitlines()[0] if message.strip() else message)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def config_changes(saved: dict[str, Any], current: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{dotted key: (saved value, current value)}`` for every key whose value differs."""
    old, new = _flat(saved), _flat(current)
    return {k: (old.get(k), new.get(k)) for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)}


def check_resume_config(cfg: Config, saved: dict[str, Any], path: Path) -> None:
    """Refuse to resume the run of checkpoint ``path`` (config ``saved``) with a resolved config ``cfg`` that
    differs from it: a change of architecture or classes (``model.*``, ``data.class_names``) cannot load the
    weights; any other change (``train.lr``, ``seed``, augmentation, data, ...) would silently mix two
    experiments in one run. ``train.epochs`` may grow (to extend a run), and :data:`RESUME_MAY_CHANGE` change.
    :class:`TrainingError` listing the keys with both values."""
    try:
        saved = config_from_dict(without_retired(saved, str(path))).to_dict()
    except ConfigError as exc:
        raise TrainingError(f"{path}: its config is not valid for this version ({exc}); start a new run (name=NEW)") from exc
    changes = config_changes(saved, cfg.to_dict())
    old_epochs, new_epochs = changes.get("train.epochs", (0, 0))
    if new_epochs >= old_epochs:
        changes.pop("train.epochs", None)
    for key in RESUME_MAY_CHANGE:
        changes.pop(key, None)
    listed = "; ".join(f"{k} ({old!r} -> {new!r})" for k, (old, new) in changes.items())
    if any(k.startswith("model.") or k == "data.class_names" for k in changes):
        raise TrainingError(
            f"{path}: --resume cannot change the architecture or classes: {listed}; "
            f"start a new run (name=NEW), e.g. fine-tuned from this one with train.init_weights={path}"
        )
    if changes:
        raise TrainingError(
            f"{path}: --resume with settings that differ from the run's: {listed}; resume with the run's settings "
            f"({path.parent.parent / 'config.yaml'}) or start a new run (name=NEW); only train.epochs may grow"
        )


def data_digests(cfg: Config) -> dict[str, str]:
    """SHA-256 of the training and validation jsons (``{"data.train": hex, "data.val": hex}``; a key per file set),
    stored in every checkpoint so that ``--resume`` sees a json edited in place."""
    out = {}
    for key, path in (("data.train", cfg.data.train), ("data.val", cfg.data.val)):
        if path:
            digest = hashlib.sha256()
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
            out[key] = digest.hexdigest()
    return out


def check_resume_data(saved: dict[str, str] | None, current: dict[str, str], path: Path, allow_change: bool) -> None:
    """Refuse (``TrainingError``, one line) to resume the run of ``path`` on jsons whose digests differ from the ones
    it recorded (``saved``), unless ``allow_change`` (``--allow-data-change``): then the change is logged and the run
    goes on with the new data. A checkpoint without digests (before v0.10) cannot be checked: logged."""
    if saved is None:
        log.warning("%s records no digest of its training data (an earlier version): --resume cannot tell if the jsons changed", path)
        return
    changed = [key for key in sorted(saved.keys() | current.keys()) if saved.get(key) != current.get(key)]
    if not changed:
        return
    listed = "; ".join(f"{key} (sha256 {str(saved.get(key))[:12]} -> {str(current.get(key))[:12]})" for key in changed)
    if not allow_change:
        raise TrainingError(
            f"{path}: --resume with data that changed since the run's last epoch: {listed}; resume on the same jsons, "
            "pass --allow-data-change to go on with the new ones, or start a new run (name=NEW)"
        )
    log.warning("%s: resuming on changed data (--allow-data-change): %s", path, listed)


def prepare_run_dir(run_dir: Path, cfg: Config, history: list[dict[str, Any]] | None) -> None:
    """Make ``run_dir`` ready to train: remove temp files that killed writes left (``.last.pt.*.tmp`` and the
    like); for a resumed run (``history``: the records ``last.pt`` holds) rewrite ``metrics.jsonl`` to those
    epochs, for a new run remove the metrics and weights of a replaced one; then write ``config.yaml``."""
    weights = run_dir / "weights"
    weights.mkdir(parents=True, exist_ok=True)
    for folder in (run_dir, weights, run_dir / "plots"):
        for tmp in folder.glob(".*.tmp"):
            tmp.unlink(missing_ok=True)
    metrics = run_dir / "metrics.jsonl"
    if history is not None:
        atomic_write_text(metrics, "".join(json.dumps(record) + "\n" for record in history))
    else:
        for stale in (metrics, weights / "last.pt", weights / "best.pt"):
            stale.unlink(missing_ok=True)
    save_config(cfg, run_dir / "config.yaml")


def commit_epoch(run_dir: Path, ckpt: dict[str, Any], record: dict[str, Any], best: bool) -> None:
    """End an epoch: ``weights/best.pt`` (when ``best``), ``weights/last.pt``, then ``record`` appended to
    ``metrics.jsonl`` (see the module docstring for why this order survives a kill anywhere)."""
    buf = io.BytesIO()
    torch.save(ckpt, buf)
    if best:
        atomic_write_bytes(run_dir / "weights" / "best.pt", buf.getvalue())
    atomic_write_bytes(run_dir / "weights" / "last.pt", buf.getvalue())
    append_jsonl(run_dir / "metrics.jsonl", record)


def save_best(run_dir: Path, ckpt: dict[str, Any]) -> None:
    """Write ``weights/best.pt`` alone (atomically): a fine-tune's starting weights, before its first epoch."""
    buf = io.BytesIO()
    torch.save(ckpt, buf)
    atomic_write_bytes(run_dir / "weights" / "best.pt", buf.getvalue())


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line and fsync it (a partial line left by a kill is dropped by :func:`prepare_run_dir`)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
