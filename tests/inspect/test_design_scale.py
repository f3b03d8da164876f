"""The working scale (``inspect/design_scale.py``; issue 44 item 4, issue 46 item 3): a board and its golden image
upscaled 2x are inspected at the scale the weights were validated at, their calls in their own pixels; a 1x sample is
not resized; weights that record no scale inspect as before; a design finer than validated is named in its record."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from torchvision.ops import box_iou

from defect_detector.core.io import atomic_torch_save
from defect_detector.data.images import load_image_gray
from defect_detector.inspect import design_scale
from defect_detector.inspect.inspector import Inspector
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.runtime import Runtime
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, DEFAULT_WEIGHTS, strip_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
NAME = "50600000_test.jpg"


def _pair(factor: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """The sample board 50600000 and its golden image, upscaled ``factor`` times (linear)."""
    board, golden = load_image_gray(SAMPLES / "deeppcb" / NAME), load_image_gray(SAMPLES / "golden" / NAME)
    if factor == 1.0:
        return board, golden
    return tuple(cv2.resize(im, None, fx=factor, fy=factor, interpolation=cv2.INTER_LINEAR) for im in (board, golden))


def _weights(tmp_path: Path, source: Path, scale_range: dict | None) -> Path:
    """``source`` weights with their domain's ``scale_range`` replaced (None: removed, as weights fitted before)."""
    ckpt = torch.load(source, map_location="cpu", weights_only=True)
    domain = {k: v for k, v in ckpt.pop("domain").items() if k != "scale_range"}
    if scale_range is not None:
        domain["scale_range"] = scale_range
    out = tmp_path / "scaled.pt"
    atomic_torch_save(strip_checkpoint(ckpt, domain=domain), out)
    return out


def test_a_2x_board_and_golden_image_are_inspected_at_the_validated_scale_their_calls_at_twice_the_1x_ones() -> None:
    with Inspector.load(DEFAULT_REFERENCE_WEIGHTS, reference=SAMPLES / "golden", device="cpu", threads=1, monitor=False) as inspector:
        one = inspector.inspect(_pair()[0], name="1x", reference=_pair()[1])
        two = inspector.inspect(_pair(2.0)[0], name="2x", reference=_pair(2.0)[1])
        assert inspector.pipeline.plan(2560, 2560, 2.0).tile == 1280  # a larger board: tiles of the validated scale
        assert inspector.pipeline.input_scale(1280, 1280, 2.0) == 0.5
    assert one.working_scale == 1.0 and one.plan is None and one.detections.letterbox.scale == 1.0  # 1x: not resized
    assert two.working_scale == 2.0 and two.plan is None and two.detections.letterbox.scale == 0.5  # not 4 tiles of 640
    assert two.to_json()["working_scale"] == 2.0 and two.design_warning is None
    # every call clear of the operating point (by 0.1) at either scale is a call at the other, within a pixel or two;
    # the registration at 2x is read on other pixels, so a call within 0.1 of it may fall on either side
    sure = float(one.conf) + 0.1
    for a, b, factor in ((two.detections, one.detections, 0.5), (one.detections, two.detections, 2.0)):
        kept = a.scores >= sure
        scaled = a.boxes[kept] * factor
        iou = box_iou(scaled, b.boxes)
        best = iou.argmax(dim=1)
        assert int(kept.sum()) >= 3 and iou.max(dim=1).values.min() > 0.8
        assert [n for n, k in zip(a.names, kept.tolist()) if k] == [b.names[i] for i in best.tolist()]
        assert (scaled - b.boxes[best]).abs().max() < 2.0 * max(factor, 1.0)


def test_weights_that_record_no_scale_tile_a_2x_board_as_before(tmp_path: Path) -> None:
    weights = _weights(tmp_path, DEFAULT_REFERENCE_WEIGHTS, None)
    with Inspector.load(weights, reference=SAMPLES / "golden", device="cpu", threads=1, monitor=False) as inspector:
        assert inspector.prepare.scale_check is None
        two = inspector.inspect(_pair(2.0)[0], name="2x", reference=_pair(2.0)[1])
    assert two.working_scale == 1.0 and two.plan is not None and two.plan.tile == 640 and len(two.plan) == 9


