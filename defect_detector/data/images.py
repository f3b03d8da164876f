"""Reading image files as single-channel uint8, the one pixel format the detector consumes.

:data:`IMAGE_SUFFIXES` is the set of file suffixes treated as images everywhere (folder and glob sources,
reference folders, the YOLO and reference converters): the still-image formats OpenCV decodes to 8- or
16-bit pixels. Float formats (``.hdr``, ``.pfm``, ``.exr``) are left out because :func:`to_gray_uint8`
rejects them, and ``.gif`` is read as a video.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from defect_detector.core.errors import DatasetError

logger = logging.getLogger("defect_detector.data")

IMAGE_SUFFIXES = frozenset(".bmp .dib .jpg .jpeg .jpe .jp2 .png .webp .pbm .pgm .ppm .pnm .tif .tiff".split())


def image_files(folder: str | os.PathLike[str], recursive: bool = False) -> list[Path]:
    """The image files (:data:`IMAGE_SUFFIXES`, any case) of ``folder``, its subfolders too when ``recursive``, sorted
    by path: the one lister of golden images, good boards, dataset folders and folder sources."""
    root = Path(folder)
    found = root.rglob("*") if recursive else root.iterdir()
    return sorted(p for p in found if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())


def to_gray_uint8(image: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Convert an OpenCV image (``IMREAD_UNCHANGED`` layout: ``[H, W]``, ``[H, W, C]`` BGR/BGRA; uint8 or uint16)
    to single-channel uint8 ``[H, W]``.

    Returns the image and the conversions applied, any of ``"colour"``, ``"alpha"``, ``"16-bit"`` (alpha is dropped;
    a 16-bit container is scaled by its real bit depth, :func:`container_depth`: 10- or 12-bit camera data fills the
    8-bit range instead of ending up near black). Other dtypes raise :class:`DatasetError`.
    """
    kinds: list[str] = []
    if image.ndim == 3:
        channels = image.shape[2]
        if channels == 1:
            image = image[:, :, 0]
        elif channels == 2:
            image, kinds = image[:, :, 0], ["alpha"]
        elif channels == 3:
            image, kinds = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY), ["colour"]
        elif channels == 4:
            image, kinds = cv2.cvtColor(image, cv2.COLOR_BGRA2GRAY), ["colour", "alpha"]
        else:
            raise DatasetError(f"unsupported number of channels: {channels}")
    elif image.ndim != 2:
        raise DatasetError(f"unsupported image shape {image.shape}")
    if image.dtype == np.uint16:
        bits = container_depth(image)
        image = cv2.convertScaleAbs(image, alpha=255.0 / (2**bits - 1))
        kinds.append(f"16-bit:{bits}")
    elif image.dtype != np.uint8:
        raise DatasetError(f"unsupported pixel type {image.dtype}")
    return np.ascontiguousarray(image), kinds


DEPTHS = (8, 10, 12, 14, 16)
"""Bit depths a 16-bit container may hold (cameras write 10-, 12- or 14-bit data into 16-bit TIFFs and arrays)."""


def container_depth(image: np.ndarray) -> int:
    """The bit depth of the data in a uint16 image: the smallest of :data:`DEPTHS` that holds its brightest pixel.

    Read per frame, so a frame far darker than its full range (a dark frame of 12-bit data, brightest pixel under
    1024) is scaled as 10-bit data; such a frame is a lighting fault, which drift monitoring reports."""
    peak = int(image.max()) if image.size else 0
    return next(bits for bits in DEPTHS if peak < 2**bits)


def has_colour(image: np.ndarray, tolerance: float = 8 / 255) -> bool:
    """Whether a BGR / BGRA image's colour channels differ by more than ``tolerance`` of full scale anywhere (sampled
    every 4th pixel): False for grayscale content stored as BGR (every video decoder's output, many scanners' files;
    lossy codecs leave channels a few levels apart) and for ``[H, W]`` / ``[H, W, 1|2]``."""
    if image.ndim != 3 or image.shape[2] < 3:
        return False
    sample = image[::4, ::4, :3].astype(np.int32)
    limit = tolerance * (65535 if image.dtype == np.uint16 else 255)
    return bool(np.abs(sample[..., 1:] - sample[..., :1]).max(initial=0) > limit)


