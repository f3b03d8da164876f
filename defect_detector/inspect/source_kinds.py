"""What a ``predict SOURCE`` string names: its kind (camera, stream URL, folder, glob, image or video file) and,
for image sources, the image files in frame order. :mod:`defect_detector.inspect.sources` reads them."""

from __future__ import annotations

import glob
from pathlib import Path

from defect_detector.data.images import IMAGE_SUFFIXES

VIDEO_SUFFIXES = frozenset(".avi .mp4 .m4v .mov .mkv .webm .mpg .mpeg .wmv .flv .ts .mjpeg .mjpg .gif".split())
_STREAM_SCHEMES = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://", "udp://", "tcp://")
_GLOB_CHARS = "*?["


def source_kind(source: str) -> str:
    """Classify SOURCE: ``camera`` (an integer), ``stream`` (a URL), ``glob``, ``folder``, ``image`` or ``video``.

    Raises ``FileNotFoundError`` for a missing path and ``ValueError`` for a file of unknown type.
    """
    if source.strip().isdigit():
        return "camera"
    if source.lower().startswith(_STREAM_SCHEMES):
        return "stream"
    path = Path(source)
    if path.is_dir():
        return "folder"
    if any(c in source for c in _GLOB_CHARS) and not path.exists():
        return "glob"
    if not path.is_file():
        raise FileNotFoundError(f"{source}: no such file or folder")
    suffix = path.suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        return "image"
    if suffix in VIDEO_SUFFIXES:
        return "video"
    known = f"images: {' '.join(sorted(IMAGE_SUFFIXES))}; videos: {' '.join(sorted(VIDEO_SUFFIXES))}"
    raise ValueError(f"{source}: unknown file type {suffix!r} ({known})")


def list_images(source: str, kind: str) -> list[tuple[Path, str]]:
    """Image files of an ``image``/``folder``/``glob`` SOURCE as ``(path, name relative to SOURCE)``, sorted by name."""
    if kind == "image":
        return [(Path(source), Path(source).name)]
    if kind == "folder":
        root = Path(source)
        paths = [p for p in root.rglob("*") if p.is_file()]
    else:
        root = _glob_root(source)
        paths = [Path(p) for p in glob.glob(source, recursive=True) if Path(p).is_file()]
    items = [(p, p.relative_to(root).as_posix()) for p in paths if p.suffix.lower() in IMAGE_SUFFIXES]
    return sorted(items, key=lambda item: item[1])


def _glob_root(pattern: str) -> Path:
    """The folder part of ``pattern`` before its first wildcard (``data/*/x*.png`` -> ``data``)."""
    parts = Path(pattern).parts
    fixed = []
    for part in parts:
        if any(c in part for c in _GLOB_CHARS):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path(".")
