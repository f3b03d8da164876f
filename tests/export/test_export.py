"""TorchScript / ONNX / Triton export: fresh-process loading, parity, meta.json, dynamic batch."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from small_checkpoint import write_small_checkpoint
from test_export_baseline import make_baseline
from torch import nn

from defect_detector.cli.main import main
from defect_detector.core.config_register import RegisterConfig
from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.core.limits import ExposureLimits, Limits
from defect_detector.data.letterbox import letterbox
from defect_detector.data.synth import generate_board_pair
from defect_detector.export import (
    DeployModel,
    ExportError,
    check_parity,
    cpu_half_supported,
    export_onnx,
    export_torchscript,
    export_triton,
    fuse_conv_bn,
    parity_inputs,
    shifted_copy,
    trace_deploy_model,
)
from defect_detector.export.meta import parse_meta
from defect_detector.export.onednn import onednn_available
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.runtime import Runtime, archive_meta
from defect_detector.model.checkpoint import load_checkpoint
from defect_detector.model.detector import build_model

pytestmark = [pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning"), pytest.mark.usefixtures("one_thread")]

IMGSZ = 128


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_checkpoint(tmp_path_factory.mktemp("ckpt") / "small.pt", IMGSZ, randomize_bn=True)


@pytest.fixture(scope="module")
def artifact(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("export") / "small.torchscript.pt"
    loaded = load_checkpoint(checkpoint)
    baseline = make_baseline(list(DeployModel(loaded.model, IMGSZ).layer_names)).to_dict()
    report = export_torchscript(loaded, out, baseline=baseline, optimize=False)
    return out, report


@pytest.fixture(scope="module")
def reference_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-channel (image + registered reference) model."""
    return write_small_checkpoint(tmp_path_factory.mktemp("ref_ckpt") / "ref.pt", IMGSZ, randomize_bn=True, in_channels=2)


def _reference(checkpoint: Path, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    loaded = load_checkpoint(checkpoint)
    with torch.no_grad():
        return DeployModel(loaded.model, IMGSZ, fuse=False, channels_last=False)(x)


def test_fuse_conv_bn_keeps_outputs(checkpoint: Path) -> None:
    model = load_checkpoint(checkpoint).model
    fused = DeployModel(model, IMGSZ)
    plain = DeployModel(model, IMGSZ, fuse=False, channels_last=False)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in fused.modules())
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.modules()), "the caller's model must not be modified"
    x = torch.rand(2, 1, IMGSZ, IMGSZ)
    with torch.no_grad():
        for a, b in zip(fused(x), plain(x)):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="eval-mode"):
        fuse_conv_bn(build_model(load_checkpoint(checkpoint).config.model, 6).train())