class ConversionNotice:
    """Warns once per source and conversion kind, at WARNING on ``logger``, that its images were converted to 8-bit
    grayscale: ``colour`` (only for images whose channels really differ, see :func:`has_colour`), ``alpha``
    (dropped) and ``16-bit`` (scaled by 255/65535), naming the first image converted. ``warned`` holds the kinds
    reported so far."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.warned: set[str] = set()

    def note(self, image: np.ndarray, kinds: list[str], name: str) -> None:
        """Record the conversions ``kinds`` that :func:`to_gray_uint8` applied to ``image`` (as decoded) of ``name``."""
        for kind in kinds:
            if kind in self.warned or (kind == "colour" and not has_colour(image)):
                continue
            self.warned.add(kind)
            bits = kind.partition(":")[2]
            what = {"colour": "colour", "alpha": "alpha channel dropped"}.get(kind, f"16-bit ({bits}-bit data) scaled to 8-bit")
            logger.warning(
                "%s: converting %s input to 8-bit grayscale, the only format the model reads (first: %s; once per source)",
                self.source,
                what,
                name,
            )


def read_image(path: str | os.PathLike[str]) -> np.ndarray:
    """Read one image file as decoded (``IMREAD_UNCHANGED``: ``[H, W]`` or ``[H, W, C]``, uint8 or uint16 ...).

    Raises :class:`DatasetError` naming ``path`` for a missing, empty, truncated or undecodable file, or one whose header
    claims more pixels than OpenCV decodes (``CV_IO_MAX_IMAGE_PIXELS``, 2^30: refused from the header, nothing decoded).
    """
    return _decoded(path, _file_bytes(path))


def read_pages(path: str | os.PathLike[str]) -> list[np.ndarray | DatasetError]:
    """Every page of an image file, in order: one for most formats, each page of a multi-page TIFF (a scanner's stack
    of boards: every page is a board), as decoded. Each page a TIFF's directories promise but that cannot be decoded (a
    file cut short, a corrupt page directory or page: :func:`tiff_pages`) is a :class:`DatasetError` in its place,
    naming ``PATH#pageN`` and why, so no page is lost without a word. The file is read once. A file of one page that
    cannot be read raises as :func:`read_image`."""
    data = _file_bytes(path)
    if data[:4].tobytes() not in _TIFF_MAGIC:
        return [_decoded(path, data)]
    promised = tiff_pages(data)
    if promised.expected <= 1:
        return [_decoded(path, data)]
    try:
        ok, decoded = cv2.imdecodemulti(data, cv2.IMREAD_UNCHANGED)
    except cv2.error:
        ok, decoded = False, []
    pages: list[np.ndarray | DatasetError] = list(decoded) if ok else []
    for index in range(len(pages), promised.expected):  # what OpenCV stopped before: page by page, or why not
        pages.append(_tiff_page(path, data, index, promised))
    return pages


_TIFF_MAGIC = (b"II*\x00", b"MM\x00*")
_PAGE_NUMBER = 297
"""The TIFF tag PageNumber: two SHORTs, this page's number and the pages in the document (0: unknown)."""


