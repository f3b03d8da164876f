"""Reading a video file or a live stream through an OpenCV-style capture, for :class:`~.sources.FrameSource`.

A video file is read to its end; a file that ends before the frame count its header gives is logged as a warning
(``stats.ended_early``). A live stream (camera index or URL) that fails to open or read is closed and reopened with
exponential backoff (:class:`ReconnectPolicy`); each interruption is a :class:`Gap` in the source's ``stats``, from the
start of the read that failed (or blocked for ``stall_s`` and then returned) to the next frame. When the attempts run
out the stream ends (``stats.gave_up``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import cv2
import numpy as np

if TYPE_CHECKING:
    from defect_detector.core.frame import Frame

log = logging.getLogger("defect_detector.inspect")


class Capture(Protocol):
    """The part of ``cv2.VideoCapture`` a source uses."""

    def isOpened(self) -> bool: ...  # noqa: N802 - OpenCV's name
    def read(self) -> tuple[bool, np.ndarray | None]: ...
    def get(self, prop_id: int) -> float: ...
    def release(self) -> None: ...


CaptureFactory = Callable[[Any], Capture]


@dataclass(frozen=True)
class ReconnectPolicy:
    """How a live stream recovers: up to ``attempts`` reopens, the first after ``delay`` seconds, each wait doubling up
    to ``max_delay``; a read that blocks ``stall_s`` seconds or more and then returns a frame counts as a gap too."""

    attempts: int = 5
    delay: float = 0.5
    max_delay: float = 8.0
    stall_s: float = 5.0


@dataclass
class Gap:
    """A stream interruption: when it started (``time.time()``: the start of the read that failed or blocked), how long
    until the next frame (measured on the monotonic clock, blocked reads and reopen delays included), why, and the
    reopen attempts."""

    start: float
    seconds: float
    reason: str
    attempts: int


@dataclass
class SourceStats:
    """Counters of a source: frames yielded (error frames included), ``skipped`` error frames, ``dropped``
    stale frames (``latest_only``), ``reconnects`` (successful reopens), ``gaps`` and ``gave_up``; for a video
    file ``expected_frames`` (its header's frame count, 0 when unknown) and ``ended_early`` (fewer were read)."""

    frames: int = 0
    skipped: int = 0
    dropped: int = 0
    reconnects: int = 0
    gaps: list[Gap] = field(default_factory=list)
    gave_up: bool = False
    expected_frames: int = 0
    ended_early: bool = False


def _read(capture: Capture) -> tuple[bool, np.ndarray | None, str]:
    """``capture.read()`` and the reason a gap would have if it failed (a read that raises is a failed read)."""
    try:
        ok, image = capture.read()
    except Exception as exc:  # noqa: BLE001 - a crashing read is a stream failure
        return False, None, f"read raised {type(exc).__name__}: {exc}"
    return ok, image, "read failed"


class CaptureReading:
    """The capture side of :class:`~.sources.FrameSource` (a mixin): its decode thread reads a ``video``, ``camera`` or
    ``stream`` source through :meth:`_read_capture`.

    The source provides ``source``, ``kind``, ``target`` (what ``capture_factory`` opens), ``capture_factory``,
    ``reconnect`` (:class:`ReconnectPolicy`), ``stats``, ``fps``, ``is_stream``, the ``_stop`` event and ``_lock``,
    and ``_frame`` (a decoded image -> :class:`~.sources.Frame`).
    """

    source: str
    kind: str
    target: Any
    capture_factory: CaptureFactory
    reconnect: ReconnectPolicy
    stats: SourceStats
    fps: float
    _stop: threading.Event
    _lock: threading.Lock
    is_stream: bool
    _frame: Callable[[Capture, np.ndarray, int, str, float], Frame]

    def _open_capture(self) -> Capture | None:
        try:
            capture = self.capture_factory(self.target)
        except Exception as exc:  # noqa: BLE001 - any failure to open is retried like a failed read
            log.warning("%s: cannot open capture: %s", self.source, exc)
            return None
        if capture is None or not capture.isOpened():
            if capture is not None:
                capture.release()
            return None
        fps = float(capture.get(cv2.CAP_PROP_FPS) or 0.0)
        self.fps = fps if np.isfinite(fps) and fps > 0 else 0.0
        return capture

    def _read_capture(self) -> Iterator[Frame]:
        """Frames of a video file (until its end) or of a live stream (reopened after failures)."""
        name = Path(self.source).name if self.kind == "video" else (f"camera{self.target}" if self.kind == "camera" else self.source)
        capture = self._first_capture()
        index = 0
        # a gap runs from the start of the read that failed (or blocked) to the next frame, on the monotonic clock
        gap_since: float | None = None if capture is not None else time.monotonic()
        gap_reason = "open failed"
        attempts = 0
        try:
            while not self._stop.is_set():
                if capture is None:
                    capture, attempts, gap_reason = self._reopen(attempts, gap_reason)
                    if capture is None:
                        return
                start, read_began = time.perf_counter(), time.monotonic()
                ok, image, gap_reason = _read(capture)
                if not ok or image is None:
                    if not self.is_stream:
                        self._check_end(index)
                        return
                    capture.release()
                    capture = None
                    gap_since = read_began if gap_since is None else gap_since
                    continue
                if gap_since is None and self.is_stream and time.monotonic() - read_began >= self.reconnect.stall_s:
                    gap_since, gap_reason = read_began, "stalled: the read blocked"  # then resumed, without failing
                if gap_since is not None:
                    self._gap(gap_since, gap_reason, attempts)
                    gap_since, attempts = None, 0
                yield self._frame(capture, image, index, name, start)
                index += 1
        finally:
            if capture is not None:
                capture.release()

    def _reopen(self, attempts: int, reason: str) -> tuple[Capture | None, int, str]:
        """Reopen a failed stream with backoff, counting on from ``attempts`` (``reason``: why the gap began).

        Returns the reopened capture (None when the source was stopped, or when the attempts ran out: ``stats.gave_up``),
        the attempts so far and the gap's reason (``reopen failed`` after a failed reopen)."""
        while not self._stop.is_set():
            attempts += 1
            if attempts > self.reconnect.attempts:
                self.stats.gave_up = True
                log.error("%s: giving up after %d reconnect attempts (%s)", self.source, self.reconnect.attempts, reason)
                return None, attempts, reason
            delay = min(self.reconnect.delay * 2 ** (attempts - 1), self.reconnect.max_delay)
            log.warning("%s: %s; reconnect attempt %d/%d in %.2f s", self.source, reason, attempts, self.reconnect.attempts, delay)
            if self._stop.wait(delay):
                return None, attempts, reason
            capture = self._open_capture()
            if capture is not None:
                with self._lock:
                    self.stats.reconnects += 1
                return capture, attempts, reason
            reason = "reopen failed"
        return None, attempts, reason

    def _gap(self, since: float, reason: str, attempts: int) -> None:
        """Record and log a gap that began at ``since`` (``time.monotonic()``) and ends now."""
        seconds = time.monotonic() - since
        gap = Gap(time.time() - seconds, seconds, reason, attempts)
        with self._lock:
            self.stats.gaps.append(gap)
        log.warning("%s: stream resumed after a %.2f s gap (%s, %d attempts)", self.source, gap.seconds, gap.reason, gap.attempts)

    def _first_capture(self) -> Capture | None:
        """The first open of the capture: a video file that does not open is an error (a stream retries), and records
        the frame count its header gives."""
        capture = self._open_capture()
        if capture is None and not self.is_stream:
            raise ValueError(f"{self.source}: cannot open video file (truncated or corrupt, or a codec this OpenCV build lacks)")
        if not self.is_stream:
            count = float(capture.get(cv2.CAP_PROP_FRAME_COUNT) or 0.0)
            self.stats.expected_frames = int(count) if np.isfinite(count) and count > 0 else 0
        return capture

    def _check_end(self, read: int) -> None:
        """At the end of a video file: warn when fewer than its header's frame count were read."""
        expected = self.stats.expected_frames
        if expected and read < expected:
            self.stats.ended_early = True
            log.warning("%s: video ended after %d of %d frames (truncated or corrupt file?)", self.source, read, expected)
