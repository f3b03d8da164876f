"""The inspection path: source -> reference registration -> runtime -> drift monitor -> alert sinks -> outputs.

:class:`Inspector` is the one object a frame goes through, and the Python API for line software::

    from defect_detector import Inspector

    with Inspector.load("model.pt2", alerts="alerts.jsonl") as inspector:
        result = inspector.inspect(frame)          # uint8 [H, W] (or BGR, 16-bit) camera frame
        if result.verdict == "not_inspected":      # "pass", "fail" or "not_inspected"
            stop_the_board(result.reason)          # never count it as clean
        result.detections.boxes                    # float32 [K, 4] xyxy in the frame's pixels
        result.drift                               # "normal", "warning", "critical" or "off"
        summary = inspector.run("frames/", save_json="det.json")   # a whole source

Defaults are what the deployed artifact does: one model pass per frame (test-time augmentation only
when asked for), the operating point the weights were validated at, tiling or letterboxing chosen from the
pixel scale the model was trained at, and drift monitoring on whenever the weights carry a baseline
(``monitor=False`` turns it off). Every frame goes through the frame pipeline (``inspect/pipeline.py``);
``predict``, the demo and the notebook are thin over this class.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from defect_detector.core.devices import default_threads
from defect_detector.core.types import Detections
from defect_detector.data.images import ConversionNotice
from defect_detector.inspect.outputs import Outputs
from defect_detector.inspect.pipeline import Pipeline, gray_frame
from defect_detector.inspect.references import ReferenceError, References
from defect_detector.inspect.runtime import Runtime
from defect_detector.inspect.sources import Frame, FrameSource, open_source
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS
from defect_detector.monitor.alerts import STAGES, AlertRouter
from defect_detector.monitor.drift import DriftEvent
from defect_detector.monitor.setup import build_monitoring

log = logging.getLogger("defect_detector.inspect")

_EMA = 0.1  # smoothing of the live status line


@dataclass
class Inspection:
    """What the inspector found in one frame.

    ``detections``: boxes in the frame's original pixels (see :class:`Detections`), or None when the frame
    was not inspected (``frame.error`` says why: unreadable, no usable reference). ``events``: drift events
    this frame raised. ``drift``: the monitor's state after it (``"off"`` without monitoring), ``score``
    its drift score (None without monitoring). ``verdict``: ``fail`` (at least one call at the operating
    point), ``pass`` (none), or ``not_inspected`` with the ``reason``: never count such a board as clean.
    """

    frame: Frame
    detections: Detections | None
    events: list[DriftEvent] = field(default_factory=list)
    drift: str = "off"
    score: float | None = None

    @property
    def error(self) -> str | None:
        return self.frame.error

    @property
    def verdict(self) -> str:
        if self.detections is None:
            return "not_inspected"
        return "fail" if len(self.detections) else "pass"

    @property
    def reason(self) -> str | None:
        """Why the frame was not inspected (None when it was)."""
        return self.frame.error if self.detections is None else None


class Inspector:
    """Composes the frame :class:`Pipeline` (runtime, golden images, operating point, tiling) and an optional
    :class:`AlertRouter` (drift detector + sinks). Build it with :meth:`load`; use it as a context manager, or call
    :meth:`close`."""

    def __init__(self, pipeline: Pipeline, router: AlertRouter | None = None) -> None:
        runtime = pipeline.runtime
        if runtime.channels == 2 and pipeline.references is None:
            raise ValueError(f"{runtime.path.name} is a golden-template model: give each frame's reference with --reference REF")
        self.pipeline = pipeline
        self.router = router
        self.notice = ConversionNotice("api")
        self._next_index = 0
        self._closed = False

    @property
    def runtime(self) -> Runtime:
        return self.pipeline.runtime

    @property
    def references(self) -> References | None:
        return self.pipeline.references

    @classmethod
    def load(
        cls,
        weights: str | Path | None = None,
        reference: str | Path | None = None,
        device: str = "auto",
        threads: int | None = None,
        tta: str | None = None,
        conf: float | None = None,
        iou: float | None = None,
        max_det: int = 100,
        tile: bool | None = None,
        monitor: bool = True,
        baseline: str | Path | None = None,
        monitor_config: Any = None,
        alerts: str | Path | None = None,
        webhook: str | None = None,
        metrics_port: int | None = None,
        metrics_addr: str = "0.0.0.0",
    ) -> Inspector:
        """Load weights (None: the bundled model; with ``reference``, the bundled golden-template model) and set
        up registration and monitoring. ``reference``: one golden image for every frame, or a folder of them (by
        frame name); a golden-template model needs it (an :meth:`inspect` call may still pass its own).
        ``threads``: torch CPU threads (None: the cores free now, :func:`~defect_detector.core.devices.default_threads`).
        ``tta``: test-time augmentation (``flip2``, ``flip4``, ``d8``: that many model passes per frame; default one).
        ``conf`` / ``iou``: None takes the operating point the weights store. ``tile``: None chooses from the model's
        recorded pixel scale, True / False force tiling / letterboxing. Monitoring: see :func:`build_monitoring`;
        ``baseline`` overrides the one the weights carry. Raises ``FileNotFoundError`` / ``ValueError`` with one
        clear line."""
        weights = weights or (DEFAULT_REFERENCE_WEIGHTS if reference else None)
        threads = default_threads() if threads is None else threads
        runtime = Runtime.load(weights, device=device, threads=threads, tta=tta)
        references = References(reference) if reference else None
        pipeline = Pipeline(runtime, references, conf, iou, max_det, tile)
        router = build_monitoring(
            runtime.layer_names,
            baseline=baseline,
            embedded=runtime.meta.get("baseline"),
            monitor=monitor,
            alerts=alerts,
            webhook=webhook,
            metrics_port=metrics_port,
            metrics_addr=metrics_addr,
            monitor_config=monitor_config,
        )
        try:
            return cls(pipeline, router)
        except ValueError:
            if router is not None:
                router.close()
            raise

    @property
    def monitoring(self) -> bool:
        """Whether drift is monitored (the weights or ``baseline=`` gave a baseline)."""
        return self.router is not None and self.router.detector is not None

    def inspect(self, image: np.ndarray, name: str = "frame", reference: np.ndarray | None = None, source: str = "api") -> Inspection:
        """Inspect one frame (uint8 / uint16 ``[H, W]``, ``[H, W, 1|3|4]``: converted to gray here, the pipeline's
        entry); frames are numbered in call order. ``reference``: this frame's golden image, registered here
        (default: from ``References`` by ``name``). ``source`` names the camera or line in drift events.
        ``ValueError`` for anything that is not an image (``None`` included)."""
        gray = gray_frame(image, name, self.notice)
        frame = Frame(self._next_index, gray, source, name, time.time())
        self._next_index += 1
        return self.inspect_frames([frame], [reference] if reference is not None else None)[0]

    def inspect_frames(self, frames: Sequence[Frame], references: Sequence[np.ndarray | None] | None = None) -> list[Inspection]:
        """Inspect gray frames (from a source, or :meth:`inspect`) in one model call; one :class:`Inspection` per
        frame, in order, drift updated per frame. ``references``: one golden image (or None) per frame.
        ``RuntimeError`` after :meth:`close`."""
        if self._closed:
            raise RuntimeError("this Inspector is closed: drift monitoring and its sinks are gone; load a new one")
        frames, good, golden = self._register(list(frames), references)
        results = self.pipeline.detect([f.image for f in good], golden) if good else []
        by_index = {f.index: r for f, r in zip(good, results)}
        out = []
        for frame in frames:
            result = by_index.get(frame.index)
            inspection = Inspection(frame, result)
            if self.router is not None and result is not None:
                timings = {"decode": frame.decode_ms / 1000.0, **{k: v / 1000.0 for k, v in result.timings.items()}}
                inspection.events = self.router.on_frame(frame.index, frame.source_name, result.stats, timings, len(result))
            if self.monitoring:
                inspection.drift, inspection.score = self.router.detector.state, self.router.detector.score
            out.append(inspection)
        return out

    def _register(
        self, frames: list[Frame], given: Sequence[np.ndarray | None] | None
    ) -> tuple[list[Frame], list[Frame], list[np.ndarray] | None]:
        """(frames, the inspectable ones, their registered golden images or None for a single-image model). A frame
        whose golden image is missing or does not register comes back with its ``error`` set (its image kept for
        drawing) and is not inspected."""
        if given is not None and len(given) != len(frames):
            raise ValueError(f"got {len(given)} golden images for {len(frames)} frames; pass one per frame")
        out, kept, golden = [], [], []
        for i, frame in enumerate(frames):
            if frame.image is None:
                out.append(frame)
                continue
            try:
                warped = self.pipeline.register(frame.image, frame.file_name, given[i] if given is not None else None)
            except ReferenceError as exc:
                out.append(dataclasses.replace(frame, error=str(exc)))
                continue
            out.append(frame)
            kept.append(frame)
            golden.append(warped)
        return out, kept, (golden if self.runtime.channels == 2 else None)

    def rebaseline(self, reason: str = "requested") -> DriftEvent | None:
        """Accept the line's next frames as its new clean level (a new board design): logged and sent to the sinks."""
        if not self.monitoring:
            return None
        event = self.router.detector.rebaseline(self._next_index, "api", reason)
        self.router.emit(event)
        return event

    def run(
        self,
        source: str,
        batch: int = 1,
        max_frames: int | None = None,
        latest_only: bool = False,
        save_json: str | None = None,
        save_dir: str | None = None,
        on_result: Callable[[Inspection], None] | None = None,
    ) -> dict[str, Any]:
        """Inspect every frame of ``source`` (image, folder, glob, video, camera index, stream URL; see
        ``deploy/sources.py``) and write the requested outputs; returns the summary (:func:`summary_line`).
        Live sources run one frame per call. Ctrl-C stops cleanly: outputs so far are written and
        ``summary["interrupted"]`` is True. Any other error discards this run's unfinished outputs (earlier
        files at ``save_json`` stay as they were) and is raised. ``on_result`` is called per frame, in order."""
        if batch < 1:
            raise ValueError(f"--batch must be >= 1, got {batch}")
        if max_frames is not None and max_frames < 1:
            raise ValueError(f"--max-frames must be >= 1, got {max_frames}")
        frames = open_source(source, latest_only=latest_only)
        self.runtime.warmup()
        outputs = Outputs(frames, self.runtime.class_names, save_json, save_dir)
        tally = _Tally()
        interrupted = False
        bar = tqdm(total=frames.total if max_frames is None else max_frames, unit="frame", file=sys.stderr, disable=None, leave=False)
        try:
            with frames:
                for chunk in _batches(iter(frames), 1 if frames.is_stream else batch, max_frames):
                    for inspection in self.inspect_frames(chunk):
                        outputs.add(inspection.frame, inspection.detections)
                        tally.add(inspection)
                        if on_result is not None:
                            on_result(inspection)
                    bar.update(len(chunk))
                    bar.set_postfix_str(tally.status(bar.n), refresh=False)
        except KeyboardInterrupt:
            interrupted = True
            log.warning("interrupted: writing the outputs of the frames processed so far")
        except BaseException:
            outputs.discard()  # a failed run keeps the outputs of an earlier one
            raise
        finally:
            bar.close()
            written = outputs.close()
        return tally.summary(source, frames, self, written, interrupted)

    def close(self) -> None:
        """Close the alert sinks (files, webhook thread, metrics port); the inspector inspects nothing after this."""
        self._closed = True
        if self.router is not None:
            self.router.close()
            self.router = None

    def __enter__(self) -> Inspector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _batches(frames: Iterator[Frame], size: int, max_frames: int | None) -> Iterator[list[Frame]]:
    """Group ``frames`` into lists of up to ``size``, stopping after ``max_frames`` frames."""
    batch: list[Frame] = []
    count = 0
    for frame in frames:
        batch.append(frame)
        count += 1
        if len(batch) == size or (max_frames is not None and count >= max_frames):
            yield batch
            batch = []
        if max_frames is not None and count >= max_frames:
            break
    if batch:
        yield batch


