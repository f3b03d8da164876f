"""Choosing the torch device (one rule for train, predict, export and bench) and the CPU thread count."""

from __future__ import annotations

import os
import time

import torch


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"`` -> CUDA when available (under torchrun, the local rank's GPU), else the CPU; otherwise
    ``torch.device(device)``. ``ValueError`` for a device other than ``cpu`` / ``cuda[:N]``, or CUDA asked for
    where there is none."""
    name = str(device)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and "LOCAL_RANK" in os.environ:
        name = f"cuda:{os.environ['LOCAL_RANK']}"
    try:
        resolved = torch.device(name)
    except RuntimeError as exc:
        raise ValueError(f"device must be auto, cpu or cuda[:N], got {device!r}") from exc
    if resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda[:N], got {device!r}")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available")
    return resolved


def available_cores() -> list[int]:
    """The CPUs this process may run on (``os.sched_getaffinity``; every CPU where that is missing)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return list(range(os.cpu_count() or 1))


def _own_ticks(stat: str = "/proc/self/stat") -> int:
    """This process's CPU ticks so far, all threads (idle OpenMP workers spin for a while after torch ops)."""
    with open(stat) as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _busy_now(cores: list[int], window_s: float, stat: str = "/proc/stat") -> float | None:
    """How many of ``cores`` were busy over the last ``window_s`` seconds, from ``/proc/stat`` (None without it)."""

    def read() -> dict[int, tuple[int, int]]:
        out = {}
        with open(stat) as fh:
            for line in fh:
                name, *values = line.split()
                if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
                    ticks = [int(v) for v in values[:8]]
                    out[int(name[3:])] = (sum(ticks), ticks[3] + ticks[4])  # total, idle + iowait
        return out

    try:
        before, own_before = read(), _own_ticks()
        time.sleep(window_s)
        after, own_after = read(), _own_ticks()
    except (OSError, ValueError, IndexError):
        return None
    busy, spans = 0.0, []
    for cpu, (total, idle) in after.items():
        if cpu in before and total > before[cpu][0]:
            busy += 1.0 - (idle - before[cpu][1]) / (total - before[cpu][0])
            spans.append(total - before[cpu][0])
    mine = (own_after - own_before) / (sum(spans) / len(spans)) if spans else 0.0
    return max(busy - mine, 0.0)


def free_cores(cores: int, busy: float) -> int:
    """Cores left for us when ``busy`` cores' worth of other work runs on ``cores``: ``cores - round(busy)``, at least 1."""
    return max(1, min(cores, cores - round(busy)))


def default_threads(window_s: float = 0.3) -> int:
    """The torch CPU thread count for ``train`` and ``predict`` when none is given: the cores actually free.

    The cores are those of ``os.sched_getaffinity``; the work already running on them is their busy share
    measured over ``window_s`` seconds (``/proc/stat``, less this process's own ticks), or, where that cannot
    be read, the 1-minute load average (its share for those cores). The load average is only the fallback: it
    lags a process started a few seconds ago by most of a minute, and it still counts work that ended, this
    process's own included, so on an idle machine after a run it would cost a core. One thread per core that
    is left, at least 1: on a shared machine a thread count that oversubscribes the cores stalls every
    parallel kernel on its slowest thread (OpenMP barriers), which costs far more than the idle core would: on
    2 cores with one busy, 2 threads ran predict 2-15x slower than 1 (``python -m benchmarks.bench_shared``),
    while one thread too few costs at most the idle cores' share.
    An ``OMP_NUM_THREADS`` set in the environment (torchrun sets 1 per process) is used as it is."""
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) >= 1:
        return int(omp)
    cores = available_cores()
    now = _busy_now(cores, window_s) if window_s > 0 else None
    if now is not None:
        return free_cores(len(cores), now)
    try:
        load = os.getloadavg()[0] * len(cores) / max(len(cores), os.cpu_count() or 1)
    except (AttributeError, OSError):
        load = 0.0
    return free_cores(len(cores), load)
