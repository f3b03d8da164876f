"""Checks of an exported artifact's ``meta.json`` before the runtime trusts it.

A hand-edited, forged or corrupt ``meta.json`` would otherwise fail far from its cause (an unpacking error, an
index out of range after the first frame). :func:`parse_meta` checks each key the runtime reads and
:func:`check_outputs` runs the graph once on the input the meta describes; both raise ``ValueError`` naming the
file and the key.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import torch

from defect_detector.export import FORMAT_VERSION, META_FILE


def _bad(path: str | os.PathLike[str], key: str, what: str, value: Any) -> ValueError:
    text = repr(value)
    return ValueError(f"{path}: {META_FILE} {key} must be {what}, got {text[:80] + '...' if len(text) > 80 else text}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_meta(path: str | os.PathLike[str], text: str) -> dict[str, Any]:
    """``meta.json`` text of the artifact at ``path`` as a dict, each key the runtime reads checked:
    ``format_version``, ``class_names``, ``imgsz``, ``channels``, ``strides``, ``layers``, ``half``, ``cpu_only``,
    ``pixel_scale``, ``operating_point``, ``golden_check`` and ``baseline``. ``ValueError`` naming ``path`` and the first bad key."""
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: {META_FILE} is not valid JSON ({exc}); export the model again") from exc
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: {META_FILE} must be a JSON object, got {type(meta).__name__}")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: artifact format_version {meta.get('format_version')!r}, this runtime reads {FORMAT_VERSION}")
    _check_graph_keys(path, meta)
    _check_option_keys(path, meta)
    return meta


def _check_graph_keys(path: str | os.PathLike[str], meta: dict[str, Any]) -> None:
    """The keys that describe the graph's input and outputs: ``class_names``, ``strides``, ``imgsz``, ``channels``, ``layers``."""
    names = meta.get("class_names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise _bad(path, "class_names", "a non-empty list of distinct names", names)
    strides = meta.get("strides")
    if not isinstance(strides, list) or not strides or not all(_is_int(s) and s > 0 for s in strides):
        raise _bad(path, "strides", "a non-empty list of positive integers", strides)
    imgsz = meta.get("imgsz")
    if not _is_int(imgsz) or imgsz <= 0 or imgsz % max(strides):
        raise _bad(path, "imgsz", f"a positive multiple of the largest stride ({max(strides)})", imgsz)
    if meta.get("channels", 1) not in (1, 2) or isinstance(meta.get("channels"), bool):
        raise _bad(path, "channels", "1 or 2", meta.get("channels"))
    layers = meta.get("layers")
    if not isinstance(layers, list) or not all(isinstance(n, str) for n in layers):
        raise _bad(path, "layers", "a list of layer names", layers)


_CROSS_CLASS_KEYS = ("cross_class_iou", "cross_class_factor")


def _check_option_keys(path: str | os.PathLike[str], meta: dict[str, Any]) -> None:
    """The keys that describe how to run the graph: ``half``, ``cpu_only``, ``pixel_scale``, ``operating_point``,
    ``golden_check`` and ``baseline``."""
    for key in ("half", "cpu_only"):
        if not isinstance(meta.get(key, False), bool):
            raise _bad(path, key, "true or false", meta.get(key))
    scale = meta.get("pixel_scale")
    if scale is not None and (not isinstance(scale, (int, float)) or isinstance(scale, bool) or not math.isfinite(scale) or scale <= 0):
        raise _bad(path, "pixel_scale", "null or a positive number", scale)
    point = meta.get("operating_point")
    if point is not None and not (
        isinstance(point, dict) and all(_is_number(point.get(k)) and 0 <= point[k] <= 1 for k in ("conf", "iou"))
    ):
        raise _bad(path, "operating_point", 'null or {"conf": c, "iou": i} with both in [0, 1]', point)
    if point is not None and not all(point.get(k) is None or (_is_number(point[k]) and 0 <= point[k] <= 1) for k in _CROSS_CLASS_KEYS):
        raise _bad(path, "operating_point", "cross_class_iou and cross_class_factor null or in [0, 1]", point)
    exposure = point.get("exposure") if isinstance(point, dict) else None
    if exposure is not None and not (
        isinstance(exposure, dict) and all(v is None or (_is_number(v) and 0 <= v <= 1) for v in exposure.values())
    ):
        raise _bad(path, "operating_point", 'an "exposure" entry null or {"min_light": x, ...} with each null or in [0, 1]', point)
    check = meta.get("golden_check")
    if check is not None and not (isinstance(check, dict) and _is_number(check.get("min_zncc")) and -1 <= check["min_zncc"] <= 1):
        raise _bad(path, "golden_check", 'null or {"min_zncc": t, ...} with t in [-1, 1]', check)
    if meta.get("baseline") is not None:
        from defect_detector.monitor.baseline import Baseline

        Baseline.from_dict(meta["baseline"], where=f"{path}: {META_FILE} baseline")  # BaselineError (a ValueError) names the key


def check_outputs(runtime: Any) -> None:
    """Run ``runtime``'s model once on blank ``[1, channels, imgsz, imgsz]`` input and check its outputs against the
    meta: ``pred [1, A, 4 + len(class_names)]`` with ``A`` the anchors of ``strides`` at ``imgsz``, and ``stats
    [1, len(layers), 2]``. ``ValueError`` naming the artifact and the key that does not fit the graph."""
    path, meta = runtime.path, runtime.meta
    x = torch.zeros(1, runtime.channels, runtime.imgsz, runtime.imgsz, device=runtime.device, dtype=runtime.dtype)
    try:
        with torch.inference_mode():
            outputs = runtime.model(x)
        pred, stats = outputs
    except (RuntimeError, ValueError, TypeError) as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        last = lines[-1] if lines else type(exc).__name__  # TorchScript ends its trace with the error itself
        raise ValueError(
            f"{path}: the model does not run on the input {META_FILE} describes "
            f"([1, {runtime.channels}, {runtime.imgsz}, {runtime.imgsz}]: keys channels, imgsz): {last}"
        ) from exc
    anchors = sum((runtime.imgsz // s) ** 2 for s in meta["strides"])
    if pred.ndim != 3 or pred.shape[-1] != 4 + len(meta["class_names"]):
        raise ValueError(
            f"{path}: {META_FILE} class_names lists {len(meta['class_names'])} classes, the model predicts {pred.shape[-1] - 4}"
        )
    if pred.shape[1] != anchors:
        raise ValueError(
            f"{path}: {META_FILE} strides {meta['strides']} at imgsz {runtime.imgsz} give {anchors} anchors, the model {pred.shape[1]}"
        )
    if stats.ndim != 3 or stats.shape[1] != len(meta["layers"]):
        raise ValueError(f"{path}: {META_FILE} layers lists {len(meta['layers'])} layers, the model reports statistics of {stats.shape[1]}")
