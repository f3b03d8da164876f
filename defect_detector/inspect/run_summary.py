"""What a run of the inspector counts: frames by verdict (and why frames were not inspected), boards and first-pass
yield (``core/board_yield.py``), calls, drift events, per-stage latency; and the one line printed at its end."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from defect_detector.core.board_yield import BoardYield
from defect_detector.core.safe_text import mask_secrets
from defect_detector.core.verdict import VERDICTS
from defect_detector.inspect.record import Inspection
from defect_detector.inspect.sources import FrameSource
from defect_detector.monitor.alerts import STAGES
from defect_detector.monitor.drift import DriftEvent

_EMA = 0.1  # smoothing of the live status line


class Tally:
    """Counts and per-stage latency of a run (live, smoothed, for the progress bar; totals for the summary)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.totals = dict.fromkeys(STAGES, 0.0)
        self.live = dict.fromkeys(STAGES, 0.0)
        self.consumed = self.processed = self.detections = self.dropped_calls = self.merged_calls = 0
        self.verdicts: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        self.suspects: Counter[str] = Counter()
        self.weights: Counter[str] = Counter()
        self.points: Counter[tuple[str, float]] = Counter()  # (weights, threshold that decided the frame): inspected frames
        self.tolerated_calls = self.off_area_calls = 0
        self.events: list[DriftEvent] = []  # the alerts (drift, recovered, rebaseline): few, kept for the summary
        self.changeovers = 0  # counted, not kept: a line whose every board has its own golden image has one a frame
        self.yields = BoardYield()

    def add(self, inspection: Inspection) -> None:
        """Count one frame record."""
        self.consumed += 1
        self.verdicts[inspection.verdict.value] += 1
        self.yields.add(inspection.verdict.value, inspection.trace.serial)
        if inspection.weights:
            self.weights[inspection.weights] += 1
        if inspection.suspect_kind is not None:
            self.suspects[inspection.suspect_kind] += 1
        for event in inspection.events:
            if event.event == "changeover":
                self.changeovers += 1
            else:
                self.events.append(event)
        result = inspection.detections
        if inspection.refusal is not None:
            self.reasons[inspection.refusal.kind.value] += 1
            return
        self.processed += 1
        if inspection.weights and inspection.conf is not None:
            self.points[(inspection.weights, round(float(inspection.conf), 5))] += 1
        self.tolerated_calls += result.tolerated
        self.off_area_calls += result.off_area
        self.detections += len(result)
        self.dropped_calls += result.dropped
        self.merged_calls += result.merged
        stage_ms = {"decode": inspection.frame.decode_ms, **result.timings}
        for stage in STAGES:
            self.totals[stage] += stage_ms[stage]
            self.live[stage] = stage_ms[stage] if self.processed == 1 else (1 - _EMA) * self.live[stage] + _EMA * stage_ms[stage]

    def close(self) -> None:
        """Nothing to finish: :meth:`summary` reads the counts (``inspect/consumers.py``'s protocol)."""

    def discard(self) -> None:
        """Nothing to undo."""

    def status(self, frames: int) -> str:
        fps = frames / max(time.perf_counter() - self.start, 1e-9)
        return f"{fps:.1f} fps, ms: {' '.join(f'{s} {self.live[s]:.1f}' for s in STAGES)}, det {self.detections}"

    def summary(self, source: str, frames: FrameSource, inspector: Any, written: dict[str, str], interrupted: bool) -> dict[str, Any]:
        """The run's summary dict (``Inspector.run`` returns it; :func:`summary_line` prints it)."""
        wall = time.perf_counter() - self.start
        stats, runtime = frames.stats, inspector.runtime
        return {
            "source": mask_secrets(source),  # a stream's rtsp://user:pw@... masked
            "kind": frames.kind,
            "weights": str(runtime.path),
            "device": str(runtime.device),
            "frames": self.consumed,
            "processed": self.processed,
            "skipped": self.consumed - self.processed,
            "verdicts": {v: self.verdicts.get(v, 0) for v in VERDICTS},
            "yield": self.yields.counts.as_dict(),
            "not_inspected": dict(self.reasons),
            "pass_suspect": dict(self.suspects),
            "weights_used": dict(self.weights),
            "points_used": [{"weights": w, "conf": c, "frames": n} for (w, c), n in sorted(self.points.items())],
            "dropped": stats.dropped,
            "detections": self.detections,
            "calls_cut_by_max_det": self.dropped_calls,
            "calls_merged": self.merged_calls,
            "calls_tolerated": self.tolerated_calls,
            "calls_off_area": self.off_area_calls,
            "drift_monitoring": inspector.monitoring,
            "drift_events": [e.to_dict() for e in self.events],
            "changeovers": self.changeovers,
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
    """One human-readable line for the end of a run: frames by verdict (with why frames were not inspected), calls,
    drift alerts, speed."""
    ms, v = summary["mean_ms"], summary["verdicts"]
    latency = ", ".join(f"{s} {ms[s]:.2f}" for s in STAGES) if summary["processed"] else "n/a"
    live = summary["kind"] in ("camera", "stream")
    stream = f"; stream: dropped {summary['dropped']}, reconnects {summary['reconnects']}" if live else ""
    why = ", ".join(f"{reason} x{n}" for reason, n in sorted(summary["not_inspected"].items()))
    suspect = ", ".join(f"{reason} x{n}" for reason, n in sorted(summary.get("pass_suspect", {"drift critical": 1}).items()))
    alerts = [e for e in summary.get("drift_events", []) if e["event"] == "drift"]
    drift = f"; drift alerts {len(alerts)}" if summary.get("drift_monitoring") else "; drift monitoring off"
    if summary.get("alerts_undelivered"):
        drift += f" ({summary['alerts_undelivered']} not delivered: see the webhook warnings)"
    cut = f" ({summary['calls_cut_by_max_det']} more cut by --max-det)" if summary.get("calls_cut_by_max_det") else ""
    if summary.get("calls_merged"):
        cut += f" ({summary['calls_merged']} merged into another call on the same defect)"
    if summary.get("calls_tolerated"):
        cut += f" ({summary['calls_tolerated']} more at places its design tolerates)"
    if summary.get("calls_off_area"):
        cut += f" ({summary['calls_off_area']} more off the boards' inspection areas)"
    if summary.get("unrecorded"):
        drift += f"; station database: {summary['unrecorded']} frames NOT RECORDED"
    if summary.get("outputs_failed"):
        drift += f"; {len(summary['outputs_failed'])} output(s) NOT FINISHED (see the warnings)"
    return (
        f"frames {summary['frames']}: pass {v['pass']}"
        + (f", PASS SUSPECT {v['pass_suspect']} ({suspect})" if v.get("pass_suspect") else "")
        + f", fail {v['fail']}, NOT INSPECTED {v['not_inspected']}"
        + (f" ({why})" if why else "")
        + f"{_yield(summary)}{stream}; calls {summary['detections']}{cut}{drift}{_weights(summary)}, {summary['fps']:.2f} fps; "
        + f"mean ms per frame: {latency}"
    )


def _yield(summary: dict[str, Any]) -> str:
    """"; first-pass yield 80.0% (8 of 10 boards)" once a board was inspected (``core/board_yield.py``), else ""."""
    counts = summary.get("yield") or {}
    if not counts.get("boards"):
        return ""
    return f"; first-pass yield {counts['first_pass_yield']:.1%} ({counts['first_passed']} of {counts['boards']} boards)"


def _weights(summary: dict[str, Any]) -> str:
    """"; weights deeppcb_ref.pt x3 at score >= 0.4, photo_ref.pt x5 at score >= 0.21" when the inspected frames were
    decided by more than one model or threshold (bundled weights chosen per design, taught designs' own points), else
    ""."""
    points = summary.get("points_used") or []
    if len(points) < 2:
        return ""
    return "; weights " + ", ".join(f"{p['weights']} x{p['frames']} at score >= {p['conf']:g}" for p in points)
