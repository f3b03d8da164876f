"""The frame pipeline on large frames: the detection cap per tile, and calibrate measuring what predict measures."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from pipeline_helpers import detect
from small_checkpoint import write_small_checkpoint
from torchvision.ops import box_iou

from defect_detector.data.synth import generate_board
from defect_detector.inspect.inspector import Inspector
from defect_detector.inspect.runtime import Runtime
from defect_detector.jobs.calibrate import run_calibrate

pytestmark = pytest.mark.usefixtures("one_thread")

IMGSZ = 128


@pytest.fixture(scope="module")
def native_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small model that records training at native resolution (``data.pixel_scale`` 1.0), so large frames are tiled."""
    path = write_small_checkpoint(tmp_path_factory.mktemp("native") / "native.pt", IMGSZ, cls_bias=1.0)
    ckpt = torch.load(path, weights_only=True)
    ckpt["config"]["data"]["pixel_scale"] = 1.0
    torch.save(ckpt, path)
    return path


def test_max_det_applies_per_tile_and_cut_calls_are_counted(native_checkpoint: Path, caplog: pytest.LogCaptureFixture) -> None:
    """v0.8 capped a whole tiled frame at max_det (a 2048x1536 panel at conf 0.001 returned exactly 100 boxes). The cut
    calls are counted, never warned about where no --max-det can raise the cap (issue 43: val, train, teach, demo)."""
    runtime = Runtime.load(native_checkpoint, device="cpu")
    frame = generate_board(512, 640, np.random.default_rng(0))[0]
    (whole,) = detect(runtime, [frame], conf=0.001, max_det=1000)
    with caplog.at_level("WARNING", logger="defect_detector"):
        (capped,) = detect(runtime, [frame], conf=0.001, max_det=5)
    assert not caplog.records
    tiles = len(capped.tiles)
    assert tiles > 1 and len(whole) > 5 * tiles  # enough calls for the cap to bite in every tile
    assert 5 < len(capped) <= 5 * tiles and capped.dropped > 0
    assert whole.dropped == 0
    letterboxed = detect(runtime, [frame], conf=0.001, max_det=5, tile=False)[0]
    assert len(letterboxed) == 5 and letterboxed.dropped > 0


def test_calibrate_on_large_frames_measures_what_predict_measures(native_checkpoint: Path, tmp_path: Path) -> None:
    """v0.8 letterboxed a 2048x1536 frame in calibrate while predict tiled it: the statistics were 7.4 apart in the
    detector's units. Now both go through the pipeline: the baseline's mean is the mean of what predict measures."""
    folder = tmp_path / "frames"
    folder.mkdir()
    frames = [generate_board(384, 512, np.random.default_rng(i))[0] for i in range(4)]
    for i, frame in enumerate(frames):
        assert cv2.imwrite(str(folder / f"f{i}.png"), frame)
    baseline = run_calibrate(native_checkpoint, None, folder, tmp_path / "baseline.json", batch=2, progress=False)
    with Inspector.load(native_checkpoint, device="cpu", monitor=False) as inspector:
        results = [inspector.inspect(frame, name=f"f{i}.png") for i, frame in enumerate(frames)]
    assert all(r.detections.tiles is not None for r in results)  # predict tiles these frames
    measured = np.stack([r.detections.stats.double().numpy() for r in results])
    np.testing.assert_allclose(baseline.mean, measured.mean(0), rtol=1e-5, atol=1e-6)
    assert baseline.count == 4 and baseline.faults is not None


def test_tiled_frames_get_the_cross_class_demotion_of_a_single_image(native_checkpoint: Path, tmp_path: Path) -> None:
    """Issue 35: the tile merge applied no cross-class demotion, so one defect on a seam gave calls of several classes.
    With factor 0 every call that overlaps a higher-scored call of another class is dropped, within a tile and across
    tiles alike; without demotion the same tiled frame keeps such pairs (the test would see them)."""
    ckpt = torch.load(native_checkpoint, weights_only=True)
    frame = generate_board(512, 640, np.random.default_rng(0))[0]
    plain = detect(Runtime.load(native_checkpoint, device="cpu"), [frame], conf=0.001, max_det=1000, tile=True)[0]
    ckpt["config"]["eval"].update(cross_class_iou=0.3, cross_class_factor=0.0)
    demoting = tmp_path / "demoting.pt"
    torch.save(ckpt, demoting)
    (tiled,) = detect(Runtime.load(demoting, device="cpu"), [frame], conf=0.001, max_det=1000, tile=True)

    def cross_class_pairs(d) -> int:  # overlapping calls of two classes, one scored above the other (ties demote neither)
        iou = box_iou(d.boxes, d.boxes) > 0.3
        return int((iou & (d.labels[:, None] != d.labels[None, :]) & (d.scores[:, None] > d.scores[None, :])).sum())

    assert len(tiled.tiles) > 1 and cross_class_pairs(plain) > 0 and len(tiled) > 0
    assert cross_class_pairs(tiled) == 0 and len(tiled) < len(plain)


@pytest.mark.parametrize("tile", [False, True])
def test_the_weights_merge_of_nested_calls_leaves_one_call_per_defect_and_counts_the_rest(
    native_checkpoint: Path, tmp_path: Path, tile: bool
) -> None:
    """Issue 42: nested boxes (of any class; their IoU below NMS's) were separate calls. With ``eval.merge_ios`` in the
    weights no two calls of a frame overlap by more than it of the smaller box, whole or tiled, and the calls merged
    are counted: the frame keeps what the plain weights call less what was merged."""
    from defect_detector.model.postprocess import intersection_over_smaller

    frame = generate_board(512, 640, np.random.default_rng(0))[0]
    plain = detect(Runtime.load(native_checkpoint, device="cpu"), [frame], conf=0.001, max_det=1000, tile=tile)[0]
    ckpt = torch.load(native_checkpoint, weights_only=True)
    ckpt["config"]["eval"]["merge_ios"] = 0.5
    merging = tmp_path / "merging.pt"
    torch.save(ckpt, merging)
    (merged,) = detect(Runtime.load(merging, device="cpu"), [frame], conf=0.001, max_det=1000, tile=tile)
    nested = intersection_over_smaller(plain.boxes) > 0.5
    assert int(nested.sum()) > len(plain) and plain.merged == 0  # the plain calls do nest (beyond the diagonal)
    ios = intersection_over_smaller(merged.boxes).fill_diagonal_(0)
    assert float(ios.max()) <= 0.5 and merged.merged > 0
    assert len(merged) + merged.merged == len(plain) + merged.dropped - plain.dropped
