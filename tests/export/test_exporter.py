"""One export skeleton, one writer per format (export/exporter.py)."""

from pathlib import Path

import pytest
from small_checkpoint import write_small_checkpoint

from defect_detector.export.exporter import FORMATS, export_model, writer
from defect_detector.model.checkpoint import load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


def test_every_format_has_its_writer_and_an_unknown_one_is_named() -> None:
    assert set(FORMATS) == {"torchscript", "pt2", "onnx", "int8", "triton"}
    assert [writer(fmt).__name__ for fmt in FORMATS] == [f"export_{fmt}" for fmt in FORMATS]
    with pytest.raises(ValueError, match="unknown export format 'tflite': one of torchscript, pt2, onnx, int8, triton"):
        writer("tflite")


def test_a_format_written_through_the_skeleton_reports_what_it_wrote(tmp_path: Path) -> None:
    """The ONNX writer through :func:`export_model`: its companions (the meta file) beside the model, the report's
    common keys from the skeleton and the format's own facts beside them."""
    pytest.importorskip("onnxruntime")
    loaded = load_checkpoint(write_small_checkpoint(tmp_path / "small.pt", 64))
    report = export_model(loaded, "onnx", tmp_path / "small.onnx", imgsz=64)
    assert Path(report["path"]).stat().st_size == report["bytes"] > 0
    assert (tmp_path / "small.meta.json").is_file()
    assert report["meta"]["imgsz"] == 64 and report["baseline_source"] == "none" and report["opset"] >= 17
    assert report["parity"]["pred"] < 1e-3
