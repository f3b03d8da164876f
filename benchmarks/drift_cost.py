"""What drift monitoring costs per frame, against the frame's own time through the pipeline.

Three parts: the layer statistics inside the model (the pipeline with the model traced with and without them, run in
alternating back-to-back pairs so the load of other processes hits both alike; the median of the per-pair ratios), the
monitor's own work per frame (gray levels and the blank check, the golden image's cached statistics looked up, the
detector's update), and, reported apart, what a new golden image costs (one more pipeline call, paid once per golden
image).
"""

from __future__ import annotations

import logging
import statistics
import time
from typing import Any

import numpy as np

from benchmarks.bench import paired_ratio
from benchmarks.drift_streams import Board
from defect_detector.core.config import MonitorConfig
from defect_detector.core.frame import Frame
from defect_detector.data.images import load_image_gray
from defect_detector.inspect.designs import Designs
from defect_detector.inspect.drift_inputs import golden_of
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.prepare import Prepare
from defect_detector.inspect.runtime import Runtime
from defect_detector.monitor.baseline import Baseline
from defect_detector.monitor.drift import DriftDetector
from defect_detector.screens.blank import blank_reason, image_levels


def measure_cost(pipeline: Pipeline, baseline: Baseline, cfg: MonitorConfig, board: Board, repeats: int) -> dict[str, Any]:
    """Per-frame cost of monitoring one board's frame (module docstring); ``percent`` of the frame's time."""
    runtime = pipeline.runtime
    quiet = logging.getLogger("defect_detector.inspect")
    level, quiet.level = quiet.level, logging.ERROR  # the bare model cannot carry the baseline: no warning about it
    try:
        bare = Pipeline(Runtime.load(runtime.path, device="cpu", monitor_layers=()), conf=pipeline.conf)
    finally:
        quiet.setLevel(level)
    image = load_image_gray(board.image)
    given = load_image_gray(board.golden) if runtime.channels == 2 and board.golden else None

    designs = Designs(None)

    def frame(p: Pipeline) -> None:
        warped = designs.register(designs.of("board", given)[0], image, "board")[0] if given is not None else None
        p.detect([image], [warped] if warped is not None else None)

    with_stats: list[float] = []
    without: list[float] = []
    for _ in range(2):
        frame(pipeline)
        frame(bare)
    for i in range(repeats):
        for candidate in (pipeline, bare) if i % 2 == 0 else (bare, pipeline):
            start = time.perf_counter()
            frame(candidate)
            (with_stats if candidate is pipeline else without).append(time.perf_counter() - start)
    frame_ms = 1e3 * statistics.median(with_stats)
    stats_ratio = paired_ratio(with_stats, without)

    detector = DriftDetector(baseline, cfg)
    record = Prepare(pipeline, designs)(Frame(0, image, "cost", "board", 0.0), given)
    stats = pipeline.detect([image], [record.golden] if record.golden is not None else None)[0].stats
    golden_ms = None
    if baseline.relative:
        start = time.perf_counter()
        golden_of(pipeline, [record])  # a new golden image: one pipeline call
        golden_ms = 1e3 * (time.perf_counter() - start)
    work: list[float] = []
    for t in range(max(200, repeats)):
        start = time.perf_counter()
        levels = image_levels(image)  # what the prepare stage reads for drift: levels, the blank check
        blank_reason(image, levels)
        golden = golden_of(pipeline, [record])[0] if baseline.relative else None
        detector.update(stats.double().numpy(), t, "cost", golden, levels)
        work.append(time.perf_counter() - start)
    monitor_ms = 1e3 * statistics.median(work)
    percent = 100.0 * (stats_ratio - 1.0) + 100.0 * monitor_ms / frame_ms
    return {
        "frame": f"{image.shape[1]}x{image.shape[0]}, {runtime.channels} channel(s), {repeats} alternating pairs",
        "frame_ms": round(frame_ms, 2),
        "stats_ratio": round(stats_ratio, 4),
        "monitor_ms": round(monitor_ms, 3),
        "golden_ms": round(golden_ms, 2) if golden_ms is not None else None,
        "percent": round(percent, 2),
        "detector_update_only_ms": _update_ms(detector, np.asarray(stats.double().numpy())),
    }


def _update_ms(detector: DriftDetector, stats: np.ndarray) -> float:
    """Median ms of one detector update on its own (no golden image: a raw baseline reading; relative: the same work)."""
    golden = None
    if detector.relative:
        from defect_detector.monitor.golden import Golden

        golden = Golden("cost", stats)
    times = []
    for t in range(200):
        start = time.perf_counter()
        detector.update(stats, 10_000 + t, "cost", golden)
        times.append(time.perf_counter() - start)
    return round(1e3 * statistics.median(times), 4)