def test_artifact_matches_eager_in_fresh_process(artifact: tuple[Path, dict], checkpoint: Path, tmp_path: Path) -> None:
    path, report = artifact
    assert report["parity"]["pred"] <= 1e-3 and report["parity"]["stats"] <= 1e-3
    x = parity_inputs(IMGSZ)
    x3 = torch.cat([x, x[:1].flip(-1)])  # batch 3: a batch size the trace never saw
    torch.save(x3, tmp_path / "x.pt")
    script = textwrap.dedent(
        f"""
        import json, torch
        extra = {{"meta.json": ""}}
        model = torch.jit.load({str(path)!r}, map_location="cpu", _extra_files=extra)
        x = torch.load({str(tmp_path / "x.pt")!r})
        with torch.no_grad():
            outputs = {{f"b{{n}}": model(x[:n]) for n in (1, 3)}}
        torch.save(outputs, {str(tmp_path / "out.pt")!r})
        print(json.loads(extra["meta.json"])["imgsz"])
        """
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(IMGSZ)
    outputs = torch.load(tmp_path / "out.pt")
    ref_pred, ref_stats = _reference(checkpoint, x3)
    for n in (1, 3):
        pred, stats = outputs[f"b{n}"]
        assert pred.shape == (n, sum((IMGSZ // s) ** 2 for s in (8, 16, 32)), 4 + len(DEEPPCB_CLASSES))
        assert stats.shape == (n, len(report["meta"]["layers"]), 2)
        torch.testing.assert_close(pred, ref_pred[:n], atol=1e-3, rtol=0)
        torch.testing.assert_close(stats, ref_stats[:n], atol=1e-3, rtol=0)


def test_meta_round_trips(artifact: tuple[Path, dict], checkpoint: Path) -> None:
    path, report = artifact
    extra = {"meta.json": ""}
    torch.jit.load(str(path), _extra_files=extra)
    meta = json.loads(extra["meta.json"])
    assert meta == report["meta"]
    assert meta["format_version"] == 1
    assert meta["class_names"] == list(DEEPPCB_CLASSES)
    assert meta["imgsz"] == IMGSZ and meta["channels"] == 1 and meta["normalisation"] == "x/255"
    assert meta["reference"] is False and meta["input"]["shape"] == ["B", 1, IMGSZ, IMGSZ]
    assert meta["strides"] == [8, 16, 32]
    assert meta["layers"] == list(DeployModel(load_checkpoint(checkpoint).model, IMGSZ).layer_names)
    assert meta["baseline"]["layer_names"] == meta["layers"] and meta["baseline"]["imgsz"] == IMGSZ
    assert meta["pixel_scale"] is None  # the small checkpoint's config does not record data.pixel_scale
    assert meta["half"] is False
    assert meta["cpu_only"] is onednn_available()  # traced on the CPU: oneDNN conv+SiLU kernels where available
    assert set(meta["outputs"]) == {"pred", "stats"}
    assert meta["optimize_for_inference"]["applied"] is False
    assert meta["limits"] == Limits().to_dict()  # the small checkpoint records the defaults, once
    assert "exposure" not in meta["operating_point"] and "register" not in meta


def test_meta_exposure_range_defaults_for_old_artifacts_and_is_checked(artifact: tuple[Path, dict]) -> None:
    """Issue 36: the exposure range the weights were validated at travels with them (issue 57: in ``limits``); an
    artifact exported before v0.19 keeps it in ``operating_point`` and is read from there, one before v0.14 records
    none and gets the defaults; a forged entry is one clear line."""
    path, report = artifact
    old = json.loads(json.dumps(report["meta"]))
    del old["limits"]
    old["operating_point"]["exposure"] = {"min_light": 0.45}
    point = Runtime(torch.nn.Identity(), parse_meta(path, json.dumps(old)), torch.device("cpu"), torch.float32, "torchscript", path)
    assert point.limits.exposure == ExposureLimits(min_light=0.45)
    del old["operating_point"]["exposure"]
    oldest = Runtime(torch.nn.Identity(), parse_meta(path, json.dumps(old)), torch.device("cpu"), torch.float32, "torchscript", path)
    assert oldest.limits == Limits()
    old["operating_point"]["exposure"] = {"min_light": 1.5}
    with pytest.raises(ValueError, match=r"operating_point must be an \"exposure\" entry null or"):
        parse_meta(path, json.dumps(old))
    forged = {**report["meta"], "limits": {**report["meta"]["limits"], "exposure": {"min_light": "dim"}}}
    with pytest.raises(ValueError, match=r"meta.json: limits\.exposure\.min_light: must be a number, got 'dim'"):
        parse_meta(path, json.dumps(forged))


def test_trace_without_monitored_layers(checkpoint: Path) -> None:
    deploy = DeployModel(load_checkpoint(checkpoint).model, IMGSZ, layers=())
    assert deploy.layer_names == ()
    pred, stats = trace_deploy_model(deploy)(torch.rand(3, 1, IMGSZ, IMGSZ))
    assert stats.shape == (3, 0, 2) and pred.shape[0] == 3


def test_parity_check_raises_on_large_difference() -> None:
    check_parity({"pred": 1e-4, "stats": 0.0, "boxes": 1e-4, "scores": 0.0, "stats_relative": 0.0}, False, "x")
    with pytest.raises(ExportError, match="parity"):
        check_parity({"pred": 0.1, "stats": 0.0, "boxes": 0.1, "scores": 0.0, "stats_relative": 0.0}, False, "x")


@pytest.mark.skipif(not torch.cuda.is_available() and not cpu_half_supported(), reason="no float16 convolution on this machine")
def test_half_export(checkpoint: Path, tmp_path: Path) -> None:
    report = export_torchscript(load_checkpoint(checkpoint), tmp_path / "half.pt", half=True)
    assert report["meta"]["half"] is True and report["meta"]["input"]["dtype"] == "float16"
    model = torch.jit.load(str(tmp_path / "half.pt"), map_location=report["device"])
    pred, stats = model(torch.rand(1, 1, IMGSZ, IMGSZ, device=report["device"], dtype=torch.float16))
    assert pred.dtype == torch.float32 and stats.dtype == torch.float32


def test_onnx_export(checkpoint: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnx", reason="onnx not installed (pip install '.[onnx]')")
    out = tmp_path / "small.onnx"
    report = export_onnx(load_checkpoint(checkpoint), out)
    assert out.is_file() and (tmp_path / "small.meta.json").is_file()
    assert json.loads((tmp_path / "small.meta.json").read_text())["class_names"] == list(DEEPPCB_CLASSES)
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed: ONNX parity not checked")
    assert report["parity"]["pred"] <= 1e-3
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["images"]
    assert [o.name for o in session.get_outputs()] == ["pred", "stats"]
    x = parity_inputs(IMGSZ, [np.full((90, 120), 200, np.uint8)] * 3)
    pred, stats = session.run(None, {"images": x.numpy()})
    ref_pred, ref_stats = _reference(checkpoint, x)
    assert pred.shape[0] == 3
    np.testing.assert_allclose(pred, ref_pred.numpy(), atol=1e-3)
    np.testing.assert_allclose(stats, ref_stats.numpy(), atol=1e-3)


ONEDNN_OP = "mkldnn::_convolution_pointwise"  # the fused conv+SiLU op of deploy/onednn.py


@pytest.mark.skipif(not onednn_available(), reason="no oneDNN conv+SiLU op in this torch build")
def test_default_cpu_export_holds_the_onednn_op(artifact: tuple[Path, dict]) -> None:
    """The positive control for the Triton test below: the op is visible in a loaded module's inlined graph."""
    path, report = artifact
    assert report["device"] == "cpu" and report["meta"]["cpu_only"] is True
    assert ONEDNN_OP in str(torch.jit.load(str(path), map_location="cpu").inlined_graph)


@pytest.mark.skipif(importlib.util.find_spec("onnx") is not None, reason="onnx is installed")
def test_onnx_export_without_onnx_is_one_clear_error(checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "small.onnx"
    assert main(["export", "--weights", str(checkpoint), "--format", "onnx", "--out", str(out)]) == 2
    assert f"{out}: ONNX export needs the onnx package" in capsys.readouterr().err and not out.exists()


def test_triton_repository(checkpoint: Path, tmp_path: Path) -> None:
    report = export_triton(load_checkpoint(checkpoint), tmp_path / "repo", model_name="pcb")
    model = torch.jit.load(str(tmp_path / "repo" / "pcb" / "1" / "model.pt"), map_location="cpu")
    graph = str(model.inlined_graph)  # the portable graph even when exported on the CPU: no oneDNN fused kernels
    assert "aten::_convolution" in graph and ONEDNN_OP not in graph and "mkldnn" not in graph
    assert report["meta"]["cpu_only"] is False and archive_meta(tmp_path / "repo" / "pcb" / "1" / "model.pt")["cpu_only"] is False
    pred, _ = model(torch.rand(2, 1, IMGSZ, IMGSZ))
    assert pred.shape[0] == 2
    assert (tmp_path / "repo" / "README.md").is_file()
    config = (tmp_path / "repo" / "pcb" / "config.pbtxt").read_text()
    anchors = sum((IMGSZ // s) ** 2 for s in (8, 16, 32))
    layers = len(report["meta"]["layers"])
    assert 'platform: "pytorch_libtorch"' in config and "max_batch_size: 8" in config and "dynamic_batching" in config
    assert f'name: "INPUT__0", data_type: TYPE_FP32, dims: [ 1, {IMGSZ}, {IMGSZ} ]' in config
    assert f'name: "OUTPUT__0", data_type: TYPE_FP32, dims: [ {anchors}, 10 ]' in config
    assert f'name: "OUTPUT__1", data_type: TYPE_FP32, dims: [ {layers}, 2 ]' in config


def test_tritons_copy_carries_a_digest_and_an_edited_one_is_refused(checkpoint: Path, tmp_path: Path) -> None:
    import zipfile

    report = export_triton(load_checkpoint(checkpoint), tmp_path / "repo", model_name="pcb")
    served = tmp_path / "repo" / "pcb" / "1" / "model.pt"
    assert len(report["meta"]["digest"]["sha256"]) == 64 and Runtime.load(served, device="cpu").meta == report["meta"]
    forged = tmp_path / "forged.pt"
    with zipfile.ZipFile(served) as src, zipfile.ZipFile(forged, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("/extra/meta.json"):
                data = json.dumps({**json.loads(data), "pixel_scale": 4.0}).encode()
            dst.writestr(item, data)
    with pytest.raises(ValueError, match="forged.pt: meta.json does not match the model it is packed with"):
        Runtime.load(forged, device="cpu")


def test_cli_export(checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli.torchscript.pt"
    baseline = make_baseline(list(DeployModel(load_checkpoint(checkpoint).model, IMGSZ).layer_names))
    baseline.save(tmp_path / "baseline.json")
    assert main(["export", "--weights", str(checkpoint), "--out", str(out), "--baseline", str(tmp_path / "baseline.json")]) == 0
    printed = capsys.readouterr().out
    assert "parity vs eager" in printed
    assert ("optimize_for_inference: applied" in printed) == archive_meta(out)["optimize_for_inference"]["applied"]  # said when applied
    assert f"baseline embedded from file {tmp_path / 'baseline.json'}" in printed
    extra = {"meta.json": ""}
    torch.jit.load(str(out), _extra_files=extra)(torch.rand(1, 1, IMGSZ, IMGSZ))
    meta = json.loads(extra["meta.json"])
    assert meta["baseline"] == baseline.to_dict()
    optimize = meta["optimize_for_inference"]  # the CLI times optimize_for_inference and records its choice
    assert optimize["requested"] == "auto" and isinstance(optimize["applied"], bool) and optimize["reason"]
    assert optimize["frozen_ms"] is not None and optimize["optimized_ms"] is not None
    assert meta["cpu_only"] is onednn_available()
    portable = tmp_path / "portable.torchscript.pt"
    assert main(["export", "--weights", str(checkpoint), "--out", str(portable), "--portable"]) == 0
    printed = capsys.readouterr().out
    assert "CPU-only" not in printed and "baseline none" in printed
    assert archive_meta(portable)["cpu_only"] is False
    assert main(["export", "--weights", str(checkpoint), "--format", "onnx", "--portable"]) == 2
    assert "--portable applies to a float32 TorchScript" in capsys.readouterr().err
    assert main(["export", "--weights", str(out)]) == 2
    assert "already an exported TorchScript" in capsys.readouterr().err
    assert main(["export", "--weights", str(checkpoint), "--format", "onnx", "--half"]) == 2
    assert main(["export", "--weights", str(tmp_path / "missing.pt")]) == 2
    assert main(["export", "--weights", str(checkpoint), "--imgsz", "100"]) == 2


def test_parity_inputs_for_a_reference_model_stack_a_shifted_copy() -> None:
    image = np.random.default_rng(0).integers(0, 256, (90, 120), dtype=np.uint8)
    x = parity_inputs(IMGSZ, [image], channels=2)
    assert x.shape == (1, 2, IMGSZ, IMGSZ) and x.dtype == torch.float32
    torch.testing.assert_close(x[:, :1], parity_inputs(IMGSZ, [image]))  # channel 0: the 1-channel input
    want = letterbox(shifted_copy(image, 3, 2), IMGSZ)[0]  # channel 1: the shifted copy, same letterbox
    np.testing.assert_array_equal((x[0, 1] * 255).round().byte().numpy(), want)
    assert not torch.equal(x[:, 0], x[:, 1])
    assert parity_inputs(IMGSZ, channels=2).shape == (2, 2, IMGSZ, IMGSZ)
    moved = shifted_copy(image, 3, 2)
    assert (moved[:2] == 114).all() and (moved[:, :3] == 114).all() and np.array_equal(moved[2:, 3:], image[:-2, :-3])


def test_reference_artifact_matches_eager(reference_checkpoint: Path, tmp_path: Path) -> None:
    loaded = load_checkpoint(reference_checkpoint)
    out = tmp_path / "ref.torchscript.pt"
    check = [generate_board_pair(96, 128, np.random.default_rng(1))[0], np.full((70, 50), 90, np.uint8)]
    report = export_torchscript(loaded, out, optimize="auto", check_images=check)
    assert report["parity_images"] == 2 and report["parity"]["pred"] <= 1e-3 and report["parity"]["stats"] <= 1e-3
    meta = archive_meta(out)
    assert meta == report["meta"]
    assert meta["channels"] == 2 and meta["reference"] is True and meta["input"]["shape"] == ["B", 2, IMGSZ, IMGSZ]
    model = torch.jit.load(str(out), map_location="cpu")
    image, template = generate_board_pair(90, 120, np.random.default_rng(2))[:2]
    planes = [letterbox(image, IMGSZ)[0], letterbox(shifted_copy(template, 1, 1), IMGSZ)[0]]
    x = torch.from_numpy(np.stack(planes)[None]).float().div(255.0).repeat(3, 1, 1, 1)  # [3, 2, S, S]: a batch never traced
    x[1, 1] = 114 / 255  # frame 1: a blank reference
    with torch.no_grad():
        got = model(x)
    want = _reference(reference_checkpoint, x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=0)
    assert float((got[0][0] - got[0][1]).abs().max()) > 1e-4, "the reference channel must change the prediction"
    assert not torch.allclose(got[1][0], got[1][1], atol=1e-3), "... and the layer statistics"
    with pytest.raises(RuntimeError):
        model(x[:, :1])  # a 1-channel input does not fit a reference model


def test_reference_triton_repository(reference_checkpoint: Path, tmp_path: Path) -> None:
    report = export_triton(load_checkpoint(reference_checkpoint), tmp_path / "repo", model_name="pcb_ref")
    assert report["meta"]["channels"] == 2
    config = (tmp_path / "repo" / "pcb_ref" / "config.pbtxt").read_text()
    assert f'name: "INPUT__0", data_type: TYPE_FP32, dims: [ 2, {IMGSZ}, {IMGSZ} ]' in config
    readme = (tmp_path / "repo" / "README.md").read_text()
    assert f"[B, 2, {IMGSZ}, {IMGSZ}]" in readme and "registered" in readme


def test_reference_onnx_export(reference_checkpoint: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnx", reason="onnx not installed (pip install '.[onnx]')")
    out = tmp_path / "ref.onnx"
    report = export_onnx(load_checkpoint(reference_checkpoint), out)
    meta = json.loads((tmp_path / "ref.meta.json").read_text())
    assert meta["channels"] == 2 and meta["reference"] is True and meta["input"]["shape"] == ["B", 2, IMGSZ, IMGSZ]
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed: ONNX parity not checked")
    assert report["parity"]["pred"] <= 1e-3
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape[1:] == [2, IMGSZ, IMGSZ]
    x = parity_inputs(IMGSZ, [np.full((90, 120), 200, np.uint8)] * 3, channels=2)
    pred, stats = session.run(None, {"images": x.numpy()})
    ref_pred, ref_stats = _reference(reference_checkpoint, x)
    np.testing.assert_allclose(pred, ref_pred.numpy(), atol=1e-3)
    np.testing.assert_allclose(stats, ref_stats.numpy(), atol=1e-3)


def test_the_design_domain_travels_in_the_artifact(reference_checkpoint: Path, tmp_path: Path) -> None:
    """A checkpoint's design domain (issue 34) is in its artifact's meta.json, covered by the digest, and the inspector
    of the artifact reads it; a checkpoint without one gives an artifact without one."""
    from defect_detector.core.io import atomic_torch_save
    from defect_detector.inspect.design_check import DesignCheck
    from defect_detector.model.checkpoint import strip_checkpoint
    from defect_detector.monitor.domain import DesignStats, DomainModel

    domain = DomainModel.fit([DesignStats(1.0, 0.0, 255.0, 0.0, 2.0, w) for w in (8.0, 12.0, 20.0)]).to_dict()
    with_domain = tmp_path / "ref_domain.pt"
    atomic_torch_save(strip_checkpoint(torch.load(reference_checkpoint, weights_only=True), domain=domain), with_domain)
    out = tmp_path / "ref_domain.torchscript.pt"
    assert export_torchscript(load_checkpoint(with_domain), out, optimize=False)["meta"]["domain"] == domain
    runtime = Runtime.load(out, device="cpu")
    assert runtime.meta["domain"] == domain and DesignCheck.from_meta(runtime.meta, out).domain is not None
    plain = export_torchscript(load_checkpoint(reference_checkpoint), tmp_path / "ref.torchscript.pt", optimize=False)["meta"]
    assert "domain" not in plain and DesignCheck.from_meta(plain, "ref.torchscript.pt").domain is None


def test_the_taught_designs_travel_in_the_artifact_under_its_digest(reference_checkpoint: Path, tmp_path: Path) -> None:
    """The designs ``teach`` taught a checkpoint (issue 34) are in its TorchScript artifact's meta.json, the runtime and
    the inspector's design check read them, and the digest covers them (an edited list is refused)."""
    import zipfile

    from defect_detector.core.io import atomic_torch_save
    from defect_detector.inspect.design_check import DesignCheck
    from defect_detector.model.checkpoint import strip_checkpoint

    taught = [{"name": "photo.png", "key": "image:0123456789abcdef"}]
    with_taught = tmp_path / "ref_taught.pt"
    atomic_torch_save(strip_checkpoint(torch.load(reference_checkpoint, weights_only=True) | {"taught": taught}), with_taught)
    out = tmp_path / "ref_taught.torchscript.pt"
    assert export_torchscript(load_checkpoint(with_taught), out, optimize=False)["meta"]["taught"] == taught
    runtime = Runtime.load(out, device="cpu")
    assert runtime.meta["taught"] == taught and DesignCheck.from_meta(runtime.meta, out).taught == {"image:0123456789abcdef"}
    forged = tmp_path / "forged.pt"
    with zipfile.ZipFile(out) as src, zipfile.ZipFile(forged, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("/extra/meta.json"):
                data = json.dumps({**json.loads(data), "taught": [*taught, {"name": "other.png", "key": "image:1"}]}).encode()
            dst.writestr(item, data)
    with pytest.raises(ValueError, match="forged.pt: meta.json does not match the model it is packed with"):
        Runtime.load(forged, device="cpu")
    plain = export_torchscript(load_checkpoint(reference_checkpoint), tmp_path / "ref.torchscript.pt", optimize=False)["meta"]
    assert plain["taught"] == [] and DesignCheck.from_meta(plain, "ref.torchscript.pt").taught == frozenset()


def test_the_golden_check_limits_travel_with_the_weights(artifact: tuple[Path, dict], tmp_path: Path) -> None:
    """Issue 43: a training config's ``register`` section is carried by the checkpoint and the artifact's meta (issue
    57: in ``limits.register``), and is what the runtime registers and checks golden images with; an artifact from
    before it gets the defaults, and a bad value is one line naming the key."""
    path, report = artifact
    assert report["meta"]["limits"]["register"] == RegisterConfig().model_dump()
    tight = write_small_checkpoint(tmp_path / "tight.pt")
    ckpt = torch.load(tight, weights_only=True)
    ckpt["config"]["register"] = {"max_slivers": 0.05, "max_shift": 30.0}
    torch.save(ckpt, tight)
    runtime = Runtime.load(tight)
    assert runtime.limits.register.max_slivers == 0.05 and runtime.limits.register.max_shift == 30.0
    assert Pipeline(runtime).limits.register.max_slivers == 0.05
    old = json.loads(json.dumps(report["meta"]))
    del old["limits"]
    before = Runtime(torch.nn.Identity(), parse_meta(path, json.dumps(old)), torch.device("cpu"), torch.float32, "torchscript", path)
    assert before.limits.register == RegisterConfig()
    old["register"] = {"max_slivers": 3}
    with pytest.raises(ValueError, match=r"meta.json: register\.max_slivers: must be in \[0, 1\]"):
        parse_meta(path, json.dumps(old))


def test_an_edited_triton_config_is_refused_when_its_model_loads(checkpoint: Path, tmp_path: Path) -> None:
    """Issue 44: Triton's ``config.pbtxt`` was under no digest; it must be the config the model's (digested) meta gives."""
    export_triton(load_checkpoint(checkpoint), tmp_path / "repo", model_name="pcb")
    served, config = tmp_path / "repo" / "pcb" / "1" / "model.pt", tmp_path / "repo" / "pcb" / "config.pbtxt"
    Runtime.load(served, device="cpu")  # as exported: loads
    config.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: 4"))
    Runtime.load(served, device="cpu")  # another batch limit is the server's choice
    config.write_text(config.read_text().replace("TYPE_FP32, dims: [ 1,", "TYPE_FP16, dims: [ 1,"))
    with pytest.raises(ValueError, match=r"config\.pbtxt: not the Triton config model\.pt's meta\.json gives \(edited\?\)"):
        Runtime.load(served, device="cpu")
