"""What a run does with its records: one small protocol, and the loop that feeds every consumer (issue 57 item 3).

``Inspector.stream`` (``inspect/inspector.py``) is the one producer of finished records. ``Inspector.run`` hands each
record, in order, to its consumers through :func:`consume`: the outputs (``inspect/outputs.py``: JSON, CSV, annotated
images, video), the run's tally (``inspect/run_summary.py``), the progress bar and the caller's ``on_result``. A new
output is one class with ``add``, ``close`` and ``discard``. The inspector's own consumers take every record it
finishes, single frames (``Inspector.inspect``) included, for as long as it is open: the line's yield to the metrics
sinks (:class:`LineYield`) and the station recorder (:class:`StationRows`); ``Inspector.close`` closes them.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from tqdm import tqdm

from defect_detector.core.board_yield import BoardYield
from defect_detector.inspect.record import Inspection
from defect_detector.monitor.alerts import AlertRouter
from defect_detector.station.records import utc_now

log = logging.getLogger("defect_detector.inspect")


class Consumer(Protocol):
    """Takes every record of a run in order (:meth:`add`), then :meth:`close` (the run ended, or was stopped: finish
    what was taken) or :meth:`discard` (the run failed: leave nothing half-done, keep an earlier run's results)."""

    def add(self, inspection: Inspection) -> None: ...

    def close(self) -> Any: ...

    def discard(self) -> None: ...


class Callback:
    """The caller's ``on_result``, called with each record in order."""

    def __init__(self, on_result: Callable[[Inspection], None]) -> None:
        self.on_result = on_result

    def add(self, inspection: Inspection) -> None:
        self.on_result(inspection)

    def close(self) -> None:
        return None

    def discard(self) -> None:
        return None


class Progress:
    """A progress bar over ``total`` frames (None: unknown) on stderr, its status line from ``status(frames)``."""

    def __init__(self, total: int | None, status: Callable[[int], str]) -> None:
        self.bar = tqdm(total=total, unit="frame", file=sys.stderr, disable=None, leave=False)
        self.status = status

    def add(self, inspection: Inspection) -> None:
        self.bar.update(1)
        self.bar.set_postfix_str(self.status(self.bar.n), refresh=False)

    def close(self) -> None:
        self.bar.close()

    def discard(self) -> None:
        self.bar.close()


class LineYield:
    """Each record's verdict, and whether it was its board's first inspection (``BoardYield``, by serial), to the
    ``router``'s sinks (the metrics port); nothing to send without a router."""

    def __init__(self, router: AlertRouter | None) -> None:
        self.router, self.yields = router, BoardYield()

    def add(self, inspection: Inspection) -> None:
        first = self.yields.add(inspection.verdict.value, inspection.trace.serial)
        if self.router is not None:
            self.router.on_verdict(inspection.verdict.value, first)

    def close(self) -> None:
        return None

    def discard(self) -> None:
        return None


class StationRows:
    """The station recorder (``station/recorder.py`` ``Recorder``, ``db=``): each record's station row, stamped now,
    queued (it never blocks the line); closed, it writes what it holds. A failed run's rows stay: those frames were
    inspected."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder

    def add(self, inspection: Inspection) -> None:
        self.recorder.record(inspection.to_station(utc_now()))

    def close(self) -> None:
        self.recorder.close()

    def discard(self) -> None:
        self.recorder.close()


def consume(records: Iterator[Inspection], consumers: Sequence[Consumer]) -> str | None:
    """Hand every record to every consumer, in order, then close them all; returns the signal that stopped the run
    (``SIGINT`` for Ctrl-C, or a stop signal's name, ``core.errors.Stopped``), None when the records ended. Any other
    error discards every consumer's unfinished work and is raised. The producer is closed either way (its source with
    it)."""
    stopped_by = None
    try:
        for inspection in records:
            for consumer in consumers:
                consumer.add(inspection)
    except KeyboardInterrupt as exc:
        stopped_by = getattr(exc, "name", "SIGINT")
        log.warning("%s: writing the outputs of the frames processed so far", stopped_by)
    except BaseException:
        for consumer in consumers:
            consumer.discard()
        raise
    finally:
        close = getattr(records, "close", None)
        if close is not None:
            close()
    for consumer in consumers:
        consumer.close()
    return stopped_by


__all__ = ["Callback", "Consumer", "LineYield", "Progress", "StationRows", "consume"]
