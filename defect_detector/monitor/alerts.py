"""Where drift events and per-frame metrics go: log, JSONL file, webhook, Prometheus.

:class:`AlertRouter` is the one object the inference loop talks to: ``on_frame`` feeds the
:class:`~defect_detector.monitor.drift.DriftDetector` (if any) and fans the frame metrics and the
resulting events out to every sink. A failing sink is logged and skipped; it never stops inference.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import queue
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from defect_detector.core.frame_record import Prepared
from defect_detector.core.safe_text import mask_secrets, mask_url
from defect_detector.core.types import Detections
from defect_detector.core.verdict import VERDICTS, Verdict
from defect_detector.monitor.baseline import STATISTICS
from defect_detector.monitor.drift import DriftDetector, DriftEvent
from defect_detector.monitor.golden import Golden

logger = logging.getLogger("defect_detector.monitor")

STAGES = ("decode", "preprocess", "model", "postprocess")
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_SEVERITY_LEVEL = {"warning": logging.WARNING, "critical": logging.ERROR, "info": logging.INFO}


class Sink:
    """Receives events and frame metrics. Subclasses override what they need; defaults do nothing."""

    def on_event(self, event: DriftEvent) -> None:
        """Called for every event (drift, recovered, rebaseline, changeover)."""

    def on_frame(
        self,
        frame_index: int,
        source: str,
        stats: np.ndarray | None,
        timings: Mapping[str, float],
        num_detections: int,
        score: float | None,
        layer_names: Sequence[str],
    ) -> None:
        """Called once per frame: ``stats`` float64 ``[L, 2]`` (or None), ``timings`` seconds per stage,
        ``score`` the drift score (None without a detector)."""

    def on_verdict(self, verdict: str, first: bool) -> None:
        """Called once per frame record, inspected or not: its ``verdict`` (``core/verdict.py``) and whether it was its
        board's first inspection (``core/board_yield.py``)."""

    def close(self) -> None:
        """Release files, threads and ports."""

    @property
    def undelivered(self) -> int:
        """Events this sink took but could not deliver (failed, dropped, stranded at close)."""
        return 0


FOLD_CHANGEOVERS = 10
"""A changeover within this many frames of the previous one is folded into one log line, not logged on its own (a line
where every board has its own golden image changes design every frame); the alerts file still lists each."""


class LogSink(Sink):
    """Logs each event on ``logger`` (warning / error / info by severity). Changeovers that follow each other within
    :data:`FOLD_CHANGEOVERS` frames are folded: the first is logged, the rest counted into one line, written before the
    next other event and at :meth:`close`."""

    def __init__(self, log: logging.Logger | None = None) -> None:
        self.log = log or logger
        self._last_changeover: int | None = None
        self._folded = 0  # changeovers not logged yet, at frames _folded_span[0] to _folded_span[1]
        self._folded_span = (0, 0)

    def on_event(self, event: DriftEvent) -> None:
        if event.event == "changeover":
            near = self._last_changeover is not None and event.frame - self._last_changeover < FOLD_CHANGEOVERS
            self._last_changeover = event.frame
            if near:
                self._folded_span = (self._folded_span[0] if self._folded else event.frame, event.frame)
                self._folded += 1
                return
            self._flush()
            self.log.info("changeover at frame %d of %s: %s", event.frame, event.source, event.reason)
            return
        self._flush()
        where = f" in {', '.join(event.layers)}" if event.layers else ""
        self.log.log(
            _SEVERITY_LEVEL.get(event.severity, logging.WARNING),
            "%s %s at frame %d of %s (score %.2f)%s: %s",
            event.severity,
            event.event,
            event.frame,
            event.source,
            event.score,
            where,
            event.reason,
        )

    def _flush(self) -> None:
        if self._folded:
            self.log.info(
                "%d more changeovers, frames %d-%d (a new golden image within %d frames of the last: each board with its own "
                "golden image?); the alerts file lists each",
                self._folded,
                *self._folded_span,
                FOLD_CHANGEOVERS,
            )
            self._folded = 0

    def close(self) -> None:
        self._flush()


