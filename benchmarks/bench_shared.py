"""Throughput on a shared CPU: the default thread count against the best ``--threads``, next to a competitor.

``python -m benchmarks.bench_shared [--weights PT] [--seconds 3] [--rounds 3] [--competitors 1] [--out FILE.json]``

Starts CPU-bound competitors (each a one-thread NumPy matmul loop in another process; 1 by default), then measures, in interleaved
rounds so that other load affects every setting alike:

- predict: frames/s of :meth:`Pipeline.detect` (one frame per call, float32 on the CPU) on the 640x640 DeepPCB
  boards of ``data/samples/deeppcb``;
- train: images/s of :func:`~defect_detector.engine.trainer.train_one_epoch` (the default model, batch 4, 256 px,
  augmentation on, no workers) on a few synthetic boards;

each at the default thread count (:func:`~defect_detector.core.devices.default_threads`, evaluated before each
default measurement as a fresh ``predict`` or ``train`` would) and at 1 and every count up to the cores.
Prints, and writes with ``--out``, the medians and ``default / best``. The target on a shared 2-core machine:
at least 0.5.

``--late [--duration 30] [--toggles 5,15,20]``: a competitor that starts after predict (at 5 s), stops (15 s) and
starts again (20 s), one run per policy: the thread count chosen at the start and kept (predict before v0.10), the
adaptive count (``AdaptiveThreads``, re-chosen every 2 s: predict now) and each fixed count. Reports each one's
frames through the run as a fraction of the best fixed count's, phase by phase. The target: at least 0.7.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import torch

from defect_detector.core.config import config_from_dict
from defect_detector.core.devices import AdaptiveThreads, available_cores, default_threads
from defect_detector.core.io import atomic_write_json

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "samples" / "deeppcb"
_COMPETITOR = "import numpy as np\na = np.random.rand(192, 192)\nwhile True:\n    a = np.tanh(a @ a)\n"


def start_competitor() -> subprocess.Popen:
    """A CPU-bound process using one core: a one-thread NumPy matmul loop."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", _COMPETITOR], env=env)


def sample_pipeline(weights: str | None) -> tuple[Callable[[Any], Any], list[Any]]:
    """(``detect(frame)``: one frame through the frame pipeline (``Pipeline.detect``, float32 on the CPU), the boards)."""
    from defect_detector.inspect.pipeline import Pipeline
    from defect_detector.inspect.runtime import Runtime

    frames = [cv2.imread(str(p), cv2.IMREAD_GRAYSCALE) for p in sorted(SAMPLES.glob("*_test.jpg"))]
    if not frames or any(f is None for f in frames):
        raise FileNotFoundError(f"{SAMPLES}: no readable *_test.jpg boards")
    pipeline = Pipeline(Runtime.load(weights, device="cpu", half=False))

    def detect(frame: Any) -> Any:
        return pipeline.detect([frame])

    detect(frames[0])
    return detect, frames


def predict_meter(weights: str | None) -> Callable[[float], float]:
    """``rate(seconds)``: frames/s of the frame pipeline on the sample boards, one frame per call."""
    detect, frames = sample_pipeline(weights)

    def rate(seconds: float) -> float:
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            detect(frames[count % len(frames)])
            count += 1
        return count / (time.perf_counter() - start)

    return rate


