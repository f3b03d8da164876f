"""Runtime loading of every artifact kind through ``--weights``: ONNX float32 (issue 24: ``predict --weights model.onnx``
failed with an unpickling error) and int8 here; ``.pt2`` in tests/export/test_pt2.py, TorchScript in test_runtime.py.

The int8 test quantizes the bundled model, calibrated on the 15 training boards of ``data/samples/calib`` and scored on
the 8 held-out sample boards (groups 50600 and 92000): ``val`` of int8 against float32 on the same boards."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from pipeline_helpers import detect, preprocess
from small_checkpoint import write_small_checkpoint

from defect_detector.cli.main import main
from defect_detector.data.synth import generate_board
from defect_detector.export import export_onnx, onnx_meta_path
from defect_detector.inspect.artifacts import artifact_kind
from defect_detector.inspect.runtime import Runtime
from defect_detector.jobs.validate import validate
from defect_detector.model.checkpoint import DEFAULT_WEIGHTS, load_checkpoint

pytest.importorskip("onnx", reason="onnx not installed (pip install '.[onnx]')")
pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install '.[onnx]')")

pytestmark = pytest.mark.usefixtures("one_thread")

IMGSZ = 128
SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples" / "deeppcb"
CALIB = SAMPLES.parent / "calib" / "calib.json"
INT8_MAP50_LOSS_MAX = 0.01
"""At most this much mAP@0.5 below float32 on the 8 sample boards (60 defects). Issue 29's target, 0.005, is measured
on the 161 held-out boards (docs/inspection.md: -0.0013 and -0.0002 with 7-bit weights); on 8 boards one defect
ranked a little lower moves mAP@0.5 by about 0.005 (7-bit weights: -0.0056; 8-bit: within 0.005 on a VNNI CPU and
-0.27 without VNNI; the stem convolution kept in float: -0.010, the first two: +0.006), so this proxy bound is
twice the target and still far below the collapse it guards against."""


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("onnx")
    checkpoint = write_small_checkpoint(folder / "small.pt", IMGSZ, seed=2)
    export_onnx(load_checkpoint(checkpoint), folder / "small.onnx")
    return checkpoint, folder / "small.onnx"


def test_runtime_runs_onnx_like_the_checkpoint(onnx_model: tuple[Path, Path]) -> None:
    checkpoint, path = onnx_model
    runtime = Runtime.load(path, device="cpu")
    assert runtime.kind == "onnx" and artifact_kind(path) == "onnx" and runtime.imgsz == IMGSZ and runtime.dtype == torch.float32
    eager = Runtime.load(checkpoint, device="cpu", trace=False)
    boards = [generate_board(96, 160, np.random.default_rng(i))[0] for i in range(3)]
    x = preprocess(runtime, boards)[0]  # [3, 1, S, S]: the batch is dynamic
    (pred, stats), (want_pred, want_stats) = runtime.infer(x), eager.infer(x)
    torch.testing.assert_close(pred[..., :4], want_pred[..., :4], atol=1e-3, rtol=0)  # boxes, px
    torch.testing.assert_close(pred[..., 4:], want_pred[..., 4:], atol=1e-4, rtol=0)  # scores
    torch.testing.assert_close(stats, want_stats, atol=1e-4, rtol=1e-4)
    assert len(detect(runtime, boards[:1])[0]) > 0
    with pytest.raises(ValueError, match="ONNX"):
        Runtime._load_artifact(path, "onnx", torch.device("cuda"), "auto", explicit_device=True)


def test_onnx_meta_from_the_model_else_beside_it(onnx_model: tuple[Path, Path], tmp_path: Path) -> None:
    import onnx

    model = onnx.load(str(onnx_model[1]))
    del model.metadata_props[:]
    bare = tmp_path / "bare.onnx"
    onnx.save(model, str(bare))
    with pytest.raises(ValueError, match=r"bare.onnx: ONNX model without meta.json"):
        Runtime.load(bare)
    onnx_meta_path(bare).write_text(onnx_meta_path(onnx_model[1]).read_text())
    assert Runtime.load(bare).meta == Runtime.load(onnx_model[1]).meta  # the sidecar written by export
    (tmp_path / "junk.onnx").write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match="junk.onnx: not a loadable ONNX model"):
        Runtime.load(tmp_path / "junk.onnx")


def test_predict_takes_an_onnx_model(onnx_model: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import cv2

    assert cv2.imwrite(str(tmp_path / "board.png"), generate_board(96, 160, np.random.default_rng(4))[0])
    out = tmp_path / "pred.json"
    assert main(["predict", str(tmp_path / "board.png"), "--weights", str(onnx_model[1]), "--save-json", str(out), "--threads", "1"]) == 0
    assert "(onnx, cpu" in capsys.readouterr().out and isinstance(json.loads(out.read_text()), list)


def test_int8_export_keeps_map_within_the_bound(tmp_path: Path) -> None:
    held_out = SAMPLES / "annotations.json"
    out = tmp_path / "deeppcb.int8.onnx"
    assert main(["export", "--int8", "--data", str(CALIB), "--out", str(out)]) == 0
    meta = json.loads(onnx_meta_path(out).read_text())
    assert meta["int8"]["calibration"] == {"data": str(CALIB), "frames": 15, "held_back": 0} and meta["int8"]["target"] == "cpu"
    float_baseline = load_checkpoint(DEFAULT_WEIGHTS).baseline
    assert meta["baseline"]["layer_names"] == float_baseline["layer_names"] and meta["baseline"] != float_baseline
    assert meta["int8"]["baseline"].startswith("calibrated through the int8 model")  # drift reads int8 statistics against int8
    runtime = Runtime.load(out, device="cpu")
    assert runtime.kind == "onnx" and runtime.meta == meta
    float32 = validate(DEFAULT_WEIGHTS, held_out, progress=False).metrics
    int8 = validate(out, held_out, progress=False).metrics
    assert float32["map50"] > 0.5  # the boards are scored at all
    assert int8["map50"] >= float32["map50"] - INT8_MAP50_LOSS_MAX, (int8["map50"], float32["map50"])


def test_int8_for_tensorrt_is_symmetric_and_runs(onnx_model: tuple[Path, Path], tmp_path: Path) -> None:
    import onnx
    from onnx import numpy_helper

    from defect_detector.data.synth import write_synthetic_dataset
    from defect_detector.export import export_int8

    calib = write_synthetic_dataset(tmp_path / "calib", n_images=4, height=IMGSZ, width=IMGSZ, seed=1)
    out = tmp_path / "small.int8.trt.onnx"
    report = export_int8(load_checkpoint(onnx_model[0]), out, calib, target="tensorrt")
    assert report["meta"]["int8"]["target"] == "tensorrt" and report["calibration_frames"] == 4
    model = onnx.load(str(out))
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    zero_points = [
        weights[n.input[2]] for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 2
    ]
    assert zero_points and all(z.dtype == np.int8 and not z.any() for z in zero_points)  # TensorRT takes symmetric int8 only
    runtime = Runtime.load(out, device="cpu")
    pred, stats = runtime.infer(torch.rand(1, 1, IMGSZ, IMGSZ))
    assert pred.shape[-1] == 10 and stats.shape == (1, len(runtime.layer_names), 2) and torch.isfinite(stats).all()


def _edited_onnx(src: Path, out: Path, sidecar: str = "copy", **changes: object) -> Path:
    """A copy of the ONNX model ``src`` whose embedded meta.json has ``changes``; its sidecar copied (``copy``), edited
    alike (``edit``) or left out (``none``)."""
    import onnx

    model = onnx.load(str(src))
    entry = next(e for e in model.metadata_props if e.key == "meta.json")
    meta = {**json.loads(entry.value), **changes}
    entry.value = json.dumps(meta)
    onnx.save(model, str(out))
    if sidecar != "none":
        text = json.dumps(meta) if sidecar == "edit" else onnx_meta_path(src).read_text()
        onnx_meta_path(out).write_text(text)
    return out


@pytest.mark.parametrize(
    "changes",
    [
        {"class_names": ["short", "open", "mousebite", "spur", "copper", "pin-hole"]},  # every call relabelled
        {"operating_point": {"conf": 0.95, "iou": 0.5, "cross_class_iou": None, "cross_class_factor": 0.25}},  # every board passes
        {"pixel_scale": 4.0},  # a frame tiled into many
        {"digest": None},
    ],
    ids=["class_names", "operating_point", "pixel_scale", "no_digest"],
)
def test_an_edited_onnx_meta_is_refused_in_one_line(onnx_model: tuple[Path, Path], tmp_path: Path, changes: dict, capsys) -> None:
    forged = _edited_onnx(onnx_model[1], tmp_path / "forged.onnx", sidecar="edit", **changes)
    problem = "carries no digest" if "digest" in changes else "meta.json does not match the model it is packed with (digest "
    with pytest.raises(ValueError, match=r"forged.onnx: ") as info:
        Runtime.load(forged, device="cpu")
    assert problem in str(info.value) and "\n" not in str(info.value)
    assert cv2_board(tmp_path) and main(["predict", str(tmp_path / "board.png"), "--weights", str(forged), "--threads", "1"]) == 2
    assert problem in capsys.readouterr().err


def cv2_board(folder: Path) -> bool:
    import cv2

    return bool(cv2.imwrite(str(folder / "board.png"), generate_board(96, 160, np.random.default_rng(4))[0]))


def test_an_onnx_sidecar_that_differs_from_the_embedded_meta_is_refused(onnx_model: tuple[Path, Path], tmp_path: Path) -> None:
    copy = tmp_path / "copy.onnx"
    copy.write_bytes(onnx_model[1].read_bytes())
    onnx_meta_path(copy).write_text(onnx_meta_path(onnx_model[1]).read_text())
    assert Runtime.load(copy, device="cpu").kind == "onnx"  # the sidecar export wrote equals the embedded meta
    sidecar = json.loads(onnx_meta_path(copy).read_text())
    onnx_meta_path(copy).write_text(json.dumps({**sidecar, "pixel_scale": 4.0}))
    with pytest.raises(ValueError, match=r"copy.onnx: copy.meta.json beside it differs from the meta.json embedded in the model \(keys p"):
        Runtime.load(copy, device="cpu")
    onnx_meta_path(copy).write_text("{oops")
    with pytest.raises(ValueError, match=r"differs from the meta.json embedded in the model \(not the same JSON\)"):
        Runtime.load(copy, device="cpu")


def test_a_sidecar_alone_is_checked_against_the_model(onnx_model: tuple[Path, Path], tmp_path: Path) -> None:
    import onnx

    model = onnx.load(str(onnx_model[1]))
    del model.metadata_props[:]
    bare = tmp_path / "bare.onnx"
    onnx.save(model, str(bare))
    sidecar = json.loads(onnx_meta_path(onnx_model[1]).read_text())
    onnx_meta_path(bare).write_text(json.dumps({**sidecar, "class_names": list(reversed(sidecar["class_names"]))}))
    with pytest.raises(ValueError, match="bare.onnx: meta.json does not match the model it is packed with"):
        Runtime.load(bare, device="cpu")


def test_a_truncated_onnx_file_is_one_line(onnx_model: tuple[Path, Path], tmp_path: Path) -> None:
    data = onnx_model[1].read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut.onnx: ") as info:
        Runtime.load(cut, device="cpu")
    assert "\n" not in str(info.value)


def test_the_int8_digest_covers_the_recalibrated_baseline(onnx_model: tuple[Path, Path], tmp_path: Path) -> None:
    from defect_detector.data.synth import write_synthetic_dataset
    from defect_detector.export import DeployModel, export_int8
    from defect_detector.export.int8 import embed_baseline
    from defect_detector.monitor.baseline import calibrate

    calib = write_synthetic_dataset(tmp_path / "calib", n_images=2, height=IMGSZ, width=IMGSZ, seed=1)
    out = tmp_path / "small.int8.onnx"
    loaded = load_checkpoint(onnx_model[0])
    layers = list(DeployModel(loaded.model, IMGSZ).layer_names)
    stats = np.abs(np.random.default_rng(0).normal(1.0, 0.1, (32, len(layers), 2)))
    meta = export_int8(loaded, out, calib, baseline=calibrate(stats, layers, IMGSZ, source="float").to_dict())["meta"]
    assert Runtime.load(out, device="cpu").meta == meta == json.loads(onnx_meta_path(out).read_text())
    baseline = dict(meta["baseline"], source="recalibrated")
    new = embed_baseline(out, baseline, "calibrated through the int8 model")
    assert new["digest"] != meta["digest"] and Runtime.load(out, device="cpu").meta == new  # signed again over the final meta
    forged = _edited_onnx(out, tmp_path / "forged.int8.onnx", sidecar="edit", baseline=meta["baseline"])
    with pytest.raises(ValueError, match="forged.int8.onnx: meta.json does not match the model it is packed with"):
        Runtime.load(forged, device="cpu")
