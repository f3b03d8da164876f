"""How the benchmarks time: candidates called interleaved, one call of each per round, and paired per-round ratios."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any


def measure_interleaved(
    candidates: dict[str, Callable[[], Any]], iters: int, warmup: int = 2, raw: dict[str, list[float]] | None = None
) -> dict[str, dict[str, float]]:
    """Time each callable ``iters`` times, one call of each per round; ``{name: {"median_ms", "p90_ms", "min_ms"}}``.
    ``raw``, when given, receives every call's time in ms, in round order, per name."""
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(iters):
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1000.0)
    if raw is not None:
        raw.update(times)
    return {name: _summary(values) for name, values in times.items()}


def paired_ratio(times: list[float], reference: list[float]) -> float:
    """Median over rounds of ``times[i] / reference[i]`` (two candidates timed in the same rounds): unlike a
    ratio of medians, it cancels the machine speeding up or slowing down between rounds."""
    return statistics.median(a / b for a, b in zip(times, reference))


def _summary(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return {"median_ms": round(statistics.median(ordered), 3), "p90_ms": round(p90, 3), "min_ms": round(ordered[0], 3), "n": len(ordered)}
