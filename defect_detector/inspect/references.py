"""Golden references for the frames of a source: which golden image file belongs to a frame, and its pixel key.

``--reference REF`` is either one image (the golden board of every frame: a fixed fixture, so its design's
:class:`~defect_detector.align.register.Registrar` reuses its transform from frame to frame) or a folder
holding each frame's reference under the frame's relative path, else under its file name. A frame whose
reference is missing, unreadable or does not register is never inspected: the prepare stage (``inspect/prepare.py``,
through ``inspect/designs.py``) refuses it with a :class:`ReferenceError` naming the reason, and counts it.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

import numpy as np

from defect_detector.core.errors import DatasetError, ReferenceError
from defect_detector.core.refusal import RefusalKind
from defect_detector.data.images import IMAGE_SUFFIXES, load_image_gray, pixel_fingerprint

_MAX_KEYS = 4096  # golden files whose pixel fingerprint is kept


class References:
    """Where each frame's golden image comes from: one image for every frame, or a folder (see the module docstring).

    ``path``: one image or a folder (``inspect/designs.py`` registers them with the weights' ``register`` settings).
    Raises ``FileNotFoundError`` when ``path`` does not exist and :class:`~defect_detector.core.errors.DatasetError`
    for a single reference image that cannot be read.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._keys: OrderedDict[Path, tuple[tuple[int, ...], str]] = OrderedDict()  # path -> (its _tag, fingerprint)
        self._last: tuple[Path, tuple[int, int], np.ndarray] | None = None  # the last file decoded, for image()
        self._by_name: dict[str, Path] = {}
        self._by_stem: dict[str, Path] = {}
        if self.path.is_file():
            self._read(self.path)
        elif self.path.is_dir():
            for p in sorted(self.path.rglob("*")):
                if p.suffix.lower() in IMAGE_SUFFIXES:
                    self._by_name.setdefault(p.name, p)
                    self._by_stem.setdefault(str(p.relative_to(self.path).with_suffix("")), p)
                    self._by_stem.setdefault(p.stem, p)
            if not self._by_name:
                raise FileNotFoundError(f"{self.path}: no reference images in this folder")
        else:
            raise FileNotFoundError(f"{self.path}: reference image or folder not found")

    @property
    def single(self) -> bool:
        """One golden image for every frame."""
        return self.path.is_file()

    def lookup(self, file_name: str) -> Path:
        """The reference file of the frame named ``file_name`` (relative to SOURCE): the same relative path, else the same
        file name, else the same relative path or name with any image extension (a ``.jpg`` frame's golden image may be a
        ``.png``); :class:`ReferenceError` if none."""
        if self.single:
            return self.path
        candidate = self.path / file_name
        if candidate.is_file():
            return candidate
        name = Path(file_name)
        found = self._by_name.get(name.name) or self._by_stem.get(str(name.with_suffix(""))) or self._by_stem.get(name.stem)
        if found is None:
            message = f"{file_name}: no golden image in {self.path} (same relative path or file name, any image extension)"
            raise ReferenceError(message, RefusalKind.NO_REFERENCE)
        return found

    def key(self, file_name: str) -> str:
        """The design key of frame ``file_name``'s golden image: the fingerprint of its decoded pixels
        (:func:`~defect_detector.data.images.pixel_fingerprint`), never its file name, so two copies of one golden
        image under two names are one design. Cached per file by path and its :meth:`_tag` (one ``stat`` per frame); a
        file rewritten with new pixels gets a new key, even at the same size with its modification time put back.
        :class:`ReferenceError` as :meth:`lookup`, or when the file cannot be read."""
        return self.key_at(self.lookup(file_name))

    def key_at(self, path: Path) -> str:
        """:meth:`key` of the golden image file at ``path`` (a :meth:`lookup` result)."""
        tag = self._tag(path)
        cached = self._keys.get(path)
        if cached is None or cached[0] != tag:
            self._read(path)
            cached = self._keys[path]
        self._keys.move_to_end(path)
        return cached[1]

    def image(self, file_name: str) -> np.ndarray:
        """The golden image of frame ``file_name`` as its file holds it (uint8 ``[H, W]``, not registered): the copy
        :meth:`key` just decoded, else read again. :class:`ReferenceError` as :meth:`key`."""
        return self.image_at(self.lookup(file_name))

    def image_at(self, path: Path) -> np.ndarray:
        """:meth:`image` of the golden image file at ``path`` (a :meth:`lookup` result)."""
        if self._last is not None and self._last[0] == path and self._last[1] == self._tag(path):
            return self._last[2]
        return self._read(path)

    @staticmethod
    def _tag(path: Path) -> tuple[int, ...]:
        """What changes when the file at ``path`` does: modification and change times, size and inode (a rewrite whose
        modification time is set back still moves the change time; a file renamed over it has another inode)."""
        try:
            stat = path.stat()
        except OSError as exc:
            raise ReferenceError(f"{path}: cannot read the golden image ({exc.strerror})", RefusalKind.UNREADABLE_REFERENCE) from exc
        return stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino

    def _read(self, path: Path) -> np.ndarray:
        """Decode the golden image at ``path`` and note its pixel fingerprint (:class:`ReferenceError` if unreadable;
        ``DatasetError`` for the single reference given at start)."""
        tag = self._tag(path)
        try:
            image = load_image_gray(path)
        except DatasetError as exc:
            if self.single and not self._keys:
                raise
            raise ReferenceError(str(exc), RefusalKind.UNREADABLE_REFERENCE) from exc
        self._keys[path] = (tag, pixel_fingerprint(image))
        self._last = (path, tag, image)
        while len(self._keys) > _MAX_KEYS:
            self._keys.popitem(last=False)
        return image
