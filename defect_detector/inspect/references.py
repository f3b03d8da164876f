"""Golden references for the frames of a source: which reference belongs to a frame, registered into its pixels.

``--reference REF`` is either one image (the golden board of every frame: a fixed fixture, so the
:class:`~defect_detector.data.register.Registrar` reuses its transform from frame to frame) or a folder
holding each frame's reference under the frame's relative path, else under its file name. A frame whose
reference is missing, unreadable or does not register is never inspected: :meth:`References.align`
raises :class:`ReferenceError` with the reason, and the caller skips and counts the frame.
"""

from __future__ import annotations

import logging
import os
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np

from defect_detector.core.errors import DatasetError
from defect_detector.data.images import IMAGE_SUFFIXES, load_image_gray, pixel_fingerprint
from defect_detector.data.register import RegisterConfig, Registrar, Registration

log = logging.getLogger("defect_detector.inspect")

_MAX_CACHED = 8  # registrars (decoded references) kept for a folder of references
_MAX_KEYS = 4096  # golden files whose pixel fingerprint is kept
_MAX_WARNINGS = 10


class ReferenceError(ValueError):
    """A frame cannot be inspected against a reference; the message says which file and why."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def refusal_kind(reason: str) -> str:
    """How a golden image refused with ``reason`` (``Registration.reason``) is counted: ``occluded or not this board``
    when the golden check found one region unlike it (``data/register.py``), else ``reference does not match``."""
    return "occluded or not this board" if reason.startswith("occluded or not this board") else "reference does not match"


class References:
    """The reference of each frame, registered into the frame's pixel frame.

    ``path``: one image or a folder (see the module docstring). ``cfg``: registration settings.
    ``skipped`` counts the frames refused, by reason (``no reference``, ``unreadable reference``,
    ``reference does not match``, ``occluded or not this board``). Raises ``FileNotFoundError`` when ``path`` does not exist and
    :class:`~defect_detector.core.errors.DatasetError` for a single reference image that cannot be read.
    """

    def __init__(self, path: str | os.PathLike[str], cfg: RegisterConfig | None = None) -> None:
        self.path = Path(path)
        self.cfg = cfg or RegisterConfig()
        self.skipped: Counter[str] = Counter()
        self._registrars: OrderedDict[Path, Registrar] = OrderedDict()
        self._keys: OrderedDict[Path, tuple[tuple[int, int], str]] = OrderedDict()  # path -> ((mtime_ns, size), fingerprint)
        self._by_name: dict[str, Path] = {}
        self._by_stem: dict[str, Path] = {}
        if self.path.is_file():
            self._registrars[self.path] = self._load(self.path)
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
            raise ReferenceError(
                f"{file_name}: no golden image in {self.path} (same relative path or file name, any image extension)", "no reference"
            )
        return found

    def key(self, file_name: str) -> str:
        """The design key of frame ``file_name``'s golden image: the fingerprint of its decoded pixels
        (:func:`~defect_detector.data.images.pixel_fingerprint`), never its file name, so two copies of one golden
        image under two names are one design. Cached per file by path, modification time and size (one ``stat`` per
        frame); a file rewritten with new pixels gets a new key. :class:`ReferenceError` as :meth:`lookup`, or when
        the file cannot be read."""
        path = self.lookup(file_name)
        tag = self._tag(path)
        cached = self._keys.get(path)
        if cached is None or cached[0] != tag:
            self._registrar(path)
            cached = self._keys[path]
        self._keys.move_to_end(path)
        return cached[1]

    def golden(self, file_name: str) -> np.ndarray:
        """The golden image of frame ``file_name`` as its file holds it (uint8 ``[H, W]``, not registered; the decoded
        copy cached for registration). :class:`ReferenceError` as :meth:`key`."""
        return self._registrar(self.lookup(file_name)).reference

    @staticmethod
    def _tag(path: Path) -> tuple[int, int]:
        try:
            stat = path.stat()
        except OSError as exc:
            raise ReferenceError(f"{path}: cannot read the golden image ({exc.strerror})", "unreadable reference") from exc
        return stat.st_mtime_ns, stat.st_size

    def _load(self, path: Path) -> Registrar:
        """A :class:`Registrar` of the golden image at ``path``, its pixel fingerprint noted (``DatasetError`` if unreadable)."""
        tag = self._tag(path)
        image = load_image_gray(path)
        self._keys[path] = (tag, pixel_fingerprint(image))
        while len(self._keys) > _MAX_KEYS:
            self._keys.popitem(last=False)
        return Registrar(image, self.cfg)

    def _registrar(self, path: Path) -> Registrar:
        cached = self._keys.get(path)
        if path in self._registrars and cached is not None and cached[0] == self._tag(path):
            self._registrars.move_to_end(path)
            return self._registrars[path]
        try:
            registrar = self._load(path)
        except DatasetError as exc:
            raise ReferenceError(str(exc), "unreadable reference") from exc
        self._registrars[path] = registrar
        self._registrars.move_to_end(path)
        if len(self._registrars) > _MAX_CACHED:
            self._registrars.popitem(last=False)
        return registrar

    def align(self, image: np.ndarray, file_name: str) -> tuple[np.ndarray, Registration]:
        """The reference of frame ``file_name`` (uint8 ``image`` ``[H, W]``) warped into its pixels: uint8 ``[H, W]``
        and the :class:`Registration`. Raises :class:`ReferenceError` (and counts it) when there is no usable one."""
        try:
            path = self.lookup(file_name)
            warped, reg = self._registrar(path)(image)
            if not reg.ok:
                raise ReferenceError(
                    f"{file_name} against golden image {path.name}: {reg.reason}", refusal_kind(reg.reason)
                )
        except ReferenceError as exc:
            self.skipped[exc.reason] += 1
            if sum(self.skipped.values()) <= _MAX_WARNINGS:
                log.warning("not inspected: %s", exc)
            raise
        return warped, reg
