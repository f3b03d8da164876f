"""Stopping is finishing, measured: signals and kill -9 at random moments of real ``predict`` processes.

``python -m benchmarks.bench_stop [--runs 10] [--frames 500] [--out FILE.json]``

For each run a ``predict`` process starts on a ``--frames`` folder (annotated images + ``--save-json``) or video
(per-frame JSONL + annotated mp4 + ``--save-json``) of small synthetic frames with a small random model (detections on
every frame), and after a random 0.5-4 s of inspection it gets:

- SIGTERM: counted good when it exits 143, no temp file or lock is left, and every frame its summary line counts is in
  every output (folder: the json's file names = the annotated images = the summary's frames; video: JSONL lines = mp4
  frames = the summary's frames);
- kill -9 (video): counted good when the next run recovers the temp JSONL whole (every line parses, frames 0..n-1)
  and it holds at least the lines seen on disk just before the kill (lines are flushed per frame, fsynced every
  second: a kill loses none, a power cut at most the last second).

Prints and writes (``--out``) the counts per case. Target: every run good.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[1]
WAIT_S = 120.0


def make_inputs(folder: Path, frames: int) -> tuple[Path, Path, Path]:
    """(small checkpoint, image folder, video) under ``folder``."""
    sys.path.insert(0, str(REPO / "tests"))
    from small_checkpoint import write_small_checkpoint

    checkpoint = write_small_checkpoint(folder / "small.pt", 64)
    images = folder / "boards"
    images.mkdir()
    rng = np.random.default_rng(0)
    for i in range(frames):
        cv2.imwrite(str(images / f"b{i:04d}.png"), rng.integers(0, 255, (48, 64), dtype=np.uint8))
    video = folder / "line.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 10.0, (64, 48))
    for _ in range(frames):
        writer.write(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8))
    writer.release()
    return checkpoint, images, video


def start(source: Path, checkpoint: Path, out: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "defect_detector.cli", "predict", str(source), "--weights", str(checkpoint), "--device", "cpu"]
    argv += ["--threads", "1", "--no-monitor", "--save-json", str(out / "det.json"), "--save-dir", str(out / "annotated")]
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_ALBUMENTATIONS_UPDATE": "1"}
    return subprocess.Popen(argv, cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def started(process: subprocess.Popen, ready: Any) -> bool:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def jsonl_lines(out: Path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in out.glob(".det.*.tmp.jsonl"))


def summary_frames(stdout: str) -> int | None:
    line = next((line for line in stdout.splitlines() if line.startswith("frames ")), None)
    return int(line.split()[1].rstrip(":")) if line else None  # "frames N: pass ..."


def sigterm_run(source: Path, checkpoint: Path, out: Path, kind: str, rng: random.Random) -> dict[str, Any]:
    process = start(source, checkpoint, out)
    first = (lambda: jsonl_lines(out) >= 1) if kind == "video" else (lambda: any((out / "annotated").glob("*.png")))
    if not started(process, first):
        process.kill()
        return {"good": False, "why": "did not start inspecting"}
    time.sleep(rng.uniform(0.5, 4.0))
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=WAIT_S)
    frames = summary_frames(stdout)
    left = [p.name for p in out.rglob(".*") if p.is_file()]
    if kind == "folder":
        written = {p.name for p in (out / "annotated").glob("*.png")}
        named = {r["file_name"] for r in json.loads((out / "det.json").read_text())} if (out / "det.json").exists() else set()
        counts = {"summary": frames, "images": len(written), "json_files": len(named)}
        consistent = written == named and len(written) == frames
    else:
        lines = (out / "det.jsonl").read_text().splitlines() if (out / "det.jsonl").exists() else []
        capture = cv2.VideoCapture(str(out / "annotated" / "line.mp4"))
        mp4 = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
        capture.release()
        counts = {"summary": frames, "jsonl": len(lines), "mp4": mp4}
        consistent = len(lines) == mp4 == frames
    good = process.returncode == 143 and consistent and not left and "Traceback" not in stderr
    return {"good": good, "exit": process.returncode, **counts, "left": left}


def kill9_run(video: Path, checkpoint: Path, out: Path, rng: random.Random) -> dict[str, Any]:
    process = start(video, checkpoint, out)
    if not started(process, lambda: jsonl_lines(out) >= 1):
        process.kill()
        return {"good": False, "why": "did not start inspecting"}
    time.sleep(rng.uniform(0.5, 4.0))
    seen = jsonl_lines(out)
    process.kill()
    process.communicate(timeout=WAIT_S)
    again = start(video, checkpoint, out)  # the next run finds and recovers the leftover
    started(again, lambda: any(out.glob("det.recovered-*.jsonl")))
    again.send_signal(signal.SIGTERM)
    again.communicate(timeout=WAIT_S)
    recovered = sorted(out.glob("det.recovered-*.jsonl"))
    if len(recovered) != 1:
        return {"good": False, "why": f"{len(recovered)} recovered files", "seen": seen}
    try:
        frames = [json.loads(line)["frame"] for line in recovered[0].read_text().splitlines()]
    except ValueError:
        return {"good": False, "why": "a recovered line does not parse", "seen": seen}
    good = frames == list(range(len(frames))) and len(frames) >= seen
    return {"good": good, "seen_before_kill": seen, "recovered": len(frames)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_stop", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per case")
    parser.add_argument("--frames", type=int, default=500, help="frames of the folder and the video")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the results as JSON here")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    results: dict[str, list[dict[str, Any]]] = {"sigterm_folder": [], "sigterm_video": [], "kill9_video": []}
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint, images, video = make_inputs(Path(tmp), args.frames)
        for i in range(args.runs):
            for case, run in (
                ("sigterm_folder", lambda out: sigterm_run(images, checkpoint, out, "folder", rng)),
                ("sigterm_video", lambda out: sigterm_run(video, checkpoint, out, "video", rng)),
                ("kill9_video", lambda out: kill9_run(video, checkpoint, out, rng)),
            ):
                out = Path(tmp) / f"{case}_{i}"
                out.mkdir()
                results[case].append(run(out))
                print(case, i, results[case][-1], flush=True)
    for case, runs in results.items():
        print(f"{case}: {sum(r['good'] for r in runs)} of {len(runs)} good")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
