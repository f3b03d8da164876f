"""Where a run's outputs write, and the paths they may not take: checked at start (``inspect/run_guard.py``), before
anything is read or written.

- ``--save-json PATH`` writes PATH and, frame by frame, its JSONL record beside it (:func:`jsonl_path`); ``--report``
  one CSV; ``--save-dir DIR`` the annotated images under the source's relative names, or one annotated
  ``DIR/NAME.mp4`` for a video, camera or stream (:func:`video_path`); ``--alerts`` one JSONL of drift events.
- Two of them on one file would write into each other (``--save-json det.json --report det.jsonl``): refused, naming
  both flags and the file.
- An output the source would read as a frame (annotated images inside the source folder, or matched by its glob), or
  that is the source itself (a single image or a video overwritten by its annotated copy): refused, so the raw captures
  are never overwritten and the next run never inspects the annotated copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from defect_detector.inspect.sources import FrameSource, glob_root, reads_back


def jsonl_path(save_json: Path) -> Path:
    """The frame-by-frame JSONL record that ``--save-json save_json`` writes as the run goes: ``NAME.jsonl`` beside it."""
    return save_json.with_suffix(".jsonl")


def video_path(save_dir: Path, kind: str, source: str) -> Path:
    """The one annotated ``.mp4`` ``--save-dir`` holds for a video (its stem), a camera (``cameraN``) or a stream."""
    name = source.strip()
    stem = {"video": Path(name).stem, "camera": f"camera{name}"}.get(kind, "stream")
    return save_dir / f"{stem}.mp4"


def check_output_paths(source: FrameSource, files: Sequence[tuple[str, Path]], save_dir: Path | None) -> None:
    """Refuse (``ValueError``, one line) outputs that would write into each other or that ``source`` would read back:
    see the module docstring. ``files``: ``(flag, path)`` of each file output (``--save-json``, ``--report``,
    ``--alerts``)."""
    named = _named(files)
    seen: dict[Path, str] = {}
    for what, path in named:
        first = seen.setdefault(path.resolve(), what)
        if first != what:
            raise ValueError(f"{first} and {what} both write {path}: two outputs on one file; choose another path for one of them")
        if reads_back(source.source, source.kind, path):
            why = "would read it back as frames (or it is the source)"
            raise ValueError(f"{what} {path}: the source {source.source} {why}; choose another path")
    if save_dir is not None:
        _check_save_dir(source, save_dir, named)


def _named(files: Sequence[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """``(what, path)`` of every file written: each flag's, and ``--save-json``'s JSONL record after it."""
    named = []
    for flag, path in files:
        named.append((flag, path))
        if flag == "--save-json":
            record = jsonl_path(path)
            if record.resolve() == path.resolve():
                one = "the JSON and its frame-by-frame record NAME.jsonl would be one file"
                raise ValueError(f"--save-json {path}: {one}; name it NAME.json")
            named.append((f"--save-json's frame-by-frame record {record.name}", record))
    return named


def _check_save_dir(source: FrameSource, save_dir: Path, named: list[tuple[str, Path]]) -> None:
    """``--save-dir``: not the source folder nor inside it, no annotated file the source would read back or that
    overwrites it, and no other output on the folder or on one of its annotated files."""
    folder = save_dir.resolve()
    if source.kind == "folder":
        root = Path(source.source).resolve()
        if folder == root:
            why = "its annotated images would overwrite the captures"
            raise ValueError(f"--save-dir {save_dir} is the source folder {source.source}: {why}; choose a folder outside it")
        if folder.is_relative_to(root):
            raise ValueError(f"--save-dir {save_dir} is inside the source folder {source.source}: the next run would read its annotated "
                             "images back as frames; choose a folder outside it")
    annotated = _annotated(source, folder)
    root = Path(source.source).resolve() if source.kind == "folder" else glob_root(source.source).resolve()
    listed = source.kind in ("folder", "glob")  # their files lie under root: a folder outside it holds none of them
    for name, path in annotated.items() if not listed or folder.is_relative_to(root) else ():
        if reads_back(source.source, source.kind, path):
            if source.kind in ("image", "video"):
                raise ValueError(f"--save-dir {save_dir}: its annotated {name} would overwrite the source {source.source}; choose another")
            raise ValueError(f"--save-dir {save_dir}: the source {source.source} would read its annotated images ({name}, ...) back as "
                             "frames; choose a folder outside it")
    by_path = {path: name for name, path in annotated.items()}
    for what, path in named:
        if path.resolve() == folder:
            raise ValueError(f"{what} {path} is the --save-dir folder; choose another path")
        if path.resolve() in by_path:
            raise ValueError(f"{what} and --save-dir's annotated {by_path[path.resolve()]} both write {path}: two outputs on one file; "
                             "choose another path for one of them")


def _annotated(source: FrameSource, save_dir: Path) -> dict[str, Path]:
    """The annotated files ``save_dir`` (resolved) would hold for ``source``, by name: an image per file, or one video."""
    if source.kind in ("image", "folder", "glob"):
        return {name: save_dir / name for _, name in source.files}
    path = video_path(save_dir, source.kind, source.source)
    return {path.name: path}
