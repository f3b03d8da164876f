"""Checks of an exported artifact's ``meta.json`` before the runtime trusts it.

A hand-edited, forged or corrupt ``meta.json`` would otherwise fail far from its cause (an unpacking error, an
index out of range after the first frame). :func:`parse_meta` checks each key the runtime reads and
:func:`check_outputs` runs the graph once on the input the meta describes; both raise ``ValueError`` naming the
file and the key.
"""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

import torch
from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, model_validator

from defect_detector.core.limits import Limits
from defect_detector.core.taught import TaughtEntry, Unit
from defect_detector.core.typed_yaml import Bool, Int, Str, check, error_parts
from defect_detector.export import FORMAT_VERSION, META_FILE

_Unit = Unit
_UNIT_OR_NULL = ("cross_class_iou", "cross_class_factor", "merge_ios", "hidden_max_area")


class _OperatingPoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    conf: _Unit
    iou: _Unit
    cross_class_iou: _Unit | None = None
    cross_class_factor: _Unit | None = None
    merge_ios: _Unit | None = None
    hidden_max_area: _Unit | None = None
    exposure: dict[str, _Unit | None] | None = None
    """Artifacts before v0.19: the hidden-area and exposure limits, now in the meta's ``limits`` (``core/limits.py``)."""


class _GoldenCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")

    min_zncc: Annotated[float, Strict(), Field(ge=-1, le=1, allow_inf_nan=False)]
    method: Any = None
    scale: Any = None
    blur_sigma: Any = None
    applies_to: Any = None


_WHAT = {
    "class_names": "a non-empty list of distinct names",
    "strides": "a non-empty list of positive integers",
    "channels": "1 or 2",
    "layers": "a list of layer names",
    "half": "true or false",
    "cpu_only": "true or false",
    "pixel_scale": "null or a positive number",
    "operating_point": 'null or {"conf": c, "iou": i} with both in [0, 1]',
    "golden_check": 'null or {"min_zncc": t, ...} with t in [-1, 1]',
    "baseline": "null or a drift baseline object",
    "domain": "null or a design-domain object",
    "taught": 'null or a list of {"name": n, "key": k, "conf": c} with n and k strings and c null or in [0, 1], and a '
    'tolerance map ("tolerance": [[x, y, score], ...], "tolerance_radius" > 0, "tolerance_margin" in [0, 1]) or none, and '
    'operators\' rejections ("rejected": [[x, y, score], ...], "rejected_radius" > 0) or none, and an inspection area '
    '("area": [[[x, y], ...], ...], "area_shape": [h, w]) or none',
}


class MetaFile(BaseModel):
    """The keys of ``meta.json`` (``export/deploy_model.py`` ``build_meta`` and the format exporters; unknown keys
    refused). Those the runtime reads are typed and checked; the rest (``Any``) are carried for people and other
    readers. ``baseline`` is checked by :meth:`Baseline.from_dict <defect_detector.monitor.baseline.Baseline.from_dict>`,
    ``domain`` (absent in artifacts exported before v0.11) by :meth:`DomainModel.from_dict
    <defect_detector.monitor.domain.DomainModel.from_dict>`. ``taught`` (absent before v0.11): the designs ``teach``
    taught the weights, ``[{"name": golden file name, "key": pixel fingerprint}]``."""

    model_config = ConfigDict(extra="forbid")

    format_version: Any
    class_names: Annotated[list[Str], Field(min_length=1)]
    strides: Annotated[list[Annotated[Int, Field(gt=0)]], Field(min_length=1)]
    imgsz: Annotated[Int, Field(gt=0)]
    channels: Int = 1
    layers: list[Str]
    half: Bool = False
    cpu_only: Bool = False
    pixel_scale: Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)] | None = None
    operating_point: _OperatingPoint | None = None
    golden_check: _GoldenCheck | None = None
    baseline: dict[str, Any] | None = None
    domain: dict[str, Any] | None = None
    taught: list[TaughtEntry] | None = None
    reference: Any = None
    normalisation: Any = None
    letterbox: Any = None
    input: Any = None
    outputs: Any = None
    torch_version: Any = None
    created: Any = None
    optimize_for_inference: Any = None
    source_weights: Any = None
    tta: Any = None
    digest: Any = None
    onnx_opset: Any = None
    aoti_device: Any = None
    int8: Any = None
    graphs: dict[str, Any] | None = None
    register_: dict[str, Any] | None = Field(None, alias="register")
    """Artifacts v0.15-v0.18: registration and the golden check's limits, now in ``limits``."""
    limits: dict[str, Any] | None = None
    """Every limit of the prepare stage (``core/limits.py``; absent before v0.19: read from the keys above)."""
    """The graphs the artifact holds and their inputs (``deploy_model.graphs_meta``; absent before v0.12: ``forward`` only)."""

    @model_validator(mode="after")
    def _check_values(self) -> MetaFile:
        unique = len(set(self.class_names)) == len(self.class_names) and all(self.class_names)
        check(unique, "class_names", _WHAT["class_names"], self.class_names)
        check(self.channels in (1, 2), "channels", _WHAT["channels"], self.channels)
        check(self.imgsz % max(self.strides) == 0, "imgsz", "a multiple of the largest stride", self.imgsz)
        return self