class _Tally:
    """Counts and per-stage latency of a run (live, smoothed, for the progress bar; totals for the summary)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.totals = dict.fromkeys(STAGES, 0.0)
        self.live = dict.fromkeys(STAGES, 0.0)
        self.consumed = self.processed = self.detections = 0
        self.events: list[DriftEvent] = []

    def add(self, inspection: Inspection) -> None:
        self.consumed += 1
        self.events += inspection.events
        result = inspection.detections
        if result is None:
            return
        self.processed += 1
        self.detections += len(result)
        stage_ms = {"decode": inspection.frame.decode_ms, **result.timings}
        for stage in STAGES:
            self.totals[stage] += stage_ms[stage]
            self.live[stage] = stage_ms[stage] if self.processed == 1 else (1 - _EMA) * self.live[stage] + _EMA * stage_ms[stage]

    def status(self, frames: int) -> str:
        fps = frames / max(time.perf_counter() - self.start, 1e-9)
        return f"{fps:.1f} fps, ms: {' '.join(f'{s} {self.live[s]:.1f}' for s in STAGES)}, det {self.detections}"

    def summary(self, source: str, frames: FrameSource, inspector: Inspector, written: dict[str, str], interrupted: bool) -> dict[str, Any]:
        wall = time.perf_counter() - self.start
        stats, runtime = frames.stats, inspector.runtime
        return {
            "source": source,
            "kind": frames.kind,
            "weights": str(runtime.path),
            "device": str(runtime.device),
            "frames": self.consumed,
            "processed": self.processed,
            "skipped": self.consumed - self.processed,
            "dropped": stats.dropped,
            "no_reference": dict(inspector.references.skipped) if inspector.references is not None else {},
            "detections": self.detections,
            "drift_monitoring": inspector.monitoring,
            "drift_events": [e.to_dict() for e in self.events],
            "reconnects": stats.reconnects,
            "gaps": len(stats.gaps),
            "gave_up": stats.gave_up,
            "wall_s": round(wall, 3),
            "fps": round(self.processed / wall, 3) if wall > 0 else 0.0,
            "mean_ms": {s: round(self.totals[s] / self.processed, 3) if self.processed else None for s in STAGES},
            "outputs": written,
            "interrupted": interrupted,
        }


def summary_line(summary: dict[str, Any]) -> str:
    """One human-readable line for the end of a run."""
    ms = summary["mean_ms"]
    latency = ", ".join(f"{s} {ms[s]:.2f}" for s in STAGES) if summary["processed"] else "n/a"
    extra = f", dropped {summary['dropped']}, reconnects {summary['reconnects']}" if summary["kind"] in ("camera", "stream") else ""
    if summary.get("no_reference"):
        extra += ", of them without a usable reference: " + ", ".join(f"{why} x{n}" for why, n in sorted(summary["no_reference"].items()))
    alerts = [e for e in summary.get("drift_events", []) if e["event"] == "drift"]
    drift = f"; drift alerts {len(alerts)}" if summary.get("drift_monitoring") else "; drift monitoring off"
    return (
        f"frames {summary['frames']} (processed {summary['processed']}, skipped {summary['skipped']}{extra}), "
        f"detections {summary['detections']}{drift}, {summary['fps']:.2f} fps; mean ms per frame: {latency}"
    )