def test_a_design_finer_than_the_weights_were_validated_at_is_named_in_its_records(tmp_path: Path) -> None:
    weights = _weights(tmp_path, DEFAULT_REFERENCE_WEIGHTS, {"detail": 1.0, "fine_width": 24.0, "fitted_on": 2})
    with Inspector.load(weights, reference=SAMPLES / "golden", device="cpu", threads=1, monitor=False) as inspector:
        record = inspector.inspect(_pair()[0], name="fine", reference=_pair()[1])
        clean = inspector.inspect(_pair()[1], name="clean", reference=_pair()[1])  # the golden image itself: no call
    warning = record.design_warning
    assert warning is not None and "narrowest tracks and gaps are 10.0 px, 10.0 px at the model input: 0.42x" in warning
    assert "validated on (24.0 px)" in warning and record.working_scale == 1.0
    assert record.to_json()["design_warning"] == warning
    assert clean.verdict.value == "pass_suspect" and clean.suspect_kind == "finer than validated"  # counted so in the summary
    assert clean.reason == f"finer than validated: no call, but {warning}"
    assert record.to_station(datetime.now(timezone.utc)).design_warning == warning


def test_a_single_image_frame_at_2x_is_read_and_inspected_downscaled_and_a_1x_frame_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[tuple[int, int]] = []
    measure = design_scale.image_scale
    monkeypatch.setattr(design_scale, "image_scale", lambda image: reads.append(image.shape) or measure(image))
    with Inspector.load(DEFAULT_WEIGHTS, device="cpu", threads=1, monitor=False) as inspector:
        one = inspector.inspect(_pair()[0], name="1x")
        assert reads == []  # a frame the model sees at its training scale costs no reading
        two = inspector.inspect(_pair(2.0)[0], name="2x")
    assert reads == [(1280, 1280)]
    assert one.working_scale == 1.0 and two.working_scale == 2.0 and two.plan is None and two.detections.letterbox.scale == 0.5


def test_a_design_no_reading_could_change_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 640 px design fits the model input: no factor changes its plan and no narrowest feature (3 px or more) is
    finer than validated (4 px), so none is read, even one whose detail would read 2x; a 2x board's design is read once."""
    reads: list[tuple[int, int]] = []
    measure = design_scale.image_scale
    monkeypatch.setattr(design_scale, "image_scale", lambda image: reads.append(image.shape) or measure(image))
    board, golden = _pair()
    coarse = [cv2.resize(im[:320, :320], (640, 640), interpolation=cv2.INTER_LINEAR) for im in (board, golden)]
    with Inspector.load(DEFAULT_REFERENCE_WEIGHTS, reference=SAMPLES / "golden", device="cpu", threads=1, monitor=False) as inspector:
        one = inspector.inspect(board, name="1x", reference=golden)
        two = inspector.inspect(coarse[0], name="coarse", reference=coarse[1])
        assert reads == []
        big = [inspector.inspect(_pair(2.0)[0], name=f"2x {i}", reference=_pair(2.0)[1]) for i in range(2)]
    assert reads == [(1280, 1280)] and [r.working_scale for r in big] == [2.0, 2.0]
    assert measure(coarse[1]).detail == 2.0  # what a reading would have said, changing nothing:
    assert one.working_scale == two.working_scale == 1.0 and two.plan is None and two.detections.letterbox.scale == 1.0


@pytest.fixture(scope="module")
def pipeline() -> Pipeline:
    return Pipeline(Runtime.load(DEFAULT_REFERENCE_WEIGHTS, device="cpu"), tile=None, conf=0.05)


@pytest.mark.parametrize("boards", [1, 2])
def test_the_working_scale_maps_calls_back_exactly(pipeline: Pipeline, boards: int) -> None:
    """A 2x pair planned at factor 2: one board is letterboxed whole at scale 0.5, two side by side are tiled in 1280 px
    tiles (the tile gate measured at the tiles' scale too). Its calls are, to float rounding, twice those of the same
    pair shrunk by the letterbox's own resize (an exact 2x2 area mean) and inspected at 1x, score for score."""
    board, golden = _pair(2.0)
    big = [np.hstack([im, np.fliplr(im)][:boards]) for im in (board, golden)]
    small = [cv2.resize(im, (im.shape[1] // 2, im.shape[0] // 2), interpolation=cv2.INTER_AREA) for im in big]
    plans = pipeline.plan(*big[0].shape, 2.0), pipeline.plan(*small[0].shape)
    assert (plans[0] is None) == (boards == 1) and pipeline.input_scale(*big[0].shape, 2.0) == 0.5
    if boards == 2:
        assert plans[0].tile == 1280 and plans[1].tile == 640 and plans[0].xs == tuple(2 * x for x in plans[1].xs)
    at_2x = pipeline.detect([big[0]], [big[1]], [plans[0]])[0]
    at_1x = pipeline.detect([small[0]], [small[1]], [plans[1]])[0]
    assert len(at_2x) == len(at_1x) >= 3 * boards
    assert torch.equal(at_2x.scores, at_1x.scores) and at_2x.names == at_1x.names
    torch.testing.assert_close(at_2x.boxes, at_1x.boxes * 2.0, rtol=0.0, atol=1e-3)
