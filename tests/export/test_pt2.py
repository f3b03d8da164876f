""".pt2 export (torch.export + AOTInductor): parity with eager, dynamic batch, meta.json inside, the runtime and CLI.

The package is compiled once per session (``small_pt2`` in conftest.py); every test here reads it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from pipeline_helpers import detect
from small_checkpoint import assert_apart

from defect_detector.cli import export as cli_export
from defect_detector.cli.errors import CliError
from defect_detector.cli.main import main
from defect_detector.data.synth import generate_board
from defect_detector.export import GOLDEN_CHECK, PT2_TOLERANCE, parity_inputs, reference_outputs
from defect_detector.export.pt2 import is_pt2_package, load_pt2, read_pt2_meta
from defect_detector.inspect.artifacts import artifact_kind
from defect_detector.inspect.runtime import Runtime
from defect_detector.model.checkpoint import load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


def test_pt2_export_matches_eager_within_1e4(small_pt2: dict) -> None:
    report = small_pt2["report"]
    exported = report["parity_exported"]  # against the eager deploy model that torch.export captured
    assert exported["boxes"] <= PT2_TOLERANCE and exported["scores"] <= PT2_TOLERANCE and exported["stats"] <= PT2_TOLERANCE
    assert report["parity"]["boxes"] <= PT2_TOLERANCE and report["parity"]["scores"] <= PT2_TOLERANCE  # and the unfused model
    assert report["parity"]["stats"] <= 1e-4 and report["parity_images"] == 2
    meta = report["meta"]
    assert meta["aoti_device"] == "cpu" and meta["cpu_only"] is True and meta["golden_check"] is None
    exposure = {"min_light": 0.6, "min_contrast": 0.6, "max_clipped": 0.2, "max_highlights": None, "max_midtones": None}
    assert meta["operating_point"] == {"conf": 0.25, "iou": 0.5, "cross_class_iou": None, "cross_class_factor": 0.25, "merge_ios": None}
    assert meta["limits"]["exposure"] == exposure and meta["limits"]["hidden_max_area"] == 0.005  # the limits, once
    assert meta["baseline"]["layer_names"] == meta["layers"]


def test_pt2_batch_is_dynamic_and_stats_survive_export(small_pt2: dict) -> None:
    loaded = load_checkpoint(small_pt2["checkpoint"])
    meta = small_pt2["report"]["meta"]
    model, text = load_pt2(small_pt2["path"])
    assert json.loads(text) == meta
    rng = np.random.default_rng(3)
    boards = [generate_board(240, 320, rng)[0] for _ in range(3)]
    x = parity_inputs(meta["imgsz"], boards)  # 3 frames: the export traced 2 and checked 2 and 1
    want = reference_outputs(loaded, meta["imgsz"], meta["layers"], x)
    with torch.no_grad():
        got = model(x)
    assert got[0].shape == want[0].shape and got[1].shape == (3, len(meta["layers"]), 2) and len(meta["layers"]) > 0
    assert float((got[0][..., :4] - want[0][..., :4]).abs().max()) <= PT2_TOLERANCE  # boxes, px
    assert float((got[0][..., 4:] - want[0][..., 4:]).abs().max()) <= PT2_TOLERANCE  # scores
    assert torch.allclose(got[1], want[1], atol=1e-4)  # the hooks' statistics are in the exported graph


def test_pt2_package_is_recognised_without_loading(small_pt2: dict, tmp_path: Path) -> None:
    meta, aoti = read_pt2_meta(small_pt2["path"])
    assert meta == small_pt2["report"]["meta"] and aoti["AOTI_DEVICE_KEY"] == "cpu"
    assert is_pt2_package(small_pt2["path"]) and not is_pt2_package(small_pt2["checkpoint"])
    assert artifact_kind(small_pt2["path"]) == "pt2" and artifact_kind(small_pt2["checkpoint"]) == "checkpoint"
    broken = tmp_path / "broken.pt2"
    broken.write_bytes(b"not a zip")
    assert artifact_kind(broken) == "checkpoint" and read_pt2_meta(broken) == ({}, {})
    with pytest.raises(ValueError, match="broken.pt2"):
        Runtime.load(broken)  # one line naming the file (load_checkpoint's refusal)


def test_runtime_runs_the_pt2_like_the_checkpoint(small_pt2: dict) -> None:
    runtime = Runtime.load(small_pt2["path"], device="cpu")
    assert runtime.kind == "pt2" and runtime.imgsz == 320 and runtime.meta["baseline"] is not None
    eager = Runtime.load(small_pt2["checkpoint"], device="cpu", trace=False)
    board = generate_board(480, 640, np.random.default_rng(5))[0]
    got, want = detect(runtime, [board])[0], detect(eager, [board])[0]
    assert len(got) == len(want) > 0
    assert_apart(want.scores)  # so the calls' order is the model's, the same in both runtimes
    assert got.labels.tolist() == want.labels.tolist()
    torch.testing.assert_close(got.boxes, want.boxes, atol=1e-3, rtol=0)
    torch.testing.assert_close(got.scores, want.scores, atol=1e-4, rtol=0)
    torch.testing.assert_close(got.stats, want.stats, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="compiled for the CPU"):  # an explicit CUDA request is refused before loading
        Runtime._load_artifact(small_pt2["path"], "pt2", torch.device("cuda"), "auto", explicit_device=True)
    assert Runtime._load_artifact(small_pt2["path"], "pt2", torch.device("cuda"), "auto", explicit_device=False).device.type == "cpu"
    with pytest.raises(ValueError, match="float32"):
        Runtime.load(small_pt2["path"], device="cpu", half=True)


def test_predict_and_val_take_a_pt2(small_pt2: dict, synth_coco: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`predict` and `val` given the .pt2 call and score what they do given its checkpoint."""
    board = generate_board(480, 640, np.random.default_rng(5))[0]
    assert cv2.imwrite(str(tmp_path / "board.png"), board)
    records = {}
    for kind in ("path", "checkpoint"):
        out = tmp_path / f"{kind}.json"
        args = ["predict", str(tmp_path / "board.png"), "--weights", str(small_pt2[kind]), "--save-json", str(out), "--threads", "1"]
        assert main(args) == 0
        records[kind] = json.loads(out.read_text())
        printed = capsys.readouterr()
        assert ("(pt2, cpu" in printed.out) == (kind == "path") and "FutureWarning" not in printed.err
    (got,), (want,) = records["path"], records["checkpoint"]
    assert got["file_name"] == "board.png" and got["verdict"] == want["verdict"] == "fail"
    assert len(got["calls"]) == len(want["calls"]) > 0  # the small model's calls are far from ties: the same, in order
    for ours, theirs in zip(got["calls"], want["calls"]):
        assert ours["category_name"] == theirs["category_name"] and ours["score"] == pytest.approx(theirs["score"], abs=1e-4)
        assert ours["bbox"] == pytest.approx(theirs["bbox"], abs=1e-2)
    metrics = {}
    for kind in ("path", "checkpoint"):
        out = tmp_path / f"{kind}_val.json"
        assert main(["val", "--weights", str(small_pt2[kind]), "--data", str(synth_coco), "--threads", "1", "--out", str(out)]) == 0
        metrics[kind] = json.loads(out.read_text())
    assert (metrics["path"]["kind"], metrics["checkpoint"]["kind"]) == ("pt2", "checkpoint")
    assert metrics["path"]["images"] == metrics["checkpoint"]["images"] == 4 and metrics["path"]["imgsz"] == 320
    assert metrics["path"]["at_conf"] == metrics["checkpoint"]["at_conf"] and metrics["path"]["at_conf"]["defects"] > 0