@dataclass(frozen=True)
class TiffPages:
    """What a classic TIFF's chain of page directories (IFDs) says about its pages: ``chained``, the directories that
    can be read; ``declared``, the page count its first directory's PageNumber tag gives (None when absent or 0; used
    only where the chain breaks); ``broken``, why the chain ends before a directory it points to (None when it ends as
    a TIFF ends)."""

    chained: int
    declared: int | None
    broken: str | None

    @property
    def expected(self) -> int:
        """The pages the file promises: its chained directories, and where the chain breaks its declared count (at
        least one more page when it declares none: how many are missing is unknown)."""
        if self.broken is None:
            return self.chained
        return max(self.declared, self.chained) if self.declared is not None else self.chained + 1

    def missing(self, page: int) -> str:
        """Why page ``page`` (1-based), past the chained directories of a broken chain, cannot be read."""
        if self.declared is not None:
            return f"page {page} of the {self.declared} the file declares cannot be read: {self.broken}"
        return f"the pages from {page} on cannot be read (how many is unknown: the file does not say): {self.broken}"


def tiff_pages(data: np.ndarray) -> TiffPages:
    """Walk the page directories of a classic TIFF (``data``: its bytes, uint8 ``[N]``; 32-bit offsets, either byte
    order). OpenCV decodes the pages it can reach and stops without saying how many a damaged file should hold, so this
    reads the chain itself: the directory offsets, each directory's entry count and the first one's PageNumber."""
    order = "<" if data[:2].tobytes() == b"II" else ">"
    size = len(data)
    (offset,) = struct.unpack_from(f"{order}I", data, 4)
    chained, declared, seen = 0, None, set()
    while offset:
        page = chained + 1
        if offset in seen:
            return TiffPages(chained, declared, f"page {page}'s directory points back to an earlier one (corrupt)")
        if offset + 2 > size:
            cut = f"the file ends at byte {size}, before page {page}'s directory at byte {offset} (cut short)"
            return TiffPages(chained, declared, cut)
        (entries,) = struct.unpack_from(f"{order}H", data, offset)
        end = offset + 2 + 12 * entries
        if entries == 0 or end + 4 > size:
            corrupt = f"page {page}'s directory is corrupt or cut off ({entries} entries at byte {offset} of {size})"
            return TiffPages(chained, declared, corrupt)
        if chained == 0:
            declared = _declared_pages(data, order, offset, entries)
        seen.add(offset)
        chained += 1
        (offset,) = struct.unpack_from(f"{order}I", data, end)
    return TiffPages(chained, declared, None)


def _declared_pages(data: np.ndarray, order: str, offset: int, entries: int) -> int | None:
    """The page count in the PageNumber entry of the directory at ``offset`` (None when it has none, or says 0)."""
    for entry in range(offset + 2, offset + 2 + 12 * entries, 12):
        tag, kind, count = struct.unpack_from(f"{order}HHI", data, entry)
        if tag == _PAGE_NUMBER and kind == 3 and count == 2:  # SHORT[2], held in the entry itself
            total = struct.unpack_from(f"{order}HH", data, entry + 8)[1]
            return total or None
    return None


def _tiff_page(path: str | os.PathLike[str], data: np.ndarray, index: int, promised: TiffPages) -> np.ndarray | DatasetError:
    """Page ``index`` (0-based) of the TIFF ``data``, decoded alone, or the :class:`DatasetError` that says why not."""
    where = f"{path}#page{index + 1}"
    if index >= promised.chained:
        return DatasetError(f"{where}: {promised.missing(index + 1)}")
    try:
        ok, decoded = cv2.imdecodemulti(data, cv2.IMREAD_UNCHANGED, range=(index, index + 1))
    except cv2.error:
        ok, decoded = False, []
    if not ok or not decoded:
        damage = f" ({promised.broken})" if promised.broken else ""
        return DatasetError(f"{where}: its page directory is there, but OpenCV cannot decode its pixels: corrupt or cut off{damage}")
    return decoded[0]


def _file_bytes(path: str | os.PathLike[str]) -> np.ndarray:
    """uint8 ``[N]``: the bytes of the file at ``path`` (:class:`DatasetError` naming it when it cannot be read)."""
    try:
        return np.fromfile(path, dtype=np.uint8)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path}: cannot read image file: {exc}") from exc


