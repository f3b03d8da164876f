"""Choosing the torch device (one rule for train, predict, export and bench) and the CPU thread count."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import torch

log = logging.getLogger("defect_detector")


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


def cpu_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU multiplies bfloat16 natively (``avx512_bf16`` or ``amx_bf16`` among its flags) and torch's
    oneDNN can use it: bfloat16 then runs the model 1.2-1.3x faster than float32 (measured on the
    project's AMD EPYC); emulated elsewhere, it is slower. False where the flags cannot be read."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


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


class CoreLoad:
    """How many of ``cores`` other work kept busy between two readings of ``/proc/stat`` (less this process's own
    ticks): :meth:`busy` returns the share since the previous call (or since construction), without sleeping, so a
    long run can re-read it every few seconds at no cost. None where ``/proc/stat`` cannot be read."""

    def __init__(self, cores: list[int], stat: str = "/proc/stat") -> None:
        self.cores, self.stat = set(cores), stat
        self._last = self._read()

    def _read(self) -> tuple[dict[int, tuple[int, int]], int] | None:
        out = {}
        try:
            with open(self.stat) as fh:
                for line in fh:
                    name, *values = line.split()
                    if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in self.cores:
                        ticks = [int(v) for v in values[:8]]
                        out[int(name[3:])] = (sum(ticks), ticks[3] + ticks[4])  # total, idle + iowait
            return out, _own_ticks()
        except (OSError, ValueError, IndexError):
            return None

    def busy(self) -> float | None:
        """Cores' worth of other work since the last call (0 .. len(cores))."""
        before, after = self._last, self._read()
        self._last = after
        if before is None or after is None:
            return None
        busy, spans = 0.0, []
        for cpu, (total, idle) in after[0].items():
            if cpu in before[0] and total > before[0][cpu][0]:
                busy += 1.0 - (idle - before[0][cpu][1]) / (total - before[0][cpu][0])
                spans.append(total - before[0][cpu][0])
        mine = (after[1] - before[1]) / (sum(spans) / len(spans)) if spans else 0.0
        return max(busy - mine, 0.0)


def _busy_now(cores: list[int], window_s: float, stat: str = "/proc/stat") -> float | None:
    """How many of ``cores`` were busy with other work over the next ``window_s`` seconds (None without ``/proc/stat``)."""
    load = CoreLoad(cores, stat)
    time.sleep(window_s)
    return load.busy()


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


class AdaptiveThreads:
    """Re-chooses torch's CPU thread count while a long run goes on, as :func:`default_threads` chose it at the
    start: every ``interval_s`` seconds (checked from :meth:`tick`, called once per frame) the cores other work kept
    busy since the last check are read (:class:`CoreLoad`, no sleeping) and the threads set to the cores left, at
    least 1. A program that starts beside a run costs it at most one interval at the old count; one that ends gives
    its cores back as soon. Build it with :meth:`for_device` (None where the count must not move)."""

    def __init__(self, interval_s: float = 2.0, cores: list[int] | None = None, clock: Any = time.monotonic) -> None:
        self.cores = cores if cores is not None else available_cores()
        self.interval_s = interval_s
        self.clock = clock
        self.load = CoreLoad(self.cores)
        self._next = clock() + interval_s
        self.changes = 0

    @classmethod
    def for_device(cls, device: torch.device, interval_s: float = 2.0) -> AdaptiveThreads | None:
        """An adaptive count for a CPU run; None on CUDA or where ``OMP_NUM_THREADS`` fixes it."""
        omp = os.environ.get("OMP_NUM_THREADS", "")
        if device.type != "cpu" or (omp.isdigit() and int(omp) >= 1):
            return None
        return cls(interval_s)

    def tick(self) -> int | None:
        """Re-choose when the interval has passed; the thread count set then (None between checks, or without
        ``/proc/stat``)."""
        now = self.clock()
        if now < self._next:
            return None
        self._next = now + self.interval_s
        busy = self.load.busy()
        if busy is None:
            return None
        threads = free_cores(len(self.cores), busy)
        if threads != torch.get_num_threads():
            before = torch.get_num_threads()
            log.info("torch threads %d -> %d (other work keeps %.1f of %d cores busy)", before, threads, busy, len(self.cores))
            torch.set_num_threads(threads)
            self.changes += 1
        return threads


_BLAS: Any = None


def one_blas_thread() -> Any:
    """A context in which NumPy's BLAS (OpenBLAS) runs on one thread: registration's small solves and products take
    3-5 ms there, 100 ms or more when OpenBLAS spreads them over cores that torch or another program keeps busy
    (measured on the 2-core machine under load). ``threadpoolctl`` finds the library once per process."""
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController

        _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=1, user_api="blas")
