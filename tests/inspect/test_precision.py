"""A checkpoint's precision (``inspect/runtime.py`` ``checkpoint_dtype``, ``--precision``): float32 on the CPU by default,
bfloat16 on request where the CPU has it natively (the same calls on the bundled golden-template model's sample boards),
refused in one line elsewhere, for an artifact, or for an unknown value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.ops import box_iou

from defect_detector.cli.options import PRECISION_CHOICES
from defect_detector.core.devices import cpu_bf16
from defect_detector.data.images import load_image_gray
from defect_detector.export import export_torchscript
from defect_detector.inspect import runtime as runtime_module
from defect_detector.inspect.inspector import Inspector
from defect_detector.inspect.runtime import PRECISIONS, checkpoint_dtype, precision_half
from defect_detector.jobs.validate import validate
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
CPU = torch.device("cpu")


def test_the_default_and_the_explicit_precisions(monkeypatch: pytest.MonkeyPatch) -> None:
    assert checkpoint_dtype(CPU, "auto") == checkpoint_dtype(CPU, False) == torch.float32
    assert checkpoint_dtype(CPU, True) == checkpoint_dtype(torch.device("cuda"), "auto") == torch.float16
    monkeypatch.setattr(runtime_module, "cpu_bf16", lambda: True)
    assert checkpoint_dtype(CPU, "bf16") == torch.bfloat16 and checkpoint_dtype(CPU, "auto") == torch.float32
    with pytest.raises(ValueError, match="bfloat16 needs a CPU with native bfloat16"):
        checkpoint_dtype(torch.device("cuda"), "bf16")
    monkeypatch.setattr(runtime_module, "cpu_bf16", lambda: False)
    with pytest.raises(ValueError, match="bfloat16 needs a CPU with native bfloat16"):
        checkpoint_dtype(CPU, "bf16")
    with pytest.raises(ValueError, match="half must be auto, True, False or 'bf16'"):
        checkpoint_dtype(CPU, "fp8")


def test_the_command_line_offers_the_precisions_the_runtime_knows() -> None:
    assert PRECISION_CHOICES == tuple(PRECISIONS) and precision_half("float32") is False and precision_half("bf16") == "bf16"


def test_bf16_makes_the_calls_float32_makes_where_the_cpu_has_it() -> None:
    names = sorted(p.name for p in (SAMPLES / "deeppcb").glob("*.jpg"))[:3]
    if not cpu_bf16():  # this CPU emulates bfloat16: refused in one line, nothing loaded
        with pytest.raises(ValueError, match="bfloat16 needs a CPU with native bfloat16"):
            Inspector.load(reference=SAMPLES / "golden", device="cpu", threads=1, monitor=False, precision="bf16")
        return
    calls = {}
    for precision in ("float32", "bf16"):
        with Inspector.load(reference=SAMPLES / "golden", device="cpu", threads=1, monitor=False, precision=precision) as inspector:
            assert inspector.runtime.dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
            calls[precision] = [inspector.inspect(load_image_gray(SAMPLES / "deeppcb" / n), name=n).detections for n in names]
    for full, half in zip(calls["float32"], calls["bf16"]):
        assert len(full) == len(half) > 0
        best = box_iou(full.boxes, half.boxes).max(dim=1)
        assert (best.values > 0.9).all() and (full.labels == half.labels[best.indices]).all()
        assert np.allclose(full.scores.numpy(), half.scores[best.indices].numpy(), atol=0.05)


def test_precision_is_refused_in_one_line_where_it_cannot_apply(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="precision must be one of auto, float32, bf16"):
        Inspector.load(reference=SAMPLES / "golden", device="cpu", threads=1, monitor=False, precision="half")
    with pytest.raises(ValueError, match="precision must be one of auto, float32, bf16"):
        validate(DEFAULT_REFERENCE_WEIGHTS, tmp_path / "none.json", precision="int4")
    artifact = tmp_path / "model.torchscript.pt"
    export_torchscript(load_checkpoint(DEFAULT_REFERENCE_WEIGHTS), artifact, optimize=False)
    with pytest.raises(ValueError, match="--precision bf16 runs a checkpoint; this torchscript artifact runs as it was exported"):
        runtime_module.Runtime.load(artifact, device="cpu", half="bf16")
