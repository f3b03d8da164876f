"""The digest that ties an exported TorchScript artifact's ``meta.json`` to its graph and weights.

``meta.json`` tells the runtime how to read the model's outputs: which class each score column is, the pixel scale
that decides tiling, the drift baseline. A hand-edited meta (class names permuted: copper reported as pin-hole; a
``pixel_scale`` of 4.0: 776 detections instead of 60) or a meta copied onto another model of the same shapes runs
without an error, because every check of :mod:`.meta` passes. So every artifact's meta carries
``"digest": {"sha256": HEX, "covers": ...}``: the SHA-256 of the archive's members (graph code, constants,
weights: every member but ``extra/meta.json`` and torch's per-save ``.data/serialization_id``; names without the
archive's top folder, which follows the file name) followed by the meta itself (canonical JSON, the ``digest`` key
left out). Class names, ``pixel_scale``, the operating point and the baseline are all covered.
:func:`check_digest` recomputes it when the runtime loads the artifact and refuses a mismatch or a missing digest
with one line.

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
_SKIPPED = ("extra/meta.json", ".data/serialization_id")


def _members_digest(archive: zipfile.ZipFile) -> hashlib._Hash:
    digest = hashlib.sha256()
    members = sorted((info.filename.split("/", 1)[-1], info.filename) for info in archive.infolist() if not info.is_dir())
    for name, full in members:
        if name in _SKIPPED:
            continue
        data = archive.read(full)
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest


def compute_digest(archive: zipfile.ZipFile, meta: dict[str, Any]) -> str:
    """The hex SHA-256 of ``archive`` (a TorchScript zip) and ``meta`` (see the module docstring)."""
    digest = _members_digest(archive)
    body = {k: v for k, v in meta.items() if k != DIGEST_KEY}
    digest.update(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode())
    return digest.hexdigest()


def with_digest(archive_bytes: bytes, meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` plus the digest of the artifact ``archive_bytes`` (saved with any meta: the meta member is skipped)."""
    with zipfile.ZipFile(io.BytesIO(archive_bytes)) as archive:
        return {
            **{k: v for k, v in meta.items() if k != DIGEST_KEY},
            DIGEST_KEY: {"sha256": compute_digest(archive, meta), "covers": COVERS},
        }


def check_digest(path: str | os.PathLike[str], meta: dict[str, Any]) -> None:
    """Refuse (``ValueError``, one line naming ``path``) an artifact whose meta carries no digest or one that does not
    match its graph, weights and meta: an edited ``meta.json``, or a meta copied from another model."""
    recorded = meta.get(DIGEST_KEY)
    if not isinstance(recorded, dict) or not isinstance(recorded.get("sha256"), str):
        raise ValueError(
            f"{path}: meta.json carries no digest of the graph and weights (exported before v0.10, or edited), so its class names "
            "and pixel scale cannot be trusted; export the model again"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            actual = compute_digest(archive, meta)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path}: cannot read the archive to check its digest: {exc}") from exc
    if actual != recorded["sha256"]:
        raise ValueError(
            f"{path}: meta.json does not match the model it is packed with (digest {recorded['sha256'][:12]}, actual {actual[:12]}): "
            "edited after export, or copied from another model; export the model again"
        )
