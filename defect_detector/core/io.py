"""File I/O: atomic writes (a crash never leaves a half-written checkpoint or result) and checked JSON reads."""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes | Iterable[bytes]) -> None:
    """Write ``data`` (bytes, or chunks of bytes written as they come: a large output never held whole) to ``path`` via
    a temp file in the same folder, fsync and rename. On failure the temp file is removed and ``path`` keeps its
    earlier content; an OSError (e.g. ENOSPC) names ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in [data] if isinstance(data, bytes) else data:
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno is not None:  # name the file (a failed write names none, or the temp file)
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write UTF-8 ``text`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented JSON atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


def atomic_torch_save(obj: Any, path: str | os.PathLike[str]) -> None:
    """``torch.save`` to memory, then write the bytes atomically."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


def read_json_file(path: str | os.PathLike[str], what: str, error: type[Exception] = ValueError) -> Any:
    """The parsed JSON of ``path``; ``error`` with one line naming the file and ``what`` it should be (e.g.
    ``"baseline"``) when it is missing, unreadable, not UTF-8 or not valid JSON."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise error(f"{path}: {what} file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot read {what} file: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: malformed {what} JSON: {exc}") from exc
