"""What a run does with the outputs of the run before it, so that a run that did not finish (kill -9, a power cut, a
crash) is never mistaken for a finished one (issue 58: after kill -9, ``det.json`` and the CSV still held the previous
run and looked current, and the annotated folder mixed both runs).

- ``--save-json`` (the JSON and its JSONL), ``--report`` and an annotated video: when a run starts writing, the previous
  run's file at each path is renamed ``NAME.previous.SUFFIX`` (:func:`previous_path`). While the run goes, and after it
  is killed, the output's own name holds nothing: a reader finds no ``det.json``, and ``det.previous.json`` (the last
  finished run's). A finished output is renamed into place and its ``.previous`` file removed; a run that fails, or an
  output that cannot be finished, puts the previous file back (:class:`PreviousOutputs`).
- ``--save-dir``'s annotated images: a run lists each one it writes in ``DIR/annotated.unfinished.txt`` (a line each,
  before the image), renamed ``DIR/annotated.txt`` when the run finishes (:data:`FINISHED_LIST`). The next run removes
  the images a finished run listed (replaced, as ``det.json`` is: :func:`clear_finished`), and moves those of a run
  that did not finish to ``DIR.recovered-<UTC time>/`` (:func:`recover_unfinished`, from ``inspect/run_guard.py``), so
  the folder never mixes two runs and a killed run's folder says so. Images written by a version without these lists
  are listed nowhere and left as they are.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("defect_detector.inspect")

FINISHED_LIST = "annotated.txt"
"""The list of the annotated files a finished run wrote into ``--save-dir``, one relative name a line."""

UNFINISHED_LIST = "annotated.unfinished.txt"
"""The same list while the run goes, and after a run that did not finish."""


def previous_path(path: Path) -> Path:
    """Where the previous run's output at ``path`` waits while a run is unfinished: ``det.json`` -> ``det.previous.json``."""
    return path.with_name(f"{path.stem}.previous{path.suffix}")


class PreviousOutputs:
    """The previous run's files at this run's output paths, moved aside by :meth:`retire` when the run starts writing;
    :meth:`drop` (the output finished) removes them, :meth:`restore` (the run or the output failed) puts them back."""

    def __init__(self) -> None:
        self.retired: dict[str, list[Path]] = {}  # by output kind: the paths whose previous file this run moved aside

    def retire(self, kind: str, path: Path) -> None:
        """Move the file at ``path`` (output ``kind``) to :func:`previous_path`, if there is one; a ``.previous`` file a
        killed run left, with nothing at ``path``, stays: it is still the last finished run's."""
        self.retired.setdefault(kind, []).append(path)
        if path.is_file():
            os.replace(path, previous_path(path))

    def drop(self, kind: str) -> None:
        """Output ``kind`` finished: its previous files are removed."""
        for path in self.retired.pop(kind, []):
            previous_path(path).unlink(missing_ok=True)

    def restore(self, kind: str | None = None) -> None:
        """Output ``kind`` (None: every one) failed: its previous files go back to their names."""
        for key in [kind] if kind is not None else list(self.retired):
            for path in self.retired.pop(key, []):
                if previous_path(path).is_file() and not path.exists():
                    os.replace(previous_path(path), path)


def listed(folder: Path, name: str) -> Iterator[Path]:
    """The paths inside ``folder`` that its list ``name`` names, one a line (names that would leave it are skipped)."""
    root = folder.resolve()
    with (folder / name).open(encoding="utf-8") as lines:
        for line in lines:
            path = folder / line.rstrip("\n")
            if line.strip() and path.resolve().is_relative_to(root):
                yield path


def clear_finished(save_dir: Path) -> int:
    """Remove the annotated files the finished run before this one listed in ``save_dir`` (and the list, and folders
    left empty); returns how many."""
    if not (save_dir / FINISHED_LIST).is_file():
        return 0
    removed = 0
    for path in list(listed(save_dir, FINISHED_LIST)):
        if path.is_file():
            path.unlink()
            _remove_empty_parents(path.parent, save_dir)
            removed += 1
    (save_dir / FINISHED_LIST).unlink()
    return removed


def recover_unfinished(save_dir: Path, stamp: str) -> Path | None:
    """Move the annotated files of a run that did not finish (its ``annotated.unfinished.txt``) and the list itself to
    ``DIR.recovered-<stamp>/``, logged at WARNING (a partly written image, ``core/io.py``'s temp file, is removed); the
    folder, or None when no such run left any."""
    if not (save_dir / UNFINISHED_LIST).is_file():
        return None
    target = save_dir.with_name(f"{save_dir.name}.recovered-{stamp}")
    n = 2
    while target.exists():
        target, n = save_dir.with_name(f"{save_dir.name}.recovered-{stamp}-{n}"), n + 1
    target.mkdir(parents=True)
    moved = 0
    for path in list(listed(save_dir, UNFINISHED_LIST)):
        for partial in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):  # the image being written when it was killed
            partial.unlink()
        if path.is_file():
            destination = target / path.relative_to(save_dir)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(path, destination)
            moved += 1
        if path.parent.is_dir():
            _remove_empty_parents(path.parent, save_dir)
    shutil.move(save_dir / UNFINISHED_LIST, target / UNFINISHED_LIST)
    log.warning(
        "found %s, left by an earlier run that did not finish (killed?): its %d annotated images moved to %s",
        save_dir / UNFINISHED_LIST,
        moved,
        target,
    )
    return target


def _remove_empty_parents(folder: Path, top: Path) -> None:
    """Remove ``folder`` and its parents up to (not including) ``top`` while they are empty."""
    while folder != top and folder.is_relative_to(top) and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent
