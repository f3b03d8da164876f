"""Line station benchmark: what recording costs a 30 frames/s line, and how fast the pages answer on a long history.

1. Recording (SQLite): ``--frames`` gray frames handed to a :class:`~defect_detector.station.recorder.Recorder` at
   ``--fps`` (synthetic boards with camera blur and noise), a ``--queued`` fraction of them with a call at the
   operating point (so their PNG is written), with board serials with ``--serials`` (each board shot twice: every
   batch asks the database which serials it has seen, for first-pass yield). Reported:
   the time ``record()`` takes the inspection thread (``caller_fraction``: its share of the frame period), and the CPU
   the whole recording costs, the writer thread's PNG encoding and inserts included (``cpu_fraction``: process CPU
   time over the run, less that of the same loop without a recorder, / the frames' total period). Target: <= 5% of
   frame time.
2. Pages (``--history`` frames, 3 calls each, 10% queued, written straight into the tables over the last hour):
   median and p90 response time of the live page's HTML and its ``/api/live`` poll, ``/api/inspections``, the review
   page and ``/api/review/next``, over HTTP to uvicorn on localhost. Target: < 200 ms.

Run: ``python -m benchmarks.station_bench [--serials] [--db postgresql://...] [--out results.json]`` (SQLite in a temp folder by
default; a PostgreSQL URL is used for part 2 only, on a fresh set of tables it creates, so give an empty database).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import statistics
import tempfile
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from defect_detector.data.images import load_image_gray
from defect_detector.data.synth import generate_board_pair
from defect_detector.station.db import make_engine, parse_url
from defect_detector.station.images import write_png
from defect_detector.station.migrations import ensure_schema
from defect_detector.station.recorder import Recorder
from defect_detector.station.records import CallRecord, FrameRecord
from defect_detector.station.schema import calls, class_tallies, classes, inspections, set_meta, tallies

CLASSES = ("open", "short", "mousebite", "spur", "copper", "pin-hole")
TARGETS = {"recording_fraction_max": 0.05, "page_ms_max": 200.0}
PAGES = ("/", "/api/live", "/api/inspections?limit=50", "/review", "/api/review/next")


def _frame_record(i: int, image: np.ndarray, queued: bool, now: datetime, serials: bool = False) -> FrameRecord:
    top = 0.9 if queued else 0.3
    found = tuple(CallRecord(CLASSES[(i + k) % 6], top - 0.1 * k, (10.0 + k, 20.0, 40.0 + k, 60.0)) for k in range(3))
    serial = f"SN{i // 2:08d}" if serials else None  # each board shot twice: every batch asks which serials were seen
    record = FrameRecord("bench", i, f"f{i}.png", now, "bench.pt", "fail", drift="normal", score=0.5, calls=found, image=image)
    return dataclasses.replace(record, serial=serial, lot="L1" if serials else None)


def camera_frame(size: int, seed: int) -> np.ndarray:
    """A synthetic board as a camera sees it: slightly blurred, reduced contrast, sensor noise (sigma 3 levels); uint8
    ``[size, size]``. Noise is what makes a PNG expensive: a clean binary board encodes 4x faster."""
    rng = np.random.default_rng(seed)
    board = generate_board_pair(size, size, rng, (2, 4))[0]
    blurred = cv2.GaussianBlur(board, (0, 0), 1.5).astype(np.float32)
    return np.clip(blurred * 0.6 + 50 + rng.normal(0, 3, board.shape), 0, 255).astype(np.uint8)


class _NoRecorder:
    """The baseline: the same paced loop, frames handed to nobody."""

    def record(self, record: FrameRecord) -> bool:
        return True


def _paced(
    recorder: Any, images: list[np.ndarray], frames: int, period: float, every: int, serials: bool = False
) -> tuple[list[float], float, float]:
    """Hand ``frames`` records to ``recorder`` one per ``period`` (with board serials: ``serials``); (record() seconds
    each, process CPU s, wall s)."""
    caller: list[float] = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for i in range(frames):
        delay = wall0 + i * period - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        record = _frame_record(i, images[i % len(images)], bool(every) and i % every == 0, datetime.now(timezone.utc), serials)
        t0 = time.perf_counter()
        recorder.record(record)
        caller.append(time.perf_counter() - t0)
    if isinstance(recorder, Recorder):
        recorder.flush(120)
    return caller, time.process_time() - cpu0, time.perf_counter() - wall0


def bench_recording(  # noqa: PLR0913 - the benchmark's knobs, one keyword each
    frames: int, fps: float, size: int, queued: float, folder: Path, pattern: str | None = None, serials: bool = False
) -> dict[str, Any]:
    """Part 1 (module docstring) into a SQLite file in ``folder``. The CPU of the same paced loop without a recorder
    (making the records, sleeping) is measured first and subtracted. ``pattern``: a glob of image files to record
    instead of the synthetic camera frames; ``serials``: each frame with a board serial (each board shot twice)."""
    if pattern:
        files = sorted(glob.glob(pattern))[:8]
        if not files:
            raise FileNotFoundError(f"--images {pattern}: no files")
        images = [load_image_gray(f) for f in files]
    else:
        images = [camera_frame(size, i) for i in range(4)]
    period = 1.0 / fps
    every = max(1, round(1 / queued)) if queued > 0 else 0
    _, base_cpu, _ = _paced(_NoRecorder(), images, frames, period, every, serials)
    recorder = Recorder(str(folder / "record.db"), conf=0.5, classes=CLASSES)
    recorder.record(_frame_record(-1, images[0], False, datetime.now(timezone.utc)))  # schema and first connection
    recorder.flush(60)
    caller, cpu, wall = _paced(recorder, images, frames, period, every, serials)
    recorder.close()
    cost = max(cpu - base_cpu, 0.0)
    return {
        "frames": frames,
        "fps": fps,
        "frame": f"{images[0].shape[1]}x{images[0].shape[0]}",
        "images": pattern or "synthetic camera frames (noise sigma 3)",
        "serials": serials,
        "queued_fraction": queued,
        "recorded": recorder.recorded - 1,
        "unrecorded": recorder.unrecorded,
        "caller_median_ms": round(statistics.median(caller) * 1e3, 4),
        "caller_p99_ms": round(float(np.percentile(caller, 99)) * 1e3, 4),
        "caller_fraction": round(statistics.mean(caller) / period, 5),
        "cpu_ms_per_frame": round(cost / frames * 1e3, 3),
        "cpu_fraction": round(cost / (frames * period), 4),
        "baseline_cpu_ms_per_frame": round(base_cpu / frames * 1e3, 3),
        "wall_s": round(wall, 2),
    }


def fill_history(url: str, n: int, folder: Path, queued: float = 0.1) -> None:
    """``n`` inspections (3 calls each, ``queued`` of them waiting for review) over the last hour, written in bulk."""
    parsed = parse_url(url)
    engine = make_engine(parsed)
    ensure_schema(engine)
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    start = now - timedelta(minutes=59)
    step = (now - start) / max(n, 1)
    every = max(1, round(1 / queued))
    images = folder / "images"
    write_png(images, "live/latest.png", np.full((640, 640), 128, np.uint8))
    chunk = 5000
    with engine.begin() as conn:
        conn.execute(classes.insert(), [{"name": c} for c in CLASSES])
        set_meta(conn, "images_root", str(images))
    minute_boards: dict[datetime, int] = {}
    minute_class: dict[tuple[datetime, str], int] = {}
    for lo in range(0, n, chunk):
        rows, when = [], []
        for i in range(lo, min(n, lo + chunk)):
            t = start + step * i
            when.append(t)
            latest = i == n - 1
            rows.append(
                {"source": "bench", "frame": i, "name": f"f{i}.png", "time": t, "model": "bench.pt", "reference": None}
                | {"verdict": "fail", "reason": None, "drift": "normal", "score": 0.5, "width": 640, "height": 640}
                | {"image": "live/latest.png" if latest else None, "reference_image": None, "queued": i % every == 0}
            )
        with engine.begin() as conn:
            ids = conn.execute(inspections.insert().returning(inspections.c.id, sort_by_parameter_order=True), rows).scalars().all()
            call_rows = []
            for k, (inspection_id, row, t) in enumerate(zip(ids, rows, when)):
                minute = t.replace(second=0, microsecond=0)
                minute_boards[minute] = minute_boards.get(minute, 0) + 1
                for j in range(3):
                    name = CLASSES[(lo + k + j) % 6]
                    minute_class[(minute, name)] = minute_class.get((minute, name), 0) + 1
                    pending = row["queued"] and j == 0
                    call_rows.append(
                        {"inspection_id": inspection_id, "class_name": name, "score": 0.9 - 0.1 * j, "x1": 10.0, "y1": 20.0}
                        | {"x2": 40.0, "y2": 60.0, "time": t, "review": pending, "pending": pending, "verdict": None, "verdict_class": None}
                    )
            conn.execute(calls.insert(), call_rows)
            if lo + chunk >= n:
                set_meta(conn, "live", str(ids[-1]))
    with engine.begin() as conn:
        conn.execute(tallies.insert(), [{"minute": m, "boards": b, "calls": 3 * b} for m, b in minute_boards.items()])
        conn.execute(class_tallies.insert(), [{"minute": m, "class_name": c, "calls": v} for (m, c), v in minute_class.items()])
    engine.dispose()


def _time_get(url: str, iters: int, warmup: int = 3) -> dict[str, float]:
    times = []
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as response:
            response.read()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": round(statistics.median(times), 2), "p90_ms": round(float(np.percentile(times, 90)), 2), "n": iters}


def bench_pages(url: str, history: int, iters: int, folder: Path) -> dict[str, Any]:
    """Part 2 (module docstring) on the database at ``url``."""
    from defect_detector.station.app import create_app
    from defect_detector.station.server import running
    from defect_detector.station.store import Store

    t0 = time.perf_counter()
    fill_history(url, history, folder)
    fill_s = time.perf_counter() - t0
    with Store(url) as store, running(create_app(store)) as base:
        pages = {path: _time_get(base + path, iters) for path in PAGES}
    return {"history": history, "fill_s": round(fill_s, 1), "pages": pages}


def run(  # noqa: PLR0913 - the benchmark's knobs, one keyword each
    frames: int,
    fps: float,
    size: int,
    queued: float,
    history: int,
    iters: int,
    db: str | None,
    pattern: str | None = None,
    serials: bool = False,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="station_bench_") as tmp:
        folder = Path(tmp)
        recording = bench_recording(frames, fps, size, queued, folder, pattern, serials)
        pages = bench_pages(db or str(folder / "history.db"), history, iters, folder)
    slowest = max(p["median_ms"] for p in pages["pages"].values())
    return {
        "recording": recording,
        "pages": pages,
        "targets": TARGETS,
        "met": {
            "recording": max(recording["caller_fraction"], recording["cpu_fraction"]) <= TARGETS["recording_fraction_max"],
            "pages": slowest < TARGETS["page_ms_max"],
        },
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=300, help="frames recorded (default 300: 10 s at 30 frames/s)")
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--size", type=int, default=640, help="frame side in pixels (default 640, DeepPCB's)")
    parser.add_argument("--images", help="record these image files (a glob, e.g. 'data/samples/deeppcb/*.jpg') instead")
    parser.add_argument("--queued", type=float, default=0.2, help="fraction of frames queued for review (PNG kept)")
    parser.add_argument("--history", type=int, default=100_000, help="recorded frames for the page timings")
    parser.add_argument("--iters", type=int, default=30, help="timed requests per page")
    parser.add_argument("--db", help="database for the page timings (default: SQLite in a temp folder)")
    parser.add_argument("--serials", action="store_true", help="give each frame a board serial (each board shot twice)")
    parser.add_argument("--out", help="write the results JSON here")
    args = parser.parse_args(argv)
    result = run(args.frames, args.fps, args.size, args.queued, args.history, args.iters, args.db, args.images, args.serials)
    rec = result["recording"]
    print(
        f"recording {rec['frames']} frames of {rec['frame']} ({rec['images']}) at {rec['fps']:g} frames/s "
        f"({rec['queued_fraction']:.0%} queued, PNG kept): "
        f"record() median {rec['caller_median_ms']} ms ({rec['caller_fraction']:.3%} of the frame period), all recording CPU "
        f"{rec['cpu_ms_per_frame']} ms/frame ({rec['cpu_fraction']:.2%}); recorded {rec['recorded']}, unrecorded {rec['unrecorded']}"
    )
    pages = result["pages"]
    print(f"pages on {pages['history']} recorded frames (filled in {pages['fill_s']} s):")
    for path, t in pages["pages"].items():
        print(f"  GET {path:28s} median {t['median_ms']:7.2f} ms  p90 {t['p90_ms']:7.2f} ms")
    print(f"targets met: {result['met']}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