def _decoded(path: str | os.PathLike[str], data: np.ndarray) -> np.ndarray:
    """The image the file ``path`` holds (its bytes ``data``), decoded; errors in words (:func:`read_image`)."""
    if data.size == 0:
        raise DatasetError(f"{path}: zero-byte image file")
    if data[:2].tobytes() == b"\xff\xd8" and b"\xff\xd9" not in data[-4096:].tobytes():
        raise DatasetError(f"{path}: truncated JPEG (no end-of-image marker)")
    try:
        if data[:2].tobytes() == b"\xff\xd8":
            image, complaint = _decode_jpeg(data)
            if complaint:
                raise DatasetError(f"{path}: corrupt JPEG data (libjpeg: {complaint})")
        else:
            image = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
    except cv2.error as exc:
        if "CV_IO_MAX_IMAGE_PIXELS" in str(exc):
            raise DatasetError(f"{path}: image too large: its header claims more than 2^30 pixels (OpenCV's limit)") from None
        last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise DatasetError(f"{path}: corrupt or unsupported image (OpenCV: {last[:160]})") from None
    if image is None:
        raise DatasetError(f"{path}: corrupt or unsupported image (decode failed)")
    return image


_STDERR_LOCK = threading.Lock()


def _decode_jpeg(data: np.ndarray) -> tuple[np.ndarray | None, str]:
    """``cv2.imdecode`` of JPEG bytes, and what libjpeg complained of while decoding ("" when nothing).

    OpenCV decodes a JPEG whose entropy-coded data is corrupt (a zeroed middle, bad bytes) into a half-grey image and
    says so only by libjpeg's warning on the process's stderr ("Corrupt JPEG data: ..."). So the decode runs with file
    descriptor 2 sent to a temporary file (one decode at a time); libjpeg's lines are returned, anything else written
    to stderr meanwhile is passed on."""
    with _STDERR_LOCK, tempfile.TemporaryFile() as capture:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(capture.fileno(), 2)
        try:
            image = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        lines = capture.read().decode("utf-8", "replace").splitlines()
    complaints = [line for line in lines if "JPEG" in line or "jpeg" in line]
    others = [line for line in lines if line not in complaints]
    if others:
        os.write(2, ("\n".join(others) + "\n").encode())
    return image, "; ".join(c.strip() for c in complaints)[:200]


def gray_from_file(path: str | os.PathLike[str], image: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """:func:`to_gray_uint8` of ``image`` (read from ``path``), its :class:`DatasetError` naming ``path``."""
    try:
        return to_gray_uint8(image)
    except DatasetError as exc:
        raise DatasetError(f"{path}: {exc}") from exc


def decode_gray(path: str | os.PathLike[str]) -> tuple[np.ndarray, list[str]]:
    """Read and convert one image file; returns what :func:`to_gray_uint8` returns.

    Raises :class:`DatasetError` naming ``path`` for a missing, empty, truncated or undecodable file.
    """
    return gray_from_file(path, read_image(path))


def load_image_gray(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an image file as single-channel uint8 ``[H, W]`` (colour, alpha and 16-bit are converted).

    Raises :class:`DatasetError` naming the path for a missing, empty, truncated or undecodable file.
    """
    image, kinds = decode_gray(path)
    if kinds:
        logger.debug("%s: converted (%s) to 8-bit grayscale", path, ", ".join(kinds))
    return image


def pixel_fingerprint(image: np.ndarray) -> str:
    """The name of an image by its pixels alone: ``"image:"`` and a 16-hex-digit BLAKE2b digest of every pixel of
    ``image`` (uint8 ``[H, W]``) and its shape. Two files with the same decoded pixels share it, whatever their names."""
    digest = hashlib.blake2b(np.ascontiguousarray(image).tobytes(), digest_size=8)
    digest.update(repr((image.shape, str(image.dtype))).encode())
    return f"image:{digest.hexdigest()}"
