"""Memory over a long run, measured: how the resident set size (RSS) of ``Inspector.run`` grows per frame.

``python -m benchmarks.memory_slope [--frames 20000] [--outputs json|report] [--golden] [--out FILE.json]``

Small synthetic boards (96x128 px; eight of them, each frame a link to one) are inspected through ``Inspector.run``
as ``predict`` inspects a folder, with a small random model (a 64 px input: tens of frames a second on one thread):

- ``--outputs json``: ``--save-json`` with drift monitoring (a baseline from random statistics); ``--outputs report``:
  ``--no-monitor --report``, the two runs issue 58 measured;
- ``--golden``: a golden-template model, and a golden image of its own for every frame (a line whose every board has its
  own golden file: a new design, and with monitoring a ``changeover`` event, every frame), with a relative baseline.

The RSS is read from ``/proc/self/statm`` (Linux) every 100 frames while frames are inspected (a run of under 2,000
frames: 20 times); the slope is the least squares fit of RSS against frames over the second half of the run (the first
half holds the warm-up: allocator arenas, and the bounded caches of designs and golden files filling). Prints
``RSS slope X KB per frame ...`` and writes ``--out``. Target: below 0.05 KB per frame over 20,000 frames (issue 58
item 11: 0.5-1.2 KB a frame were held).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
SAMPLE_EVERY = 100
BOARDS = 8


def rss_kb() -> float:
    """This process's resident set size in KB (``/proc/self/statm``, Linux)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024


def slope_kb_per_frame(samples: np.ndarray) -> float:
    """The least-squares slope of RSS (KB, column 1) against frames (column 0) over the second half of ``samples``
    (float ``[N, 2]``); NaN with fewer than 2 points there."""
    half = samples[samples[:, 0] >= samples[-1, 0] / 2] if len(samples) else samples
    if len(half) < 2:
        return float("nan")
    return float(np.polyfit(half[:, 0], half[:, 1], 1)[0])


def make_inputs(folder: Path, frames: int, golden: bool) -> tuple[Path, Path, Path | None, Path | None]:
    """(small checkpoint, frame folder, golden folder or None, baseline or None) under ``folder``."""
    sys.path.insert(0, str(REPO / "tests"))
    from small_checkpoint import write_small_checkpoint

    from defect_detector.data.synth import generate_board
    from defect_detector.inspect.runtime import Runtime
    from defect_detector.monitor.baseline import calibrate

    checkpoint = write_small_checkpoint(folder / "small.pt", 64, in_channels=2 if golden else 1)
    rng = np.random.default_rng(0)
    boards = [generate_board(96, 128, rng)[0] for _ in range(BOARDS)]
    for k, board in enumerate(boards):
        assert cv2.imwrite(str(folder / f"board{k}.png"), board)
    source, references = folder / "frames", folder / "golden" if golden else None
    source.mkdir()
    for i in range(frames):
        (source / f"b{i:06d}.png").symlink_to(folder / f"board{i % BOARDS}.png")
    if references is not None:
        references.mkdir()
        for i in range(frames):  # each frame's own golden file: its board with two pixels that number it
            own = boards[i % BOARDS].copy()
            own[0, :2] = (i % 256, i // 256 % 256)
            assert cv2.imwrite(str(references / f"b{i:06d}.png"), own)
    layers = Runtime.load(checkpoint, device="cpu").layer_names
    stats = np.abs(rng.normal(1.0, 0.1, (64, len(layers), 2)))
    baseline = calibrate(stats, layers, 64, golden=np.abs(rng.normal(1.0, 0.1, (64, len(layers), 2))) if golden else None)
    baseline.save(folder / "baseline.json")
    return checkpoint, source, references, folder / "baseline.json"


def measure(frames: int, outputs: str, golden: bool, folder: Path) -> dict[str, Any]:
    """Inspect ``frames`` frames (see the module docstring) and return the RSS samples and their slope."""
    from defect_detector.inspect.inspector import Inspector

    checkpoint, source, references, baseline = make_inputs(folder, frames, golden)
    monitor = outputs == "json"
    samples: list[tuple[int, float]] = []

    every = max(1, min(SAMPLE_EVERY, frames // 20))  # a short run is sampled more often

    def sample(record: Any) -> None:
        if record.frame.index % every == 0 or record.frame.index == frames - 1:
            samples.append((record.frame.index + 1, rss_kb()))

    start = time.perf_counter()
    with Inspector.load(checkpoint, reference=references, device="cpu", threads=1, monitor=monitor,
                        baseline=baseline if monitor else None) as inspector:  # fmt: skip
        out = {"save_json": str(folder / "det.json")} if outputs == "json" else {"report": str(folder / "report.csv")}
        summary = inspector.run(str(source), on_result=sample, **out)
    seconds = time.perf_counter() - start
    points = np.array(samples, np.float64)
    return {
        "frames": summary["frames"],
        "outputs": outputs,
        "golden": golden,
        "verdicts": summary["verdicts"],
        "seconds": round(seconds, 1),
        "rss_kb_first": points[0, 1],
        "rss_kb_last": points[-1, 1],
        "slope_kb_per_frame": slope_kb_per_frame(points),
        "samples": points.tolist(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20000)
    parser.add_argument("--outputs", choices=["json", "report"], default="json")
    parser.add_argument("--golden", action="store_true", help="a golden-template model, a golden image of its own per frame")
    parser.add_argument("--out", type=Path, help="write the result as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="memory_slope.") as tmp:
        result = measure(args.frames, args.outputs, args.golden, Path(tmp))
    kind = ("golden-template, a golden file per frame; " if args.golden else "") + (
        "--save-json, drift monitored" if args.outputs == "json" else "--no-monitor --report"
    )
    print(
        f"RSS slope {result['slope_kb_per_frame']:.4f} KB per frame over {result['frames']} frames ({kind}; second half fitted); "
        f"RSS {result['rss_kb_first'] / 1024:.1f} -> {result['rss_kb_last'] / 1024:.1f} MB, {result['seconds']:.0f} s"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
