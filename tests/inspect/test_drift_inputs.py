"""The golden image's drift statistics (inspect/drift_inputs.py): in the golden view they come from the golden pass that
computes its cached features (no extra model call), and equal what pairing the golden image with itself reports,
letterboxed and tiled; the frame view pairs it with itself once per design."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from defect_detector.core.frame import Frame
from defect_detector.data.images import load_image_gray
from defect_detector.inspect.designs import Designs
from defect_detector.inspect.drift_inputs import golden_of
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.prepare import Prepare
from defect_detector.inspect.runtime import Runtime
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


@pytest.fixture(scope="module")
def runtime() -> Runtime:
    return Runtime.load(DEFAULT_REFERENCE_WEIGHTS, device="cpu")


def _records(pipeline: Pipeline, names: list[str]) -> list:
    prepare = Prepare(pipeline, Designs(None))
    records = []
    for i, name in enumerate(names):
        board, golden = load_image_gray(SAMPLES / "deeppcb" / name), load_image_gray(SAMPLES / "golden" / name)
        records.append(prepare(Frame(i, board, "test", name, 0.0), golden))
        assert not records[-1].refused, records[-1].refusal
    return records


def _counted(pipeline: Pipeline) -> list[int]:
    calls: list[int] = []
    detect = pipeline.detect
    pipeline.detect = lambda *a, **k: calls.append(len(a[0])) or detect(*a, **k)
    return calls


@pytest.mark.parametrize("tile", [False, True])
def test_the_golden_view_reads_the_golden_statistics_from_its_golden_pass(runtime: Runtime, tile: bool) -> None:
    names = sorted(p.name for p in (SAMPLES / "deeppcb").glob("*.jpg"))[:2]
    pipeline = Pipeline(runtime, golden_view=True, tile=tile)
    records = _records(pipeline, names)
    assert all(r.view is not None for r in records) and (records[0].plan is not None) == tile
    calls = _counted(pipeline)
    goldens = golden_of(pipeline, records)
    assert calls == []  # no model call for the golden images' statistics
    for record, golden in zip(records, goldens):
        image = record.design.image
        itself = Pipeline(runtime, golden_view=True, tile=tile).detect([image], [image], [record.plan])[0].stats
        assert golden.stats.shape == (len(runtime.layer_names), 2) and golden.key == record.design.key
        torch.testing.assert_close(torch.from_numpy(golden.stats).float(), itself, atol=1e-4, rtol=1e-4)
    assert golden_of(pipeline, records)[0].stats is goldens[0].stats  # kept on the design


def test_the_frame_view_pairs_each_new_golden_image_with_itself_once(runtime: Runtime) -> None:
    names = sorted(p.name for p in (SAMPLES / "deeppcb").glob("*.jpg"))[:2]
    pipeline = Pipeline(runtime, golden_view=False)
    records = _records(pipeline, names)
    calls = _counted(pipeline)
    goldens = golden_of(pipeline, records)
    assert calls == [2] and all(g.stats.shape == (len(runtime.layer_names), 2) for g in goldens)
    golden_of(pipeline, records)
    assert calls == [2]
