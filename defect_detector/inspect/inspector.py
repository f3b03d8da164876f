"""The inspection path: source -> reference registration -> runtime -> drift monitor -> alert sinks -> outputs.

:class:`Inspector` is the one object a frame goes through, and the Python API for line software::

    from defect_detector import Inspector

    with Inspector.load("model.pt2", alerts="alerts.jsonl") as inspector:
        result = inspector.inspect(frame)          # uint8 [H, W] (or BGR, 16-bit) camera frame
        if result.verdict == "not_inspected":      # "pass", "pass_suspect", "fail" or "not_inspected"
            stop_the_board(result.reason)          # never count it as clean
        result.detections.boxes                    # float32 [K, 4] xyxy in the frame's pixels
        result.drift                               # "normal", "warning", "critical" or "off"
        inspector.inspect(frame, serial="SN0042", lot="L7")   # traceability: on the record and at the station
        summary = inspector.run("frames/", save_json="det.json")   # a whole source

Defaults are what the deployed artifact does: one model pass per frame (test-time augmentation only
when asked for), the operating point the weights were validated at, tiling or letterboxing chosen from the
pixel scale the model was trained at, and drift monitoring on whenever the weights carry a baseline
(``monitor=False`` turns it off). Every frame goes through the frame pipeline (``inspect/pipeline.py``);
``predict``, the demo and the notebook are thin over this class.

With golden images and no weights named, the bundled golden-template weights are chosen per design (issue 42): a
design whose look the default weights' domain does not cover, and that lies nearer another bundled model's domain
(``photo_ref.pt`` for photographs; ``inspect/design_check.py`` ``covering_weights``), is inspected by a second
inspector on those weights, loaded on first use with the same options (its drift alerts go to the log, the
records, and to the sinks the user named: ``alerts``, ``webhook``, the metrics port, through the first inspector's
:class:`AlertRouter`). Every record names the weights that inspected it (``Inspection.weights``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from defect_detector.core.devices import AdaptiveThreads, default_threads
from defect_detector.core.errors import ReferenceError
from defect_detector.core.frame import Frame
from defect_detector.core.frame_record import Prepared
from defect_detector.data.images import ConversionNotice
from defect_detector.inspect.consumers import Callback, Consumer, LineYield, Progress, StationRows, consume
from defect_detector.inspect.design_check import DesignCheck
from defect_detector.inspect.designs import Design
from defect_detector.inspect.drift_inputs import golden_of
from defect_detector.inspect.options import InspectOptions
from defect_detector.inspect.outputs import Outputs
from defect_detector.inspect.panel import BoardOutline, check_inside, load_outlines, outlines_of
from defect_detector.inspect.pipeline import Pipeline, gray_frame
from defect_detector.inspect.prepare import Prepare, detect
from defect_detector.inspect.record import Inspection
from defect_detector.inspect.references import References
from defect_detector.inspect.run_guard import RunGuard, check_database
from defect_detector.inspect.run_summary import Tally
from defect_detector.inspect.runtime import Runtime, precision_half
from defect_detector.inspect.sources import FrameSource, batches, open_source
from defect_detector.inspect.stop_signals import StopSignals, until_stopped
from defect_detector.inspect.trace import NO_TRACE, Trace, TracePattern
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS
from defect_detector.monitor.alerts import AlertRouter
from defect_detector.monitor.drift import DriftEvent
from defect_detector.monitor.golden import Golden
from defect_detector.monitor.setup import build_monitoring
from defect_detector.screens.frame import calibration_levels

log = logging.getLogger("defect_detector.inspect")


def line_options(
    trace_pattern: str | None = None, boards: str | Path | dict[str, Any] | None = None
) -> tuple[TracePattern | None, tuple[BoardOutline, ...]]:
    """What a line tells the inspector beside its frames, checked (``ValueError`` in one line): ``trace_pattern``, a
    regular expression with named groups ``serial`` / ``lot`` / ``order`` read from each frame's file name
    (``inspect/trace.py``), and ``boards``, the board outlines of a panel design: a ``--boards`` file or its mapping
    (``inspect/panel.py``)."""
    pattern = TracePattern(trace_pattern) if trace_pattern is not None else None
    if boards is None:
        return pattern, ()
    return pattern, load_outlines(boards) if isinstance(boards, (str, Path)) else outlines_of(boards)


class Inspector:
    """Composes the frame :class:`Pipeline` (runtime, golden images, operating point, tiling) and an optional
    :class:`AlertRouter` (drift detector + sinks). Build it with :meth:`load`; use it as a context manager, or call
    :meth:`close`."""

    recorder: Any = None  # station recording: a defect_detector.station.recorder.Recorder (load(db=URL))
    undelivered_at_close = 0  # alerts the sinks had not delivered when close() stopped them
    unrecorded_at_close = 0  # frames the station recorder could not record (counted when close() stopped it)
    autothreads: AdaptiveThreads | None = None  # load(threads=None) on a CPU: the thread count re-chosen as the run goes
    unmatched = False  # a frame name the trace pattern did not match was logged

    def __init__(self, pipeline: Pipeline, router: AlertRouter | None = None, routes: bool = False) -> None:
        runtime = pipeline.runtime
        if runtime.channels == 2 and pipeline.references is None:
            raise ValueError(f"{runtime.path.name} is a golden-template model: give each frame's reference with --reference REF")
        self.pipeline = pipeline
        self.router = router
        monitored = router.detector.baseline if router is not None and router.detector is not None else None
        self.prepare = Prepare(
            pipeline,
            design_check=DesignCheck.from_meta(runtime.meta, runtime.path, routes),  # unlike the training images (issue 34)
            calibration=calibration_levels(monitored, runtime.meta.get("baseline")),  # --baseline's levels, else the weights'
        )
        self.designs = self.prepare.designs  # the golden images, prepared once each (None for a single-image model)
        self.notice = ConversionNotice("api")
        self._next_index, self._closed = 0, False
        self.options: InspectOptions | None = None  # load(): the options, when the bundled weights are chosen per design
        self.siblings: dict[Path, Inspector] = {}  # the bundled weights chosen for some designs, loaded on first use
        self.trace_pattern: TracePattern | None = None  # load(trace_pattern=): serial, lot, order from each frame's name
        self.outlines: tuple[BoardOutline, ...] = ()  # load(boards=): the board outlines of a panel design
        self.handed: list[Consumer] = [LineYield(router)]  # the inspector's own consumers (inspect/consumers.py)

    @property
    def runtime(self) -> Runtime:
        return self.pipeline.runtime

    @property
    def references(self) -> References | None:
        return self.pipeline.references

    @property
    def design_check(self) -> DesignCheck | None:
        """The design-domain check the prepare stage notes each new golden image with (``inspect/design_check.py``)."""
        return self.prepare.design_check

    @classmethod
    def load(cls, weights: str | Path | None = None, sinks_of: AlertRouter | None = None, **options: Any) -> Inspector:
        """Load ``weights`` (None: the bundled model; with ``reference``, the bundled golden-template models, chosen
        per design) and set up registration and monitoring, as ``options`` say: the keywords of
        :class:`~defect_detector.inspect.options.InspectOptions`, declared there once (``reference``, ``device``,
        ``threads``, ``tta``, ``conf``, ``iou``, ``max_det``, ``tile``, ``monitor``, ``baseline``, ``monitor_config``,
        ``alerts``, ``webhook``, ``metrics_port``, ``metrics_addr``, ``db``, ``precision``, ``trace_pattern``,
        ``boards``); monitoring: :func:`build_monitoring`. ``sinks_of``: the router whose sinks take this inspector's
        drift events and frame metrics instead of sinks of its own (the inspector of designs routed to other bundled
        weights: the first inspector's). Raises ``FileNotFoundError`` / ``ValueError`` with one clear line."""
        return cls.from_options(InspectOptions.checked(weights=weights, **options), sinks_of)

    @classmethod
    def from_options(cls, options: InspectOptions, sinks_of: AlertRouter | None = None) -> Inspector:
        """:meth:`load` with its options checked."""
        o = options
        pattern, outlines = line_options(o.trace_pattern, o.boards)  # checked before anything loads
        chosen = o.weights is None and o.baseline is None
        weights = o.weights or (DEFAULT_REFERENCE_WEIGHTS if o.reference else None)
        adaptive, threads = o.threads is None, default_threads() if o.threads is None else o.threads
        runtime = Runtime.load(weights, device=o.device, half=precision_half(o.precision), threads=threads, tta=o.tta)
        references = References(o.reference) if o.reference else None
        pipeline = Pipeline(runtime, references, o.conf, o.iou, o.max_det, o.tile)
        router = build_monitoring(
            runtime.layer_names, baseline=o.baseline, embedded=runtime.meta.get("baseline"), monitor=o.monitor,
            alerts=o.alerts, webhook=o.webhook, metrics_port=o.metrics_port, metrics_addr=o.metrics_addr,
            monitor_config=o.monitor_config, sinks_of=sinks_of,
        )  # fmt: skip
        routes = chosen and bool(o.reference)  # the bundled weights, chosen per design from its look
        inspector = cls._composed(pipeline, router, routes)
        inspector.autothreads = AdaptiveThreads.for_device(runtime.device) if adaptive else None  # follows the machine
        inspector._set_line(pattern, outlines)
        if routes:  # the siblings are loaded with these options; one inspector adapts the threads
            inspector.options = o.model_copy(update={"threads": threads})
        if o.db is not None:
            inspector._record_into(o.db)
        return inspector

    @classmethod
    def _composed(cls, pipeline: Pipeline, router: AlertRouter | None, routes: bool = False) -> Inspector:
        """The inspector of ``pipeline`` and ``router`` (``routes``: it sends a design its weights do not cover to the
        covering bundled weights); the router closed again when it cannot be built."""
        try:
            return cls(pipeline, router, routes)
        except ValueError:
            if router is not None:
                router.close()
            raise

    def _set_line(self, pattern: TracePattern | None, outlines: tuple[BoardOutline, ...]) -> None:
        """Read traces by ``pattern`` and inspect panels of ``outlines`` (:func:`line_options`); with one golden image,
        each outline must lie inside it (else ``ValueError`` in one line, the inspector closed)."""
        try:
            if outlines and self.references is not None and self.references.single:
                golden = self.references.image(self.references.path.name)
                check_inside(outlines, golden.shape[:2], f"the golden image {self.references.path.name}")
        except ValueError:
            self.close()
            raise
        self.trace_pattern, self.outlines = pattern, outlines

    def _record_into(self, db: str) -> None:
        """Station recording: every frame from now on goes to a :class:`~defect_detector.station.recorder.Recorder` on
        ``db``; a database that cannot be written fails now (the inspector is closed), not as frames "unrecorded"."""
        from defect_detector.station.recorder import Recorder

        try:
            check_database(db)
            self.recorder = Recorder(db, conf=self.pipeline.conf, classes=self.runtime.class_names)
            self.handed.append(StationRows(self.recorder))
        except ValueError:
            self.close()
            raise

    @property
    def monitoring(self) -> bool:
        """Whether drift is monitored (the weights or ``baseline=`` gave a baseline)."""
        return self.router is not None and self.router.detector is not None

    def inspect(  # noqa: PLR0913 - the frame, its golden image and its trace, one keyword each
        self,
        image: np.ndarray,
        name: str = "frame",
        reference: np.ndarray | None = None,
        source: str = "api",
        serial: str | None = None,
        lot: str | None = None,
        order: str | None = None,
    ) -> Inspection:
        """Inspect one frame (uint8 / uint16 ``[H, W]``, ``[H, W, 1|3|4]``: converted to gray here, the pipeline's
        entry); frames are numbered in call order. ``reference``: this frame's golden image, registered here
        (default: from ``References`` by ``name``). ``source`` names the camera or line in drift events. ``serial``,
        ``lot``, ``order``: the board's serial, lot and work order (``inspect/trace.py``; None: read from ``name`` by
        the trace pattern, if any). ``ValueError`` for anything that is not an image (``None`` included) or a trace
        value that is not one printable line."""
        given = Trace(serial, lot, order) if (serial, lot, order) != (None, None, None) else None
        gray = gray_frame(image, name, self.notice)
        frame = Frame(self._next_index, gray, source, name, time.time())
        self._next_index += 1
        return self.inspect_frames([frame], [reference] if reference is not None else None, [given] if given is not None else None)[0]

    def inspect_frames(
        self, frames: Sequence[Frame], references: Sequence[np.ndarray | None] | None = None, traces: Sequence[Trace | None] | None = None
    ) -> list[Inspection]:
        """Inspect gray frames (from a source, or :meth:`inspect`) in one model call; one :class:`Inspection` per
        frame, in order, drift updated per frame. ``references``: one golden image (or None) per frame; ``traces``: one
        :class:`~defect_detector.inspect.trace.Trace` (or None: read from the frame's name by the trace pattern) per
        frame. ``RuntimeError`` after :meth:`close`."""
        self._check_open()
        for given, what in ((references, "golden images"), (traces, "traces")):
            if given is not None and len(given) != len(frames):
                raise ValueError(f"got {len(given)} {what} for {len(frames)} frames; pass one per frame")
        if self.autothreads is not None:
            self.autothreads.tick()
        given = list(references) if references is not None else [None] * len(frames)
        traced = [self._trace(f, t) for f, t in zip(frames, traces if traces is not None else [None] * len(frames))]
        routed = [self._owner(frame, golden) for frame, golden in zip(frames, given)]
        owners, designs = [owner for owner, _ in routed], [design for _, design in routed]
        records: list[Inspection | None] = [None] * len(frames)
        for owner in dict.fromkeys(owners):
            mine = [i for i, o in enumerate(owners) if o is owner]
            chosen = ([frames[i] for i in mine], [given[i] for i in mine], [traced[i] for i in mine], [designs[i] for i in mine])
            found = owner._inspect(*chosen, self.outlines)
            for i, record in zip(mine, found):
                records[i] = record
        for record in records:
            self._hand_over(record)
        return records

    def prepared(self, frame: Frame, reference: np.ndarray | None = None) -> tuple[Prepared, str]:
        """``(record, weights)``: the prepare stage's record of ``frame`` as :meth:`inspect_frames` makes it (its golden
        image registered, checked, fitted to its levels and screened; ``reference`` as there), by the weights that would
        inspect it (this inspector's, or the sibling chosen for its design; ``weights`` their file name), without running
        the model (``defect-detector align``: ``jobs/registered.py``). ``RuntimeError`` after :meth:`close`."""
        self._check_open()
        owner, design = self._owner(frame, reference)
        return owner.prepare(frame, reference, design), owner.runtime.path.name

    def _trace(self, frame: Frame, given: Trace | None) -> Trace:
        """A frame's trace: the one given, else the one the trace pattern reads from its name (a WARNING, once, for the
        first name it does not match), else none."""
        if given is not None or self.trace_pattern is None:
            return given or NO_TRACE
        found = self.trace_pattern.trace(frame.file_name)
        if found is NO_TRACE and not self.unmatched:
            self.unmatched = True
            words = "such frames have no serial: each is a board of its own"
            log.warning("--trace-pattern '%s' does not match %s: %s", self.trace_pattern.pattern, frame.file_name, words)
        return found

    def _inspect(
        self,
        frames: Sequence[Frame],
        references: Sequence[np.ndarray | None],
        traces: Sequence[Trace],
        designs: Sequence[tuple[Design, str] | None],
        outlines: tuple[BoardOutline, ...] = (),
    ) -> list[Inspection]:
        """Prepare, detect and monitor ``frames`` with this inspector's own weights; each record finished here, once,
        with the threshold that decided it (its design's, ``Pipeline.conf_for``, at these weights' operating point),
        its ``traces`` and the panel's ``outlines``. ``designs``: each frame's design and golden image name when
        :meth:`_owner` already found it in this inspector's designs (None: the design stage finds it)."""
        prepared = [self.prepare(f, golden, design) for f, golden, design in zip(frames, references, designs)]
        found = detect(self.pipeline, prepared)
        goldens: dict[int, Golden | None] = {}
        if self.router is not None and self.router.relative:
            inspected = [p for p, d in zip(prepared, found) if d is not None]
            goldens = dict(zip(map(id, inspected), golden_of(self.pipeline, inspected)))
        records = []
        for record, detections, trace in zip(prepared, found, traces):
            golden = goldens.get(id(record))  # drift, the monitor's stage ("off" without monitoring)
            events, drift, score = self.router.on_record(record, detections, golden) if self.router is not None else ([], "off", None)
            conf = None if detections is None else self.pipeline.conf_for(record.golden_key)
            outcome = {"events": events, "drift": drift, "score": score, "weights": self.runtime.path.name, "conf": conf}
            records.append(Inspection.finish(record, detections, trace=trace, outlines=outlines, **outcome))
        return records

    def _hand_over(self, record: Inspection) -> None:
        """Every finished record to the inspector's own consumers (``inspect/consumers.py``): the line's yield to the
        metrics sinks and, with ``db=``, the station recorder, which never blocks."""
        for consumer in self.handed:
            consumer.add(record)

    def _owner(self, frame: Frame, given: np.ndarray | None) -> tuple[Inspector, tuple[Design, str] | None]:
        """The inspector of ``frame`` and, when it is this one, the frame's design and golden image name as found here
        (its one lookup; None: not looked up): this one, or (weights chosen per design) the sibling on the bundled
        weights whose domain lies nearer its design's look where this one's does not cover it (its design note's
        ``covering``), which finds the design in its own designs."""
        if self.options is None or frame.image is None or self.prepare.design_check is None:
            return self, None
        try:
            golden = None if given is None else gray_frame(given, f"golden image of {frame.file_name}")
            found = self.designs.find(frame.file_name, golden)
        except (ReferenceError, ValueError):
            return self, None  # the prepare stage refuses it, in its words
        covering = self.prepare.design_check.note(found[0], frame.file_name).covering
        if covering is None:
            return self, found
        if covering not in self.siblings:
            log.info("designs unlike %s's training images but like %s's are inspected with it", self.runtime.path.name, covering.name)
            sibling = self.options.for_weights(covering)
            self.siblings[covering] = Inspector.from_options(sibling, sinks_of=self.router)  # the sinks the user named
        return self.siblings[covering], None

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this Inspector is closed: drift monitoring and its sinks are gone; load a new one")

    def rebaseline(self, reason: str = "requested") -> DriftEvent | None:
        """Accept the line's next frames as its new clean level (a new board design): logged and sent to the sinks.
        ``RuntimeError`` after :meth:`close`."""
        self._check_open()
        if not self.monitoring:
            return None
        event = self.router.detector.rebaseline(self._next_index, "api", reason)
        self.router.emit(event)
        return event

    def run(  # noqa: PLR0913 - the Python twin of predict's run flags, one keyword each
        self,
        source: str,
        batch: int = 1,
        max_frames: int | None = None,
        latest_only: bool = False,
        save_json: str | None = None,
        save_dir: str | None = None,
        on_result: Callable[[Inspection], None] | None = None,
        report: str | None = None,
        json_layout: str = "frames",
        stop: StopSignals | None = None,
    ) -> dict[str, Any]:
        """Inspect every frame of ``source`` (image, folder, glob, video, camera index, stream URL; see
        ``inspect/sources.py``) and write the requested outputs (``inspect/outputs.py``: ``save_json`` one record per frame
        with its verdict, ``report`` a CSV row per frame, ``save_dir`` annotated frames); returns the summary
        (:func:`~defect_detector.inspect.run_summary.summary_line`).
        Live sources run one frame per call. Ctrl-C stops cleanly: outputs so far are written and
        ``summary["interrupted"]`` is True. Any other error discards this run's unfinished outputs (earlier
        files at ``save_json`` stay as they were) and is raised. ``on_result`` is called per frame, in order.
        ``stop`` (``predict``): SIGTERM / SIGHUP / SIGINT stop the run as Ctrl-C does, after the current frame
        (``summary["signal"]`` names it; see ``inspect/stop_signals.py``). Before the first frame the outputs are
        checked (no two on one file, none the source would read back), locked against a second run and leftovers of a
        killed run recovered (``inspect/run_guard.py``)."""
        self._check_open()  # before any output is touched
        if batch < 1:
            raise ValueError(f"--batch must be >= 1, got {batch}")
        if max_frames is not None and max_frames < 1:
            raise ValueError(f"--max-frames must be >= 1, got {max_frames}")
        frames = open_source(source, latest_only=latest_only)  # its files listed, nothing read yet
        alerts = self.router.files if self.router is not None else []
        guard = RunGuard(save_json, save_dir, report, frames, alerts)  # apart, writable, one writer, a killed run's recovered
        try:
            self.runtime.warmup()
            outputs = Outputs(frames, self.runtime.class_names, save_json, save_dir, report, json_layout)
        except BaseException:
            guard.release()
            raise
        tally = Tally()
        consumers: list[Consumer] = [outputs, tally, Progress(frames.total if max_frames is None else max_frames, tally.status)]
        if on_result is not None:
            consumers.append(Callback(on_result))
        try:
            stopped_by = consume(self._produce(frames, batch, max_frames, stop), consumers)
        finally:
            guard.release()
        summary = tally.summary(source, frames, self, outputs.written, stopped_by is not None)
        summary.update(signal=stopped_by, recovered=guard.recovered, ended_early=frames.stats.ended_early)
        summary.update(expected_frames=frames.stats.expected_frames, alerts_undelivered=self._undelivered())
        summary.update(outputs_failed=list(outputs.failed.values()), unrecorded=self.unrecorded)
        return summary

    def stream(
        self, source: str, batch: int = 1, max_frames: int | None = None, latest_only: bool = False, stop: StopSignals | None = None
    ) -> Iterator[Inspection]:
        """The record of every frame of ``source`` (as :meth:`run` opens it), in order, as each is inspected: for line
        software that consumes records itself (:meth:`run` consumes the same producer, ``inspect/consumers.py``). The
        source closes when the iteration ends or the generator is closed."""
        self._check_open()
        if batch < 1 or (max_frames is not None and max_frames < 1):
            raise ValueError(f"need batch >= 1 and max_frames >= 1, got batch={batch}, max_frames={max_frames}")
        frames = open_source(source, latest_only=latest_only)
        self.runtime.warmup()
        yield from self._produce(frames, batch, max_frames, stop)

    def _produce(self, frames: FrameSource, batch: int, max_frames: int | None, stop: StopSignals | None) -> Iterator[Inspection]:
        """The one producer of records: an open source's frames, ``batch`` per model call (one for a live stream), until
        the source ends, ``max_frames`` or a ``stop`` signal; the source is closed when it ends or the generator is."""
        with frames:
            for chunk in batches(until_stopped(iter(frames), stop), 1 if frames.is_stream else batch, max_frames):
                yield from self.inspect_frames(chunk)

    @property
    def unrecorded(self) -> int:
        """Frames the station database (``db=``) did not take so far: a full queue, a database lost mid-run."""
        return self.recorder.unrecorded if self.recorder is not None else self.unrecorded_at_close

    def _undelivered(self) -> int:
        """Alerts a sink failed to deliver so far (a webhook that fails or hangs, a full queue; see ``AlertRouter``)."""
        return self.router.undelivered if self.router is not None else self.undelivered_at_close

    def close(self) -> None:
        """Close the alert sinks (files, webhook thread, metrics port) and the station recorder (writing what it holds);
        the inspector inspects nothing after this."""
        self._closed = True
        for sibling in self.siblings.values():
            sibling.close()
        if self.router is not None:
            self.router.close()
            self.undelivered_at_close = self.router.undelivered  # the webhook's last tries and what was left in flight
            self.router = None
        for consumer in self.handed:  # the station recorder writes what it holds
            consumer.close()
        self.handed = []
        if self.recorder is not None:
            self.unrecorded_at_close = self.recorder.unrecorded  # what was queued is written (or counted) by close()
            self.recorder = None

    def __enter__(self) -> Inspector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
