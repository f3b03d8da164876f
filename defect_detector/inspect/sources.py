"""Frame sources for ``predict SOURCE``: image files, folders, globs, video files, cameras and network streams.

:func:`source_kind` says what a SOURCE string names; :func:`list_images` lists an image source's files in frame order
(and :func:`reads_back` whether a file would be among them).

:func:`open_source` turns the SOURCE string into a :class:`FrameSource`. Iterating it starts a decode
thread that reads ahead of inference through a bounded queue and yields :class:`Frame` objects in order:

- image file / folder / glob: files sorted by their path relative to SOURCE (folders recursively; files
  without an image extension are ignored); that order is the frame index. A file that cannot be decoded
  becomes an error frame (``image=None``, ``error`` set) and is counted as skipped; so does each page a multi-page
  TIFF promises and cannot give (cut short, a corrupt page directory).
- video file: frames in order until the end of the file. A file that ends before the frame count its header
  gives (``CAP_PROP_FRAME_COUNT``) is logged as a warning, ``ended after N of M frames`` (``stats.ended_early``).
- camera index (``"0"``) or stream URL (``rtsp://``, ``http(s)://``, ...): a live stream. A failed open or
  read closes the capture and reopens it with exponential backoff (``reconnect_attempts`` tries starting
  at ``reconnect_delay`` seconds, doubling up to ``max_reconnect_delay``; :class:`~.capture.ReconnectPolicy`); each
  gap is logged and counted in :attr:`FrameSource.stats`, its length from the start of the read that failed to the
  next frame. A read that blocks for ``stall_s`` (5 s) or more and then succeeds is a gap too (``stalled``). When the
  attempts are exhausted the source ends (``stats.gave_up``). Video files and streams are read by ``capture.py``.
  With ``latest_only`` the queue holds one frame and a newer frame replaces an unconsumed one
  (counted as ``dropped``), so a slow consumer always gets the newest frame.

Frames are converted to 8-bit grayscale; the first colour (really coloured, not gray stored as BGR), alpha or
16-bit input of a source is logged once at WARNING (:class:`~defect_detector.data.images.ConversionNotice`).

The capture factory (``cv2.VideoCapture`` by default) is injectable for tests.
"""

from __future__ import annotations

import fnmatch
import glob
import itertools
import logging
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from defect_detector.core.errors import DatasetError
from defect_detector.core.frame import Frame
from defect_detector.core.safe_text import mask_secrets
from defect_detector.data.images import IMAGE_SUFFIXES, ConversionNotice, gray_from_file, image_files, read_pages, to_gray_uint8
from defect_detector.inspect.capture import Capture, CaptureFactory, CaptureReading, ReconnectPolicy, SourceStats

__all__ = [
    "VIDEO_SUFFIXES",
    "Capture",
    "CaptureFactory",
    "Frame",
    "FrameSource",
    "ReconnectPolicy",
    "SourceStats",
    "list_images",
    "open_source",
    "source_kind",
]


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


log = logging.getLogger("defect_detector.inspect")

_POLL_S = 0.1


_END = object()