def train_meter(folder: Path) -> Callable[[float], float]:
    """``rate(seconds)``: images/s of ``train_one_epoch`` passes over 16 synthetic 256 px boards (4 steps each)."""
    from defect_detector.data.collate import build_loader
    from defect_detector.data.synth import write_synthetic_dataset
    from defect_detector.engine.run_data import build_datasets
    from defect_detector.engine.state import build_training
    from defect_detector.engine.trainer import train_one_epoch

    ann = write_synthetic_dataset(folder, n_images=16, height=320, width=320, seed=0)
    raw = {"data": {"train": str(ann), "imgsz": 256, "workers": 0}, "train": {"batch_size": 4, "device": "cpu", "amp": "off"}}
    cfg = config_from_dict(raw)
    train_set, _ = build_datasets(cfg)
    loader = build_loader(train_set, 4, train=True, workers=0, seed=0)
    t = build_training(cfg, torch.device("cpu"), len(loader), None, init=False)
    epoch = [0]

    def one_pass() -> dict[str, float]:
        loader.sampler.set_epoch(epoch[0])
        epoch[0] += 1
        settings = cfg.train.model_copy(update={"accumulate": 1, "grad_clip": 10.0, "max_bad_steps": 10**6})
        return train_one_epoch(t.model, loader, t, torch.device("cpu"), None, settings, progress=False)

    one_pass()

    def rate(seconds: float) -> float:
        images, elapsed = 0.0, 0.0
        while elapsed < seconds:
            stats = one_pass()
            images += stats["images_per_s"] * stats["seconds"]
            elapsed += stats["seconds"]
        return images / elapsed

    return rate


def compare(rate: Callable[[float], float], counts: list[int], rounds: int, seconds: float) -> dict[str, Any]:
    """Medians over ``rounds`` of ``rate`` at the default thread count and at each of ``counts``; ``default / best``."""
    samples: dict[str, list[float]] = {"default": [], **{str(n): [] for n in counts}}
    chosen = []
    for _ in range(rounds):
        for key in samples:
            threads = default_threads() if key == "default" else int(key)
            if key == "default":
                chosen.append(threads)
            torch.set_num_threads(threads)
            samples[key].append(rate(seconds))
    medians = {key: statistics.median(values) for key, values in samples.items()}
    best = max(medians[str(n)] for n in counts)
    return {"default_threads": chosen, "per_s": medians, "ratio_default_to_best": medians["default"] / best}


def _run_schedule(
    detect: Callable[[Any], Any], frames: list[Any], policy: str, duration: float, toggles: list[float], start: int | None = None
) -> list[float]:
    """Frame completion times (seconds from the start) of ``detect`` for ``duration`` seconds while a
    competitor runs between ``toggles`` (start, stop, start, ...). ``policy``: ``adaptive`` (a fresh
    :class:`AdaptiveThreads`, ticked per frame as ``Inspector`` does, starting from the count chosen at the start) or
    ``start`` (the count chosen at the start and kept, as predict did before) or a fixed count. ``start``: the count
    at the start (None: :func:`default_threads` now; the machine's cores play an idle machine's choice)."""
    start_threads = default_threads() if start is None else start
    torch.set_num_threads(start_threads if policy in ("start", "adaptive") else int(policy))
    auto = AdaptiveThreads() if policy == "adaptive" else None
    competitor: subprocess.Popen | None = None
    pending, done, begin = list(toggles), [], time.perf_counter()
    try:
        while (now := time.perf_counter() - begin) < duration:
            if pending and now >= pending[0]:
                pending.pop(0)
                if competitor is None:
                    competitor = start_competitor()
                else:
                    competitor.kill()
                    competitor.wait()
                    competitor = None
            detect(frames[len(done) % len(frames)])
            if auto is not None:
                auto.tick()
            done.append(time.perf_counter() - begin)
    finally:
        if competitor is not None:
            competitor.kill()
            competitor.wait()
    return done