def _args(**given: object) -> argparse.Namespace:
    base = {"format": None, "out": None, "half": False, "portable": False, "triton": None, "int8": False, "data": None}
    base["accept_loss"] = False
    return argparse.Namespace(**{**base, **given})


def test_export_format_defaults_to_pt2_where_it_can_be_built(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("defect_detector.export.pt2.pt2_unavailable_reason", lambda: None)
    assert cli_export.choose_format(_args()) == "pt2"
    assert cli_export.choose_format(_args(out="m.torchscript.pt")) == "torchscript"  # the --out suffix names it
    assert cli_export.choose_format(_args(out="m.onnx")) == "onnx"
    assert cli_export.choose_format(_args(half=True)) == "torchscript"  # Jetson: float16 TorchScript
    assert cli_export.choose_format(_args(triton="repo")) == "torchscript"
    assert cli_export.choose_format(_args(int8=True, data="train.json")) == "onnx"
    monkeypatch.setattr("defect_detector.export.pt2.pt2_unavailable_reason", lambda: "torch 2.5 is older than 2.6")
    assert cli_export.choose_format(_args()) == "torchscript"  # older torch (JetPack): TorchScript, said on stdout
    assert "torch 2.5" in capsys.readouterr().out
    for bad in (_args(int8=True), _args(int8=True, data="t.json", format="pt2"), _args(data="t.json"), _args(format="pt2", half=True)):
        with pytest.raises(CliError):
            cli_export.choose_format(bad)


def test_golden_check_is_in_a_reference_models_meta() -> None:
    from defect_detector.core.constants import DEEPPCB_CLASSES
    from defect_detector.export import build_meta

    assert build_meta(DEEPPCB_CLASSES, 64, (8, 16, 32), (), channels=2)["golden_check"] == GOLDEN_CHECK
    assert build_meta(DEEPPCB_CLASSES, 64, (8, 16, 32), (), channels=1)["golden_check"] is None


def test_box_tolerance_is_float32_resolution_where_it_is_coarser() -> None:
    """A box coordinate near 640 px is stored to 6.1e-5 px: the tolerance allows 4 ulps there, 1e-4 on small inputs."""
    from defect_detector.export.pt2 import PT2_BOX_ULPS, box_tolerance

    assert box_tolerance(64) == PT2_TOLERANCE
    assert box_tolerance(640) == PT2_BOX_ULPS * 2.0**-14  # float32 spacing in [512, 1024)
    assert PT2_TOLERANCE < box_tolerance(640) < 3e-4


def _edited_pt2(src: Path, out: Path, only: str | None = None, resign: bool = False, **changes: object) -> Path:
    """A copy of the ``.pt2`` ``src`` whose meta.json has ``changes``, in every AOTInductor metadata copy (or only in
    the member ending ``only``); ``resign``: with a digest recomputed, as a forger who knows the recipe would."""
    import zipfile

    from defect_detector.export.digest import is_aoti_metadata
    from defect_detector.export.pt2 import sign_pt2

    with zipfile.ZipFile(src) as archive, zipfile.ZipFile(out, "w") as target:
        for info in archive.infolist():
            data = archive.read(info)
            if is_aoti_metadata(info.filename) and (only is None or info.filename.endswith(only)):
                aoti = json.loads(data)
                aoti["meta.json"] = json.dumps({**json.loads(aoti["meta.json"]), **changes})
                data = json.dumps(aoti).encode()
            target.writestr(info, data)
    if resign:
        meta = {**read_pt2_meta(src)[0], **changes}
        out.write_bytes(sign_pt2(out.read_bytes(), meta)[0])
    return out


PT2_FORGED = [
    ({"class_names": ["short", "open", "mousebite", "spur", "copper", "pin-hole"]}, "does not match the model it is packed with (digest "),
    ({"operating_point": {"conf": 0.95, "iou": 0.5, "cross_class_iou": None, "cross_class_factor": 0.25}}, "does not match the model"),
    ({"pixel_scale": 4.0}, "does not match the model it is packed with"),
    ({"imgsz": 256}, "does not match the model it is packed with"),
    ({"digest": None}, "carries no digest of the graph and weights"),
]


@pytest.mark.parametrize(("changes", "problem"), PT2_FORGED, ids=[next(iter(c)) for c, _ in PT2_FORGED])
def test_an_edited_pt2_meta_is_refused_in_one_line(small_pt2: dict, tmp_path: Path, changes: dict, problem: str) -> None:
    forged = _edited_pt2(small_pt2["path"], tmp_path / "forged.pt2", **changes)
    with pytest.raises(ValueError, match=r"forged.pt2: ") as info:
        Runtime.load(forged, device="cpu")
    assert problem in str(info.value) and "\n" not in str(info.value)


def test_pt2_metadata_copies_that_differ_are_refused(small_pt2: dict, tmp_path: Path) -> None:
    forged = _edited_pt2(small_pt2["path"], tmp_path / "forged.pt2", only="kernel_metadata.json", pixel_scale=4.0)
    with pytest.raises(ValueError, match="forged.pt2: the package's metadata copies hold different meta.json texts"):
        Runtime.load(forged, device="cpu")


def test_a_pt2_input_size_is_checked_before_the_model_runs_never_a_segfault(small_pt2: dict, tmp_path: Path) -> None:
    import subprocess
    import sys

    forged = _edited_pt2(small_pt2["path"], tmp_path / "forged.pt2", resign=True, imgsz=256)  # a digest that matches the edit
    with pytest.raises(ValueError, match=r"forged.pt2: meta.json describes input \[B, 1, 256, 256\], but the package was compiled for"):
        Runtime.load(forged, device="cpu")
    assert cv2.imwrite(str(tmp_path / "board.png"), generate_board(240, 320, np.random.default_rng(5))[0])
    cmd = [sys.executable, "-m", "defect_detector.cli.main", "predict", str(tmp_path / "board.png"), "--weights", str(forged)]
    done = subprocess.run([*cmd, "--threads", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])  # was 139 (double free or corruption)
    assert "meta.json describes input [B, 1, 256, 256]" in done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("kind", ["pt2", "torchscript"])
def test_a_truncated_artifact_says_so(small_pt2: dict, tmp_path: Path, kind: str) -> None:
    if kind == "pt2":
        source = small_pt2["path"]
    else:
        from defect_detector.export import export_torchscript

        source = tmp_path / "small.torchscript.pt"
        export_torchscript(load_checkpoint(small_pt2["checkpoint"]), source, optimize=False)
    data = source.read_bytes()
    cut = tmp_path / f"cut.{kind}"
    cut.write_bytes(data[: len(data) * 2 // 3])
    name = ".pt2" if kind == "pt2" else "TorchScript"
    with pytest.raises(ValueError, match=rf"cut.{kind}: truncated or corrupt {name} file \("):
        Runtime.load(cut, device="cpu")


def test_a_pt2_whose_compiled_code_was_replaced_is_refused_before_any_of_it_runs(small_pt2: dict, tmp_path: Path) -> None:
    """Issue 58 item 3: ``Runtime.load`` loaded the package (``dlopen`` of its shared library: its code runs) before it
    checked the digest. A ``.pt2`` whose library was replaced by one that writes a file when loaded is refused in one
    line, and the file is never written."""
    import shutil
    import subprocess
    import zipfile

    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler to build the replacement library")
    marker = tmp_path / "ran.txt"
    source = tmp_path / "evil.c"
    source.write_text(
        "#include <stdio.h>\n"
        "__attribute__((constructor)) static void ran(void) {\n"
        f'  FILE *f = fopen("{marker}", "w");\n'
        '  if (f) { fputs("ran", f); fclose(f); }\n'
        "}\n"
    )
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "evil.so"), str(source)], check=True)
    forged = tmp_path / "forged.pt2"
    with zipfile.ZipFile(small_pt2["path"]) as archive, zipfile.ZipFile(forged, "w") as target:
        libraries = [n for n in archive.namelist() if n.endswith(".so")]
        for info in archive.infolist():
            target.writestr(info, (tmp_path / "evil.so").read_bytes() if info.filename in libraries else archive.read(info))
    assert libraries
    with pytest.raises(ValueError, match=r"forged.pt2: meta.json does not match the model it is packed with") as info:
        Runtime.load(forged, device="cpu")
    assert "\n" not in str(info.value)
    assert not marker.exists()  # nothing of the package ran