class FrameSource(CaptureReading):
    """An iterable of :class:`Frame` fed by a decode thread; use as a context manager (or call :meth:`close`).

    ``kind`` is one of ``image``, ``folder``, ``glob``, ``video``, ``camera``, ``stream``; ``is_stream`` is
    True for the kinds that are not finite files (``video`` is finite). ``fps`` is the capture's frame rate
    (0 when unknown or for image files); ``total`` the number of files (None for captures). ``reconnect``: how a live
    stream recovers (default :class:`~.capture.ReconnectPolicy`'s defaults).
    """

    def __init__(
        self,
        source: str,
        kind: str,
        files: list[tuple[Path, str]] | None = None,
        target: Any = None,
        capture_factory: CaptureFactory | None = None,
        queue_size: int = 8,
        latest_only: bool = False,
        reconnect: ReconnectPolicy | None = None,
    ) -> None:
        self.source = source
        self.kind = kind
        self.files = files or []
        self.target = target
        self.capture_factory = capture_factory or cv2.VideoCapture
        self.latest_only = latest_only
        self.reconnect = reconnect or ReconnectPolicy()
        self.stats = SourceStats()
        self.fps = 0.0
        self.conversions = ConversionNotice(source)
        self._queue: queue.Queue = queue.Queue(maxsize=1 if latest_only else max(1, queue_size))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    @property
    def is_stream(self) -> bool:
        return self.kind in ("camera", "stream")

    @property
    def total(self) -> int | None:
        return len(self.files) if self.kind in ("image", "folder", "glob") else None

    def __enter__(self) -> FrameSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Frame]:
        if self._thread is not None:
            raise RuntimeError("a FrameSource can be iterated only once")
        self._thread = threading.Thread(target=self._run, name=f"decode:{self.source}", daemon=True)
        self._thread.start()
        try:
            while True:
                item = self._queue.get()
                if item is _END:
                    break
                yield item
        finally:
            self.close()
        if self._error is not None:
            raise self._error

    def close(self, timeout: float = 5.0) -> None:
        """Stop the decode thread and release the capture (idempotent). A thread still blocked in a stream read after
        ``timeout`` seconds is left behind (a daemon: it releases its capture when the read returns), so a stalled
        camera never holds up a stop."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            deadline = time.monotonic() + timeout
            while self._thread.is_alive():
                self._drain()
                self._thread.join(timeout=_POLL_S)
                if time.monotonic() > deadline and self._thread.is_alive():
                    log.warning("%s: the decode thread is still blocked in a read after %.0f s: left behind", self.source, timeout)
                    return

    # --- producer side -------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            frames = self._read_files() if self.kind in ("image", "folder", "glob") else self._read_capture()
            for frame in frames:
                if not self._put(frame):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            self._error = exc
        finally:
            self._put_end()

    def _put(self, frame: Frame) -> bool:
        """Queue ``frame``; False once the consumer has stopped. ``latest_only`` replaces a waiting frame."""
        with self._lock:
            self.stats.frames += 1
            self.stats.skipped += frame.error is not None
        if self.latest_only:
            while not self._stop.is_set():
                try:
                    self._queue.put_nowait(frame)
                    return True
                except queue.Full:
                    try:
                        self._queue.get_nowait()
                        with self._lock:
                            self.stats.dropped += 1
                    except queue.Empty:
                        pass
            return False
        while not self._stop.is_set():
            try:
                self._queue.put(frame, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _put_end(self) -> None:
        while True:
            try:
                self._queue.put(_END, timeout=_POLL_S)
                return
            except queue.Full:
                if self._stop.is_set():
                    self._drain()

    def _drain(self) -> None:
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass

    def _read_files(self) -> Iterator[Frame]:
        """One frame per file, in order; a multi-page TIFF gives one frame per page (``name#page2`` from its second),
        each page it promises but cannot give an error frame (``data/images.py`` ``read_pages``)."""
        index = 0
        for path, name in self.files:
            if self._stop.is_set():
                return
            start = time.perf_counter()
            try:
                pages = read_pages(path)
            except DatasetError as exc:
                log.warning("not inspected: %s", exc)
                yield Frame(index, None, self.source, name, time.time(), str(exc), (time.perf_counter() - start) * 1000.0)
                index += 1
                continue
            for page, raw in enumerate(pages, start=1):
                page_name = name if page == 1 else f"{name}#page{page}"
                try:
                    if isinstance(raw, DatasetError):  # a page the file promises and cannot give (read_pages)
                        raise raw
                    image, kinds = gray_from_file(f"{path}#page{page}" if page > 1 else path, raw)
                    self.conversions.note(raw, kinds, page_name)
                    error = None
                except DatasetError as exc:
                    image, error = None, str(exc)
                    log.warning("not inspected: %s", exc)
                yield Frame(index, image, self.source, page_name, time.time(), error, (time.perf_counter() - start) * 1000.0)
                index += 1
                start = time.perf_counter()

    def _frame(self, capture: Capture, image: np.ndarray, index: int, name: str, start: float) -> Frame:
        """The :class:`Frame` of a decoded capture image (an error frame when it cannot be converted to gray)."""
        timestamp = capture.get(cv2.CAP_PROP_POS_MSEC) / 1000.0 if self.kind == "video" else time.time()
        try:
            gray, kinds = to_gray_uint8(image)
            self.conversions.note(image, kinds, f"{name} frame {index}")
            error = None
        except DatasetError as exc:
            gray, error = None, f"frame {index}: {exc}"
        source, name = mask_secrets(self.source), mask_secrets(name)  # a camera's rtsp://user:pw@... never reaches an output
        return Frame(index, gray, source, name, timestamp, error, (time.perf_counter() - start) * 1000.0)


def open_source(
    source: str,
    latest_only: bool = False,
    queue_size: int = 8,
    capture_factory: CaptureFactory | None = None,
    reconnect_attempts: int = 5,
    reconnect_delay: float = 0.5,
    max_reconnect_delay: float = 8.0,
) -> FrameSource:
    """Build the :class:`FrameSource` for SOURCE (see the module docstring); nothing is read until iteration.

    ``latest_only`` applies to live streams (camera, URL) only: files and videos are never dropped.
    Raises ``FileNotFoundError`` for a missing path and ``ValueError`` for an unknown file type or a
    folder/glob without images.
    """
    kind = source_kind(source)
    files = None
    target: Any = None
    if kind in ("image", "folder", "glob"):
        files = list_images(source, kind)
        if not files:
            raise ValueError(f"{source}: no image files ({', '.join(sorted(IMAGE_SUFFIXES))})")
    elif kind == "camera":
        target = int(source)
    else:
        target = source
    return FrameSource(
        source,
        kind,
        files=files,
        target=target,
        capture_factory=capture_factory,
        queue_size=queue_size,
        latest_only=latest_only and kind in ("camera", "stream"),
        reconnect=ReconnectPolicy(reconnect_attempts, reconnect_delay, max_reconnect_delay),
    )


def batches(frames: Iterator[Frame], size: int, max_frames: int | None) -> Iterator[list[Frame]]:
    """Group ``frames`` into lists of up to ``size``, reading no more than ``max_frames`` frames (None: all)."""
    frames = itertools.islice(frames, max_frames)
    while batch := list(itertools.islice(frames, size)):
        yield batch
