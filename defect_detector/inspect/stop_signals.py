"""Stopping is finishing: SIGTERM (systemd, docker), SIGHUP (a closed terminal) and SIGINT (Ctrl-C) end a run the
same way.

:class:`StopSignals` installs one handler for the three (main thread only) and restores the earlier ones on exit.
In its *immediate* state (loading, or waiting for the next frame: nothing half done) a signal raises
:class:`~defect_detector.core.errors.Stopped` at once, so a stalled stream does not delay the stop; in its
*deferred* state (a frame in inference or being written, outputs being finished, sinks closing) it is only
recorded, and :meth:`StopSignals.check` raises it at the next frame boundary. Either way
:meth:`Inspector.run <defect_detector.inspect.inspector.Inspector.run>` takes it as it takes Ctrl-C: the outputs
of the frames processed so far are written and renamed, and ``predict`` exits ``128 + signum`` (130, 143, 129).
A second signal while the outputs are finished is logged and ignored (systemd's SIGKILL after its timeout still ends it).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from defect_detector.core.errors import Stopped

log = logging.getLogger("defect_detector.inspect")

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class StopSignals:
    """Handle SIGINT, SIGTERM and SIGHUP while in use (``with StopSignals() as stop:``). ``signum`` is the first
    signal received (None before one); :meth:`deferred` and :meth:`immediate` switch how the next one is taken."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._immediate = True
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    @property
    def name(self) -> str | None:
        return signal.Signals(self.signum).name if self.signum is not None else None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            log.warning("%s received while stopping: ignored, the outputs are being finished", signal.Signals(signum).name)
            return
        self.signum = signum
        if self._immediate:
            raise Stopped(signum, signal.Signals(signum).name)
        log.warning("%s received: finishing the current frame, then writing the outputs", signal.Signals(signum).name)

    def check(self) -> None:
        """Raise :class:`Stopped` when a signal came while deferred (call it at a frame boundary)."""
        if self.signum is not None:
            raise Stopped(self.signum, signal.Signals(self.signum).name)

    @contextlib.contextmanager
    def immediate(self) -> Iterator[None]:
        """A signal in this block raises at once (waiting for a frame: nothing is half done)."""
        self.check()
        self._immediate = True
        try:
            yield
        finally:
            self._immediate = False

    def defer(self) -> None:
        """From now on a signal is only recorded (the run finishes what it is doing)."""
        self._immediate = False


def until_stopped(frames: Iterator[Any], stop: StopSignals | None) -> Iterator[Any]:
    """``frames``, taking a stop signal at once while waiting for the next one and at each frame boundary otherwise."""
    if stop is None:
        yield from frames
        return
    stop.defer()
    while True:
        with stop.immediate():
            try:
                item = next(frames)
            except StopIteration:
                return
        yield item
