"""benchmarks/bench_stop.py reads the frame count from predict's summary line, whatever else the line says."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
from small_checkpoint import write_small_checkpoint

from benchmarks.bench_stop import summary_frames
from defect_detector.data.synth import generate_board
from defect_detector.inspect.inspector import Inspector
from defect_detector.inspect.run_summary import summary_line


def test_summary_frames_reads_the_summary_line_predict_prints(tmp_path: Path) -> None:
    checkpoint = write_small_checkpoint(tmp_path / "small.pt", 64)
    boards = tmp_path / "boards"
    boards.mkdir()
    for i in range(2):
        assert cv2.imwrite(str(boards / f"board_{i}.png"), generate_board(96, 128, np.random.default_rng(i))[0])
    with Inspector.load(checkpoint, device="cpu", monitor=False) as inspector:
        summary = inspector.run(str(boards))
    stdout = f"model: small.pt\n{summary_line(summary)}\nwrote json: det.json\n"
    assert summary["frames"] > 0 and summary_frames(stdout) == summary["frames"]
    assert summary_frames("no summary here\n") is None