def _meta_error(path: str | os.PathLike[str], exc: ValidationError, meta: dict[str, Any]) -> ValueError:
    """The first error of ``exc`` as one line ``<path>: meta.json <key> must be <what>, got <value>`` (the value cut
    at 80 characters)."""
    key, text = error_parts(exc, MetaFile)
    top, _, inner = key.partition(".")
    top = top.split("[")[0]
    if top not in _WHAT and top != "imgsz":  # an unknown key, a missing one
        return ValueError(f"{path}: {META_FILE} {key}: {text}" if key else f"{path}: {META_FILE} {text}")
    if top == "imgsz":
        what = f"a positive multiple of the largest stride ({max(meta['strides'])})" if "strides" in meta else "a positive integer"
    elif top == "operating_point" and inner.split("[")[0] in _UNIT_OR_NULL:
        what = "cross_class_iou, cross_class_factor, merge_ios and hidden_max_area null or in [0, 1]"
    elif top == "operating_point" and inner.startswith("exposure"):
        what = 'an "exposure" entry null or {"min_light": x, ...} with each null or in [0, 1]'
    else:
        what = _WHAT[top]
    value = repr(meta.get(top))
    return ValueError(f"{path}: {META_FILE} {top} must be {what}, got {value[:80] + '...' if len(value) > 80 else value}")


def parse_meta(path: str | os.PathLike[str], text: str) -> dict[str, Any]:
    """``meta.json`` text of the artifact at ``path`` as a dict, checked by :class:`MetaFile` (each key the runtime
    reads: ``format_version``, ``class_names``, ``imgsz``, ``channels``, ``strides``, ``layers``, ``half``,
    ``cpu_only``, ``pixel_scale``, ``operating_point``, ``golden_check``, ``limits`` (or an older artifact's
    ``register``), ``baseline``, ``domain`` and ``taught``; no unknown key).
    ``ValueError`` naming ``path`` and the first bad key."""
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: {META_FILE} is not valid JSON ({exc}); export the model again") from exc
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: {META_FILE} must be a JSON object, got {type(meta).__name__}")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: artifact format_version {meta.get('format_version')!r}, this runtime reads {FORMAT_VERSION}")
    try:
        MetaFile.model_validate(meta)
    except ValidationError as exc:
        raise _meta_error(path, exc, meta) from None
    stored_limits(meta, f"{path}: {META_FILE}")
    if meta.get("baseline") is not None:
        from defect_detector.monitor.baseline import Baseline

        Baseline.from_dict(meta["baseline"], where=f"{path}: {META_FILE} baseline")  # BaselineError (a ValueError) names the key
    if meta.get("domain") is not None:
        from defect_detector.monitor.domain import DomainModel

        DomainModel.from_dict(meta["domain"], where=f"{path}: {META_FILE} domain")
    return meta


def stored_limits(meta: dict[str, Any], where: str) -> Limits:
    """The limits a model's meta carries (``Limits.of_meta``). ``ValueError`` naming ``where`` and the bad key."""
    try:
        return Limits.of_meta(meta)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


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