def late_competitor(
    weights: str | None, duration: float, toggles: list[float], start: int | None = None, repeats: int = 1
) -> dict[str, Any]:
    """predict's throughput through a run during which a competitor starts (and stops, and starts again) at ``toggles``:
    the count chosen at the start and kept, the adaptive count, and every fixed count, one run each per round, rounds
    interleaved (``repeats``). Per round and phase (between toggles) the best fixed count's rate is the best
    achievable; a policy's fraction is its frames / those best frames over the run; the median over rounds is reported
    (other load on the machine moves a single round's best)."""
    detect, frames = sample_pipeline(weights)
    counts = [str(n) for n in range(1, len(available_cores()) + 1)]
    policies = ["start", "adaptive", *counts]
    edges = [0.0, *toggles, duration]
    rounds = []
    for _ in range(repeats):
        runs = {policy: _run_schedule(detect, frames, policy, duration, toggles, start) for policy in policies}
        per_phase = {policy: [sum(a <= t < b for t in times) / (b - a) for a, b in zip(edges, edges[1:])] for policy, times in runs.items()}
        best = [max(per_phase[c][i] for c in counts) for i in range(len(edges) - 1)]
        best_frames = sum(rate * (b - a) for rate, a, b in zip(best, edges, edges[1:]))
        rounds.append(
            {
                "per_phase_frames_per_s": {k: [round(v, 2) for v in rates] for k, rates in per_phase.items()},
                "best_per_phase": [round(v, 2) for v in best],
                "fraction_of_best": {policy: round(len(times) / best_frames, 3) for policy, times in runs.items()},
            }
        )
    return {
        "duration_s": duration,
        "start_threads": start if start is not None else "default_threads() at each start",
        "competitor_toggles_s": toggles,
        "rounds": rounds,
        "fraction_of_best": {p: statistics.median(r["fraction_of_best"][p] for r in rounds) for p in policies},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_shared", description=__doc__.split("\n")[0])
    parser.add_argument("--weights", help="checkpoint or artifact for predict (default: the bundled model)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians are reported; --late too)")
    parser.add_argument("--competitors", type=int, default=1, help="competitor processes (0: measure the machine as it is)")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds the competitors run before measuring")
    parser.add_argument("--out", help="also write the results as JSON here")
    parser.add_argument(
        "--late",
        action="store_true",
        help="instead: one predict run of --duration s while a competitor starts, stops and starts again (--toggles): "
        "the thread count kept from the start against the adaptive one, as fractions of the best fixed count per phase",
    )
    parser.add_argument("--duration", type=float, default=30.0, help="--late: seconds per run")
    parser.add_argument("--toggles", default="5,15,20", help="--late: seconds at which the competitor starts, stops, starts ...")
    parser.add_argument(
        "--start-threads",
        type=int,
        help="--late: the count both policies start at (default: the cores free then; all cores: an idle machine)",
    )
    args = parser.parse_args(argv)
    if args.late:
        toggles = [float(t) for t in args.toggles.split(",") if t.strip()]
        results = late_competitor(args.weights, args.duration, toggles, args.start_threads, args.rounds)
        for policy, fraction in results["fraction_of_best"].items():
            each = ", ".join(f"{r['fraction_of_best'][policy]:.2f}" for r in results["rounds"])
            rates = "; ".join(", ".join(f"{v:.1f}" for v in r["per_phase_frames_per_s"][policy]) for r in results["rounds"])
            print(f"predict threads {policy}: {fraction:.2f} of the best through the run (rounds {each}; frames/s per phase {rates})")
        if args.out:
            atomic_write_json(args.out, results)
        return 0
    counts = list(range(1, len(available_cores()) + 1))
    competitors = [start_competitor() for _ in range(args.competitors)]
    try:
        time.sleep(args.settle)
        with tempfile.TemporaryDirectory() as tmp:
            results = {
                "cores": len(available_cores()),
                "competitors": f"{args.competitors} x one-thread NumPy matmul loop",
                "load_average_1min": os.getloadavg()[0],
                "predict_frames": compare(predict_meter(args.weights), counts, args.rounds, args.seconds),
                "train_images": compare(train_meter(Path(tmp)), counts, args.rounds, args.seconds),
            }
    finally:
        for competitor in competitors:
            competitor.kill()
            competitor.wait()
    for kind in ("predict_frames", "train_images"):
        r = results[kind]
        rates = ", ".join(f"{k} threads {v:.2f}/s" for k, v in r["per_s"].items())
        print(f"{kind}: {rates}; default chose {r['default_threads']}; default/best {r['ratio_default_to_best']:.2f}")
    if args.out:
        atomic_write_json(args.out, results)
    else:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
