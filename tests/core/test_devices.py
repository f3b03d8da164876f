from pathlib import Path

import numpy as np
import pytest
import torch
from small_checkpoint import write_small_checkpoint

from defect_detector.core import devices
from defect_detector.core.devices import default_threads, free_cores
from defect_detector.inspect import runtime


@pytest.mark.parametrize(
    ("cores", "busy", "threads"),
    [(2, 0.0, 2), (2, 0.3, 2), (2, 0.8, 1), (2, 1.0, 1), (2, 2.6, 1), (16, 3.4, 13), (4, 9.0, 1)],
)
def test_free_cores_leaves_the_busy_ones(cores: int, busy: float, threads: int) -> None:
    assert free_cores(cores, busy) == threads


def _stat(path: Path, rows: dict[int, tuple[int, int]]) -> None:
    """A /proc/stat with ``cpuN user nice system idle iowait irq softirq steal`` rows of (busy, idle) ticks."""
    lines = ["cpu  0 0 0 0 0 0 0 0"] + [f"cpu{n} {busy} 0 0 {idle} 0 0 0 0" for n, (busy, idle) in rows.items()]
    path.write_text("\n".join(lines + ["intr 1 2 3", "ctxt 5"]) + "\n")


def test_busy_now_counts_the_busy_share_of_our_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stat = tmp_path / "stat"
    _stat(stat, {0: (100, 100), 1: (100, 100), 2: (100, 100)})
    # over the window cpu0 is all busy, cpu1 idle, cpu2 half busy
    monkeypatch.setattr(devices.time, "sleep", lambda s: _stat(stat, {0: (200, 100), 1: (100, 200), 2: (150, 150)}))
    monkeypatch.setattr(devices, "_own_ticks", lambda: 7)  # this process used no CPU over the window
    assert devices._busy_now([0, 1, 2], 0.1, str(stat)) == pytest.approx(1.5)
    _stat(stat, {0: (100, 100), 1: (100, 100), 2: (100, 100)})
    ticks = iter([7, 57])  # this process's own threads used half a core's ticks over the window: not a competitor
    monkeypatch.setattr(devices, "_own_ticks", lambda: next(ticks))
    assert devices._busy_now([0, 1, 2], 0.1, str(stat)) == pytest.approx(1.0)
    monkeypatch.setattr(devices, "_own_ticks", lambda: 7)
    _stat(stat, {0: (100, 100), 1: (100, 100), 2: (100, 100)})
    assert devices._busy_now([1], 0.1, str(stat)) == pytest.approx(0.0), "only the CPUs we may run on count"
    assert devices._busy_now([0], 0.1, str(tmp_path / "missing")) is None


