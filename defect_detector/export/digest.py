"""The digest that ties every exported artifact's ``meta.json`` to its graph and weights: TorchScript (Triton's
``model.pt`` is one), AOTInductor ``.pt2``, ONNX float32 and int8.

``meta.json`` tells the runtime how to read the model's outputs: which class each score column is, the pixel scale
that decides tiling, the operating point, the input size, the drift baseline. A hand-edited meta (class names
permuted: every call relabelled; an operating point of 0.95: every board passes; a ``pixel_scale`` of 4: 100 calls;
another ``imgsz``: a ``.pt2`` run on the wrong input) or a meta copied onto another model of the same shapes runs
without an error, because every check of :mod:`.meta` passes. So every artifact's meta carries
``"digest": {"sha256": HEX, "covers": ...}``, the SHA-256 of the graph and weights followed by the meta itself
(canonical JSON, the ``digest`` key left out):

- TorchScript: the archive's members (graph code, constants, weights: every member but ``extra/meta.json`` and
  torch's per-save ``.data/serialization_id``; names without the archive's top folder, which follows the file name);
- ``.pt2``: the package's members (the compiled model and its weights, the generated C++) but the AOTInductor
  metadata files (``*_metadata.json``, which hold the meta), then that metadata without the meta (the device kind);
- ONNX (float32 and int8): the model file's bytes without its ``metadata_props`` entry ``meta.json`` (the graph, the
  initializers, the opset), as :func:`~defect_detector.export.onnx.split_onnx_meta` cuts it.

Class names, ``pixel_scale``, the operating point, the input size and the baseline are all covered, and the digest is
computed over the final file (after ``export --int8`` embeds its recalibrated baseline). :func:`check_recorded`
compares it when the runtime loads the artifact and refuses a mismatch or a missing digest with one line.

It is an integrity check, not a signature: it catches edits, copies and mix-ups, not someone who recomputes it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from typing import Any

DIGEST_KEY = "digest"
COVERS = "sha256 of the archive members but extra/meta.json and .data/serialization_id, then meta.json without this key"
PT2_COVERS = "sha256 of the package members but the AOTInductor *_metadata.json, then that metadata and meta.json without this key"
ONNX_COVERS = "sha256 of the ONNX model bytes without the metadata_props entry meta.json, then meta.json without this key"
_SKIPPED = ("extra/meta.json", ".data/serialization_id")
AOTI_METADATA_SUFFIX = "_metadata.json"
"""The AOTInductor metadata files of a ``.pt2`` (the wrapper's and the kernel's copy): they hold ``meta.json``."""


def is_aoti_metadata(name: str) -> bool:
    """Whether the ``.pt2`` member ``name`` is an AOTInductor metadata file (``.../aotinductor/<model>/*_metadata.json``)."""
    return "/aotinductor/" in f"/{name}" and name.endswith(AOTI_METADATA_SUFFIX)


def _canonical(meta: dict[str, Any]) -> bytes:
    body = {k: v for k, v in meta.items() if k != DIGEST_KEY}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _members_digest(archive: zipfile.ZipFile, skip: Any = None) -> hashlib._Hash:
    digest = hashlib.sha256()
    members = sorted((info.filename.split("/", 1)[-1], info.filename) for info in archive.infolist() if not info.is_dir())
    for name, full in members:
        if name in _SKIPPED or (skip is not None and skip(full)):
            continue
        data = archive.read(full)
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest


def compute_digest(archive: zipfile.ZipFile, meta: dict[str, Any]) -> str:
    """The hex SHA-256 of ``archive`` (a TorchScript zip) and ``meta`` (see the module docstring)."""
    digest = _members_digest(archive)
    digest.update(_canonical(meta))
    return digest.hexdigest()


def pt2_digest(archive: zipfile.ZipFile, meta: dict[str, Any], aoti: dict[str, str]) -> str:
    """The hex SHA-256 of a ``.pt2`` package ``archive``, its AOTInductor metadata ``aoti`` (without ``meta.json``)
    and ``meta`` (see the module docstring)."""
    digest = _members_digest(archive, is_aoti_metadata)
    digest.update(json.dumps({k: v for k, v in aoti.items() if k != "meta.json"}, sort_keys=True).encode())
    digest.update(_canonical(meta))
    return digest.hexdigest()


def onnx_digest(stripped: bytes, meta: dict[str, Any]) -> str:
    """The hex SHA-256 of an ONNX model's bytes without its ``meta.json`` entry (``stripped``) and ``meta``."""
    digest = hashlib.sha256(b"onnx\0")
    digest.update(stripped)
    digest.update(_canonical(meta))
    return digest.hexdigest()


def signed(meta: dict[str, Any], sha256: str, covers: str) -> dict[str, Any]:
    """``meta`` (any earlier digest dropped) with ``{"digest": {"sha256", "covers"}}``."""
    return {**{k: v for k, v in meta.items() if k != DIGEST_KEY}, DIGEST_KEY: {"sha256": sha256, "covers": covers}}


def with_digest(archive_bytes: bytes, meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` plus the digest of the artifact ``archive_bytes`` (saved with any meta: the meta member is skipped)."""
    with zipfile.ZipFile(io.BytesIO(archive_bytes)) as archive:
        return signed(meta, compute_digest(archive, meta), COVERS)


def check_digest(path: str | os.PathLike[str], meta: dict[str, Any]) -> None:
    """Refuse (``ValueError``, one line naming ``path``) a TorchScript artifact whose meta carries no digest or one that
    does not match its graph, weights and meta: an edited ``meta.json``, or a meta copied from another model."""
    recorded_digest(path, meta)
    try:
        with zipfile.ZipFile(path) as archive:
            actual = compute_digest(archive, meta)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path}: cannot read the archive to check its digest: {exc}") from exc
    check_recorded(path, meta, actual)


def recorded_digest(path: str | os.PathLike[str], meta: dict[str, Any]) -> str:
    """The digest ``meta`` records; ``ValueError`` (one line naming ``path``) when it records none."""
    recorded = meta.get(DIGEST_KEY)
    if not isinstance(recorded, dict) or not isinstance(recorded.get("sha256"), str):
        raise ValueError(
            f"{path}: meta.json carries no digest of the graph and weights (exported by a version before the digest, or edited), "
            "so its class names, operating point, input size and pixel scale cannot be trusted; export the model again"
        )
    return recorded["sha256"]


def check_recorded(path: str | os.PathLike[str], meta: dict[str, Any], actual: str) -> None:
    """Refuse (``ValueError``, one line naming ``path``) ``meta`` when the digest it records is not ``actual``, the
    digest of the artifact as it is now."""
    recorded = {"sha256": recorded_digest(path, meta)}
    if actual != recorded["sha256"]:
        raise ValueError(
            f"{path}: meta.json does not match the model it is packed with (digest {recorded['sha256'][:12]}, actual {actual[:12]}): "
            "edited after export, or copied from another model; export the model again"
        )