class JsonlSink(Sink):
    """Appends one JSON object per event to ``path`` (DESIGN.md ``--alerts``), flushed per line.

    The parent folder is created. Lines from several threads do not interleave.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def on_event(self, event: DriftEvent) -> None:
        line = json.dumps(event.to_dict(), separators=(",", ":")) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()


class WebhookSink(Sink):
    """POSTs each event as JSON to an http(s) ``url`` from a background daemon thread.

    ``on_event`` never blocks: events go into a queue of ``max_queue``; when it is full the event is
    dropped and counted in ``dropped``. Each POST waits at most ``timeout`` seconds and is retried
    ``retries`` times with exponential backoff (``backoff``, 2x, 4x ... seconds); an event that still
    fails is counted in ``failed``, a delivered one in ``sent``. ``close(timeout)`` lets the thread
    drain the queue for up to ``timeout`` seconds; what is left is counted as dropped.
    """

    def __init__(self, url: str, timeout: float = 2.0, max_queue: int = 100, retries: int = 3, backoff: float = 0.5) -> None:
        scheme = urllib.parse.urlsplit(url).scheme
        if scheme not in ("http", "https"):
            raise ValueError(f"webhook URL must start with http:// or https://, got {mask_secrets(url)!r}")
        if timeout <= 0 or max_queue < 1 or retries < 0 or backoff < 0:
            raise ValueError(
                f"need timeout > 0, max_queue >= 1, retries >= 0 and backoff >= 0, got {timeout}, {max_queue}, {retries}, {backoff}"
            )
        self.url = url
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.sent = 0
        self.failed = 0
        self.dropped = 0
        self.stranded = 0  # in a POST that still hung when close() gave up on it
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=max_queue)
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="drift-webhook", daemon=True)
        self._thread.start()

    def on_event(self, event: DriftEvent) -> None:
        if self._closing.is_set():
            self._count("dropped")
            return
        try:
            self._queue.put_nowait(event.to_dict())
        except queue.Full:
            self._count("dropped")

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def _run(self) -> None:
        while True:
            try:
                payload = self._queue.get(timeout=0.05)
            except queue.Empty:
                if self._closing.is_set():
                    return
                continue
            self._count("sent" if self._post(payload) else "failed")

    def _post(self, payload: dict[str, Any]) -> bool:
        data = json.dumps(payload).encode("utf-8")
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(self.url, data=data, headers={"Content-Type": "application/json"}, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    response.read()
                return True
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
                if attempt == self.retries:
                    why = mask_secrets(str(exc))
                    logger.warning("webhook %s: giving up on an event after %d tries: %s", mask_url(self.url), attempt + 1, why)
                    return False
                self._closing.wait(self.backoff * (2**attempt))
        return False

    @property
    def undelivered(self) -> int:
        with self._lock:
            return self.failed + self.dropped + self.stranded

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting events and give the thread up to ``timeout`` seconds to deliver the queued ones; what is left
        (queued, or in a POST that hangs) is counted and the losses logged once, at WARNING."""
        if self._closing.is_set():
            return
        self._closing.set()
        self._thread.join(timeout)
        left = self._queue.qsize()
        with self._lock:
            self.dropped += left
            if self._thread.is_alive():  # still inside a POST to a server that does not answer
                self.stranded = 1
        if self.undelivered:
            logger.warning(
                "webhook %s: %d drift events not delivered (failed %d, dropped %d, still in a hanging POST at close %d; sent %d)",
                mask_url(self.url),
                self.undelivered,
                self.failed,
                self.dropped,
                self.stranded,
                self.sent,
            )