def test_default_threads_follows_the_busy_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(devices, "available_cores", lambda: [0, 1, 2, 3])
    monkeypatch.setattr(devices.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(devices.os, "getloadavg", lambda: (2.9, 0.5, 0.5))
    monkeypatch.setattr(devices, "_busy_now", lambda cores, window_s: 0.1)
    assert default_threads() == 4, "work that ended (still in the load average) does not cost a core"
    monkeypatch.setattr(devices, "_busy_now", lambda cores, window_s: 1.0)
    assert default_threads() == 3, "a competitor started a moment ago counts before the load average shows it"
    monkeypatch.setattr(devices, "_busy_now", lambda cores, window_s: None)  # no /proc/stat: the load average
    assert default_threads() == 1
    monkeypatch.setattr(devices.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(devices.os, "getloadavg", lambda: (32.0, 0.0, 0.0))
    assert default_threads() == 2, "a machine-wide load is shared out over all its cores, not only ours"
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert default_threads() == 2


def test_own_ticks_count_every_thread_of_this_process() -> None:
    """What :class:`CoreLoad` takes off as this process's own work counts the CPU time of all its threads (a thread of
    ours spinning is not someone else's work). The thread spins until it has used 0.3 s of CPU, however loaded the
    machine is, so no wall-clock window is read."""
    import os
    import threading
    import time

    def spin() -> None:
        while time.thread_time() < 0.3:
            pass

    before = devices._own_ticks()
    worker = threading.Thread(target=spin)
    worker.start()
    worker.join()
    assert devices._own_ticks() - before >= 0.25 * os.sysconf("SC_CLK_TCK")


def test_inspector_load_uses_the_default_threads_and_runtime_load_leaves_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from defect_detector.inspect import inspector

    checkpoint = write_small_checkpoint(tmp_path / "small.pt", imgsz=64)
    before = torch.get_num_threads()
    other = 1 if before > 1 else 2
    monkeypatch.setattr(inspector, "default_threads", lambda: other)
    try:
        runtime.Runtime.load(checkpoint, device="cpu", trace=False)
        assert torch.get_num_threads() == before  # the library call keeps what the caller set
        inspector.Inspector.load(checkpoint, device="cpu").close()
        assert torch.get_num_threads() == other  # the product path (predict) takes the free cores
    finally:
        torch.set_num_threads(before)


class _Load:
    """A stand-in :class:`devices.CoreLoad`: the busy cores each :meth:`busy` call reports."""

    def __init__(self, *busy: float | None) -> None:
        self.values = list(busy)

    def busy(self) -> float | None:
        return self.values.pop(0)


def test_adaptive_threads_follow_other_work_while_running(monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_num_threads()
    now = [0.0]
    auto = devices.AdaptiveThreads(interval_s=2.0, cores=[0, 1, 2, 3], clock=lambda: now[0])
    auto.load = _Load(0.0, 2.2, None, 0.4)  # idle, a 2-core program starts, /proc/stat unreadable, it ends
    try:
        torch.set_num_threads(1)
        assert auto.tick() is None  # not yet time
        now[0] = 2.0
        assert auto.tick() == 4 and torch.get_num_threads() == 4
        assert auto.tick() is None and torch.get_num_threads() == 4  # within the interval: nothing read
        now[0] = 4.5
        assert auto.tick() == 2 and torch.get_num_threads() == 2
        now[0] = 7.0
        assert auto.tick() is None and torch.get_num_threads() == 2  # no reading: keep the count
        now[0] = 9.0
        assert auto.tick() == 4 and auto.changes == 3
    finally:
        torch.set_num_threads(before)


def test_adaptive_threads_only_where_nothing_fixes_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert isinstance(devices.AdaptiveThreads.for_device(torch.device("cpu")), devices.AdaptiveThreads)
    assert devices.AdaptiveThreads.for_device(torch.device("cuda")) is None
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert devices.AdaptiveThreads.for_device(torch.device("cpu")) is None


def test_inspector_rechooses_threads_unless_they_are_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from defect_detector.inspect import inspector

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    checkpoint = write_small_checkpoint(tmp_path / "small.pt", imgsz=64)
    before = torch.get_num_threads()
    try:
        with inspector.Inspector.load(checkpoint, device="cpu", threads=1, monitor=False) as fixed:
            assert fixed.autothreads is None  # --threads N is kept
        with inspector.Inspector.load(checkpoint, device="cpu", monitor=False) as auto:
            assert auto.autothreads is not None
            auto.autothreads.clock = lambda: float("inf")  # the interval has passed at every frame
            cores = len(auto.autothreads.cores)
            auto.autothreads.load = _Load(cores - 1.0, 0.0)  # all but one core taken, then all free
            auto.inspect(np.zeros((64, 64), np.uint8))
            assert torch.get_num_threads() == 1
            auto.inspect(np.zeros((64, 64), np.uint8))
            assert torch.get_num_threads() == cores
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("flags", "native"), [("fpu avx512f avx512_bf16 avx512_vnni", True), ("fpu amx_bf16 amx_tile", True), ("fpu avx2 avx512f", False)]
)
def test_cpu_bf16_reads_the_cpu_flags(tmp_path: Path, flags: str, native: bool) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: test\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    assert devices.cpu_bf16(str(cpuinfo)) is (native and torch.backends.mkldnn.is_available())
    assert devices.cpu_bf16(str(tmp_path / "missing")) is False
