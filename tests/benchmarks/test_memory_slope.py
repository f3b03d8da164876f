"""benchmarks/memory_slope.py on a few hundred frames: it inspects them all, writes the outputs and fits a slope (nothing
is asserted about its value here: a short run is all warm-up)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.memory_slope import measure, slope_kb_per_frame

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize(("outputs", "golden", "frames"), [("json", False, 300), ("report", False, 300), ("json", True, 40)])
def test_memory_slope_inspects_every_frame_and_fits_a_slope(tmp_path: Path, outputs: str, golden: bool, frames: int) -> None:
    result = measure(frames, outputs, golden, tmp_path)
    assert result["frames"] == frames and math.isfinite(result["slope_kb_per_frame"])
    assert result["samples"][-1][0] == frames and len(result["samples"]) >= 2
    if outputs == "json":
        assert len(json.loads((tmp_path / "det.json").read_text())) == frames
    else:
        assert len((tmp_path / "report.csv").read_text().splitlines()) == frames + 1
    if golden:  # a golden file of its own per frame: every frame inspected against its own
        assert result["verdicts"]["not_inspected"] == 0


def test_the_slope_is_fitted_over_the_second_half() -> None:
    frames = np.arange(0, 1001, 100, dtype=np.float64)
    rss = np.where(frames < 500, 1000 + 2 * frames, 2000 + 0.01 * frames)  # warm-up, then 0.01 KB a frame
    assert slope_kb_per_frame(np.stack([frames, rss], axis=1)) == pytest.approx(0.01)
