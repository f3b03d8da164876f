"""Smoke test of benchmarks/bench_frame_cost.py on a small siamese model and the bundled sample boards."""

from pathlib import Path

import numpy as np
import pytest
from small_checkpoint import write_small_checkpoint

from benchmarks.bench_frame_cost import frame_candidates, load_pairs, run
from benchmarks.photo_frames import photo_pairs, yolo_tiled
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.runtime import Runtime


def test_every_frame_candidate_is_timed(tmp_path: Path, one_thread: None) -> None:
    siamese = write_small_checkpoint(tmp_path / "siamese.pt", 64, in_channels=2, model={"fusion": "siamese"})
    result = run(str(siamese), None, boards=2, threads=1, iters=2)
    assert result["caches_golden"] and result["boards"] == 2
    expected = {"line_golden_view", "line_frame_view", "new_golden_golden_view", "new_golden_frame_view", "model_infer", "model_cached"}
    assert expected <= set(result["timings"])
    assert all(row["n"] == 2 and row["median_ms"] > 0 for name, row in result["timings"].items() if name in expected)


def test_a_new_golden_image_costs_its_golden_pass_every_frame(tmp_path: Path, one_thread: None, monkeypatch: pytest.MonkeyPatch) -> None:
    siamese = write_small_checkpoint(tmp_path / "siamese.pt", 64, in_channels=2, model={"fusion": "siamese"})
    runtime = Runtime.load(siamese, device="cpu")
    passes: list[int] = []
    golden_pass = Pipeline.golden_pass
    monkeypatch.setattr(Pipeline, "golden_pass", lambda self, *a: passes.append(1) or golden_pass(self, *a))
    candidates = frame_candidates(runtime, load_pairs(None, 2, runtime.class_names), frame_views=False)
    for _ in range(4):  # the two boards twice: a design met again is still timed as new
        candidates["new_golden_golden_view"]()
    assert len(passes) == 4
    passes.clear()
    for _ in range(4):
        candidates["line_golden_view"]()
    assert len(passes) <= 1  # the line's one design: its features kept


def test_photograph_frames_are_timed_at_their_working_scale(tmp_path: Path, one_thread: None) -> None:
    siamese = write_small_checkpoint(tmp_path / "siamese.pt", 64, in_channels=2, model={"fusion": "siamese"})
    result = run(str(siamese), None, boards=2, threads=1, iters=1, photo_scale=1.5)
    assert result["frame_px"] == [960, 960] and result["megapixels"] == 0.92 and result["photo_scale"] == 1.5
    assert {"line_golden_view", "new_golden_golden_view"} <= set(result["timings"]) and "line_frame_view" not in result["timings"]
    assert result["ms_per_megapixel"]["line_golden_view"] > 0 and result["model_inputs"] >= 1


def test_photo_pairs_render_enlarged_pairs_and_yolo_tiles_cover_the_frame() -> None:
    board = np.full((64, 80), 255, np.uint8)
    board[20:40, 10:70] = 0
    golden = board.copy()
    board[25:30, 30:35] = 255  # a defect
    name, photo, photo_golden = photo_pairs([("b.png", board, golden)], scale=2.0)[0]
    assert name == "b.png" and photo.shape == photo_golden.shape == (128, 160) and photo.dtype == np.uint8
    diff = np.abs(photo.astype(np.int16) - photo_golden.astype(np.int16))
    assert diff[52:58, 62:68].mean() > 4 * diff[:, :40].mean()  # the pair differs where the layouts do: the defect
    with pytest.raises(ValueError, match="--photo-scale must be within 1-8"):
        photo_pairs([("b.png", board, golden)], scale=0.5)
    seen: list[tuple[int, ...]] = []
    call, tiles = yolo_tiled(lambda x: seen.append(tuple(x.shape)), np.zeros((1500, 2000), np.uint8), 640)
    call()
    assert tiles == len(seen) == 12 and set(seen) == {(1, 3, 640, 640)}  # 4 x 3 tiles of 640 with >= 96 px overlap
