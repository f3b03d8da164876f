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


def _busy_now(cores: list[int], window_s: float) -> float | None:
    """How many of ``cores`` were busy over the last ``window_s`` seconds, from ``/proc/stat`` (None without it)."""

    def read() -> dict[int, tuple[int, int]]:
        out = {}
        with open("/proc/stat") as fh:
            for line in fh:
                name, *values = line.split()
                if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
                    ticks = [int(v) for v in values[:8]]
                    out[int(name[3:])] = (sum(ticks), ticks[3] + ticks[4])  # total, idle + iowait
        return out

    try:
        before = read()
        time.sleep(window_s)
        after = read()
    except (OSError, ValueError, IndexError):
        return None
    busy = 0.0
    for cpu, (total, idle) in after.items():
        if cpu in before and total > before[cpu][0]:
            busy += 1.0 - (idle - before[cpu][1]) / (total - before[cpu][0])
    return busy


def free_cores(cores: int, busy: float) -> int:
    """Cores left for us when ``busy`` cores' worth of other work runs on ``cores``: ``cores - round(busy)``, at least 1."""
    return max(1, min(cores, cores - round(busy)))


def default_threads(window_s: float = 0.2) -> int:
    """The torch CPU thread count for ``train`` and ``predict`` when none is given: the cores actually free.

    The cores are those of ``os.sched_getaffinity``; the work already running on them is the larger of the
    1-minute load average (its share for those cores, when they are a subset of the machine's) and the busy share of those cores measured over ``window_s`` seconds (``/proc/stat``;
    the load average lags a process started a few seconds ago by most of a minute). One thread per core that
    is left, at least 1: on a shared machine a thread count that oversubscribes the cores stalls every
    parallel kernel on its slowest thread (OpenMP barriers), which costs far more than the idle core would."""
    cores = available_cores()
    try:
        load = os.getloadavg()[0] * len(cores) / max(len(cores), os.cpu_count() or 1)
    except (AttributeError, OSError):
        load = 0.0
    now = _busy_now(cores, window_s) if window_s > 0 else None
    return free_cores(len(cores), max(load, now or 0.0))
