"""What a ``predict SOURCE`` string names: its kind (camera, stream URL, folder, glob, image or video file) and,
for image sources, the image files in frame order (and whether a file would be among them: :func:`reads_back`).
:mod:`defect_detector.inspect.sources` reads them."""

from __future__ import annotations

import fnmatch
import glob
from pathlib import Path

from defect_detector.data.images import IMAGE_SUFFIXES, image_files

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
        paths = image_files(root, recursive=True)
    else:
        root = glob_root(source)
        paths = [Path(p) for p in glob.glob(source, recursive=True) if Path(p).is_file()]
    items = [(p, p.relative_to(root).as_posix()) for p in paths if p.suffix.lower() in IMAGE_SUFFIXES]
    return sorted(items, key=lambda item: item[1])


def glob_root(pattern: str) -> Path:
    """The folder part of ``pattern`` before its first wildcard (``data/*/x*.png`` -> ``data``)."""
    parts = Path(pattern).parts
    fixed = []
    for part in parts:
        if any(c in part for c in _GLOB_CHARS):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path(".")


def reads_back(source: str, kind: str, path: Path) -> bool:
    """Whether SOURCE (of ``kind``) listed again would read the file ``path`` as a frame, or is it: an output written
    there would be inspected by the next run, or overwrite the capture it was made from. Folders list every image file
    below them; a glob the image files its pattern matches (``**``: any folders); a camera or a stream reads no file."""
    target = path.resolve()
    if kind in ("image", "video"):
        return target == Path(source).resolve()
    if kind not in ("folder", "glob") or target.suffix.lower() not in IMAGE_SUFFIXES:
        return False
    root = Path(source) if kind == "folder" else glob_root(source)
    if not target.is_relative_to(root.resolve()):
        return False
    return kind == "folder" or _matches(target.relative_to(root.resolve()).parts, Path(source).parts[len(root.parts) :])


def _matches(parts: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    """Whether the path ``parts`` match the glob ``pattern`` parts as ``glob.glob(..., recursive=True)`` matches them:
    ``**`` any number of folders, other parts by ``fnmatch`` one name each, hidden names only by a pattern that names
    the dot. (``PurePath.full_match`` does this from Python 3.13.)"""
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_matches(parts[i:], rest) for i in range(len(parts) + 1))
    if not parts or (parts[0].startswith(".") and not head.startswith(".")):
        return False
    return fnmatch.fnmatchcase(parts[0], head) and _matches(parts[1:], rest)