class PrometheusSink(Sink):
    """Serves Prometheus metrics on ``addr:port`` (``port`` 0 = any free port; see ``self.port``).

    Metrics (in a dedicated ``CollectorRegistry`` unless ``registry`` is given):
    ``defect_detector_layer_activation{layer, statistic}`` gauge (latest frame),
    ``defect_detector_drift_score`` gauge, ``defect_detector_drift_state`` gauge (0 normal or warming up,
    1 warning, 2 critical), counters ``defect_detector_frames_total``,
    ``defect_detector_alerts_total{severity}``, ``defect_detector_detections_total``, and the
    histogram ``defect_detector_stage_latency_seconds{stage}`` (decode, preprocess, model,
    postprocess). Yield (``core/board_yield.py``): ``defect_detector_boards_total{verdict}`` (every frame record by
    verdict, ``not_inspected`` included), ``defect_detector_first_inspections_total`` (boards inspected),
    ``defect_detector_first_passes_total`` (of those, passed on their first inspection) and the gauge
    ``defect_detector_first_pass_yield`` (their ratio since the process started; a window's is
    ``increase(first_passes_total) / increase(first_inspections_total)``).
    """

    def __init__(self, port: int, registry: Any = None, addr: str = "0.0.0.0") -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

        if not 0 <= port <= 65535:
            raise ValueError(f"metrics port must be in 0..65535, got {port}")
        self.registry = registry if registry is not None else CollectorRegistry()
        self.layer_activation = Gauge(
            "defect_detector_layer_activation",
            "Latest per-frame activation statistic of a monitored layer.",
            ["layer", "statistic"],
            registry=self.registry,
        )
        self.drift_score = Gauge(
            "defect_detector_drift_score", "Latest drift score (Mahalanobis distance, monitor/drift.py).", registry=self.registry
        )
        self.drift_state = Gauge("defect_detector_drift_state", "Alert state: 0 normal, 1 warning, 2 critical.", registry=self.registry)
        self.frames = Counter("defect_detector_frames", "Frames processed.", registry=self.registry)
        self.alerts = Counter("defect_detector_alerts", "Drift alerts raised, by severity.", ["severity"], registry=self.registry)
        self.detections = Counter("defect_detector_detections", "Defects detected.", registry=self.registry)
        self.boards = Counter("defect_detector_boards", "Frame records by verdict.", ["verdict"], registry=self.registry)
        self.first_inspections = Counter("defect_detector_first_inspections", "Boards inspected.", registry=self.registry)
        self.first_passes = Counter("defect_detector_first_passes", "Boards passed on their first inspection.", registry=self.registry)
        self.first_pass_yield = Gauge(
            "defect_detector_first_pass_yield", "First passes / boards inspected since the process started.", registry=self.registry
        )
        self._yield = [0, 0]  # first passes, first inspections
        self.latency = Histogram(
            "defect_detector_stage_latency_seconds",
            "Per-frame latency of a pipeline stage.",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        for severity in ("warning", "critical"):
            self.alerts.labels(severity=severity)
        for stage in STAGES:
            self.latency.labels(stage=stage)
        for verdict in VERDICTS:
            self.boards.labels(verdict=verdict)
        try:
            started = start_http_server(port, addr=addr, registry=self.registry)
        except OSError as exc:  # e.g. the port in use: name it
            raise ValueError(f"--metrics-port {port}: cannot serve metrics on {addr}:{port}: {exc.strerror or exc}") from exc
        self._server = started[0] if isinstance(started, tuple) else None
        self.port = int(self._server.server_address[1]) if self._server is not None else port

    def count_undelivered(self, total: Callable[[], int]) -> None:
        """Serve ``defect_detector_alerts_undelivered_total``, read from ``total()`` at each scrape (the router's count)."""
        from prometheus_client.core import CounterMetricFamily

        class _Undelivered:
            def collect(self) -> Any:
                yield CounterMetricFamily(
                    "defect_detector_alerts_undelivered", "Drift events a sink could not deliver (webhook failed, hung or full).", total()
                )

        self.registry.register(_Undelivered())

    def on_frame(
        self,
        frame_index: int,
        source: str,
        stats: np.ndarray | None,
        timings: Mapping[str, float],
        num_detections: int,
        score: float | None,
        layer_names: Sequence[str],
    ) -> None:
        self.frames.inc()
        if num_detections:
            self.detections.inc(num_detections)
        for stage, seconds in timings.items():
            self.latency.labels(stage=stage).observe(seconds)
        if stats is not None:
            for name, row in zip(layer_names, stats):
                for statistic, value in zip(STATISTICS, row):
                    self.layer_activation.labels(layer=name, statistic=statistic).set(float(value))
        if score is not None:
            self.drift_score.set(score)

    def on_verdict(self, verdict: str, first: bool) -> None:
        self.boards.labels(verdict=verdict).inc()
        if first:
            passed = verdict == Verdict.PASS
            self.first_inspections.inc()
            self.first_passes.inc(passed)
            self._yield = [self._yield[0] + passed, self._yield[1] + 1]
            self.first_pass_yield.set(self._yield[0] / self._yield[1])

    def on_event(self, event: DriftEvent) -> None:
        if event.event == "drift":
            self.alerts.labels(severity=event.severity).inc()
            self.drift_state.set(2 if event.severity == "critical" else 1)
        elif event.event in ("recovered", "rebaseline"):  # a changeover leaves the state as it is
            self.drift_state.set(0)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _Forward(Sink):
    """The sinks of ``router``, as one sink of another router (:meth:`AlertRouter.forwarding`)."""

    def __init__(self, router: AlertRouter) -> None:
        self.router = router

    def on_event(self, event: DriftEvent) -> None:
        self.router.emit(event)

    def on_frame(
        self,
        frame_index: int,
        source: str,
        stats: np.ndarray | None,
        timings: Mapping[str, float],
        num_detections: int,
        score: float | None,
        layer_names: Sequence[str],
    ) -> None:
        self.router.publish(frame_index, source, stats, timings, num_detections, score, layer_names, [])


class AlertRouter:
    """Feeds a :class:`DriftDetector` (optional) and fans frame metrics and events out to ``sinks``.

    ``layer_names`` name the rows of the per-frame statistics (the detector's, when there is one).
    """

    def __init__(self, detector: DriftDetector | None, sinks: Sequence[Sink], layer_names: Sequence[str] | None = None) -> None:
        self.detector = detector
        self.sinks = list(sinks)
        if layer_names is None:
            layer_names = detector.layer_names if detector is not None else []
        self.layer_names = list(layer_names)
        if detector is not None and self.layer_names != detector.layer_names:
            raise ValueError(f"layer names {self.layer_names} differ from the baseline's {detector.layer_names}")
        self.sink_errors = 0
        self.event_errors = 0  # events a sink raised on (each also counted in sink_errors)
        for sink in self.sinks:
            if isinstance(sink, PrometheusSink):
                sink.count_undelivered(lambda: self.undelivered)

    @property
    def undelivered(self) -> int:
        """Drift events that did not reach every sink: each sink's own count (a webhook that fails, hangs or overflows)
        plus events a sink raised on. In the run summary and in Prometheus (``defect_detector_alerts_undelivered_total``)."""
        return sum(sink.undelivered for sink in self.sinks) + self.event_errors

    def on_frame(
        self,
        frame_index: int,
        source: str,
        stats: torch.Tensor | np.ndarray | None,
        timings: Mapping[str, float] | None = None,
        num_detections: int = 0,
        golden: Golden | None = None,
        levels: np.ndarray | None = None,
    ) -> list[DriftEvent]:
        """One frame: ``stats`` float ``[L, 2]`` (any device; one host copy), ``timings`` seconds per
        stage (keys from ``STAGES``), ``num_detections`` defects found, ``golden`` its golden image (golden-template
        models), ``levels`` its gray levels (``screens/blank.py``). Returns the events raised."""
        values = None
        if stats is not None:
            values = stats.detach().to("cpu", torch.float64).numpy() if isinstance(stats, torch.Tensor) else np.asarray(stats, np.float64)
            if values.ndim == 3 and values.shape[0] == 1:
                values = values[0]
            if values.shape != (len(self.layer_names), len(STATISTICS)):
                shape = list(values.shape)
                raise ValueError(f"frame {frame_index}: layer statistics must have shape [{len(self.layer_names)}, 2], got {shape}")
        events: list[DriftEvent] = []
        score = None
        if self.detector is not None and values is not None:
            events = self.detector.update(values, frame_index, source, golden if self.detector.relative else None, levels)
            score = self.detector.score
        self.publish(frame_index, source, values, timings or {}, num_detections, score, self.layer_names, events)
        return events

    def publish(  # noqa: PLR0913 - Sink.on_frame's arguments, and the events
        self,
        frame_index: int,
        source: str,
        stats: np.ndarray | None,
        timings: Mapping[str, float],
        num_detections: int,
        score: float | None,
        layer_names: Sequence[str],
        events: Sequence[DriftEvent],
    ) -> None:
        """Send one frame's metrics (:meth:`Sink.on_frame`'s arguments) and then its ``events`` to every sink."""
        for sink in self.sinks:
            self._call(sink, "on_frame", frame_index, source, stats, timings, num_detections, score, layer_names)
            for event in events:
                self._call(sink, "on_event", event)

    def forwarding(self) -> Sink:
        """A sink that hands what it gets to this router's sinks: the one sink of another router (a second inspector's,
        on other weights: ``Inspector``'s designs routed by their look) whose events and frame metrics must reach the
        sinks the user named. A sink failing is counted here; closing it closes nothing (this router closes its sinks)."""
        return _Forward(self)

    def on_verdict(self, verdict: str, first: bool) -> None:
        """One frame record's verdict, and whether it was its board's first inspection, to every sink."""
        for sink in self.sinks:
            self._call(sink, "on_verdict", verdict, first)

    def on_record(
        self, record: Prepared, detections: Detections | None, golden: Golden | None = None
    ) -> tuple[list[DriftEvent], str, float | None]:
        """The drift stage of one frame: ``(events, flag, score)`` after it (``"off"`` and None without a detector).
        An inspected frame's statistics (``detections.stats``) are read, against ``golden`` with a relative baseline; a
        frame refused for the light or the camera (``RefusalKind.camera``: blank, exposure, light unlike the golden
        image) raises an alert at once; any other refused frame leaves the detector as it was."""
        frame, events = record.frame, []
        if detections is not None:
            timings = {"decode": frame.decode_ms / 1000.0, **{k: v / 1000.0 for k, v in detections.timings.items()}}
            events = self.on_frame(frame.index, frame.source_name, detections.stats, timings, len(detections), golden, record.levels)
        elif record.refusal is not None and record.refusal.kind.camera:
            events = self.on_blank(frame.index, frame.source_name, record.refusal.message)
        if self.detector is None:
            return events, "off", None
        return events, self.detector.flag, self.detector.score

    def on_blank(self, frame_index: int, source: str, reason: str) -> list[DriftEvent]:
        """A frame not inspected because it is blank (``screens/blank.py`` ``reason``): the detector alerts at once."""
        events = self.detector.blank(frame_index, source, reason) if self.detector is not None else []
        for sink in self.sinks:
            for event in events:
                self._call(sink, "on_event", event)
        return events

    @property
    def files(self) -> list[Path]:
        """The files its sinks write (``--alerts``), for the run's check that no two outputs share one."""
        return [sink.path for sink in self.sinks if isinstance(sink, JsonlSink)]

    @property
    def relative(self) -> bool:
        """Whether the detector reads frames against their golden images (it then needs them)."""
        return self.detector is not None and self.detector.relative

    def emit(self, event: DriftEvent) -> None:
        """Send an event raised outside :meth:`on_frame` (a deliberate rebaseline) to every sink."""
        for sink in self.sinks:
            self._call(sink, "on_event", event)

    def _call(self, sink: Sink, method: str, *args: Any) -> None:
        try:
            getattr(sink, method)(*args)
        except Exception:
            self.sink_errors += 1
            self.event_errors += method == "on_event"
            if self.sink_errors <= 10:
                logger.exception("monitoring sink %s.%s failed (inference continues)", type(sink).__name__, method)

    def close(self) -> None:
        """Close every sink (each failure is logged, the rest still close)."""
        for sink in self.sinks:
            self._call(sink, "close")
