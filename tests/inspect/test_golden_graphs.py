"""The cached golden path of a siamese golden-template model through ``Runtime`` (inspect/golden_graphs.py), for every
artifact kind: ``infer_cached(images, golden_features(reference))`` gives what ``infer(cat(images, reference))`` gives,
for one golden image shared by several frames and for a golden image per frame; runtimes that cannot cache say so."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from small_checkpoint import write_small_checkpoint

from defect_detector.data.letterbox import letterbox
from defect_detector.data.synth import generate_board_pair
from defect_detector.export import DeployModel, artifact_bytes, checkpoint_meta, export_onnx, export_torchscript, quiet_jit, shifted_copy
from defect_detector.export.onnx import golden_graph_path
from defect_detector.inspect.golden_graphs import GoldenGraphs, module_graphs
from defect_detector.inspect.runtime import Runtime
from defect_detector.model.checkpoint import load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")

IMGSZ = 64
SIAMESE = {"fusion": "siamese"}


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small siamese checkpoint (BatchNorm randomised, so folding is exercised) and its TorchScript and ONNX exports."""
    folder = tmp_path_factory.mktemp("golden_graphs")
    checkpoint = write_small_checkpoint(folder / "siamese.pt", IMGSZ, randomize_bn=True, seed=3, in_channels=2, model=SIAMESE)
    loaded = load_checkpoint(checkpoint)
    export_torchscript(loaded, folder / "siamese.torchscript.pt", optimize=False)
    paths = {"checkpoint": checkpoint, "torchscript": folder / "siamese.torchscript.pt"}
    if _have_onnx():
        export_onnx(loaded, folder / "siamese.onnx")
        paths["onnx"] = folder / "siamese.onnx"
    return paths


def _have_onnx() -> bool:
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def _inputs(frames: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """``(images [frames, 1, S, S], goldens [frames, 1, S, S])``: synthetic boards with defects, each with its own
    defect-free template slightly shifted (a registered golden image), letterboxed."""
    images, goldens = [], []
    for i in range(frames):
        image, template = generate_board_pair(48, 64, np.random.default_rng(10 + i), n_defects=(2, 4))[:2]
        images.append(letterbox(image, IMGSZ)[0])
        goldens.append(letterbox(shifted_copy(template, 1, 1), IMGSZ)[0])
    as_tensor = lambda planes: torch.from_numpy(np.stack(planes)[:, None]).float().div(255.0)  # noqa: E731
    return as_tensor(images), as_tensor(goldens)


def _assert_same(got: tuple[torch.Tensor, torch.Tensor], want: tuple[torch.Tensor, torch.Tensor]) -> None:
    (pred, stats), (want_pred, want_stats) = got, want
    assert pred.dtype == stats.dtype == torch.float32 and pred.shape == want_pred.shape and stats.shape == want_stats.shape
    torch.testing.assert_close(pred[..., :4], want_pred[..., :4], atol=1e-3, rtol=0)  # boxes, letterboxed px
    torch.testing.assert_close(pred[..., 4:], want_pred[..., 4:], atol=1e-4, rtol=0)  # class probabilities
    torch.testing.assert_close(stats, want_stats, atol=1e-4, rtol=1e-4)


def _check_cached_path(runtime: Runtime) -> None:
    images, goldens = _inputs()
    assert runtime.caches_golden
    one = runtime.golden_features(goldens[:1])
    assert len(one) == 2 and all(f.shape[0] == 1 for f in one)
    # the line's case: several frames against one golden image, its features computed once
    _assert_same(runtime.infer_cached(images, one), runtime.infer(torch.cat((images, goldens[:1].expand(3, -1, -1, -1)), 1)))
    # a golden image per frame
    per_frame = runtime.golden_features(goldens)
    _assert_same(runtime.infer_cached(images, per_frame), runtime.infer(torch.cat((images, goldens), 1)))
    single = runtime.infer_cached(images[1:2], runtime.golden_features(goldens[1:2]))
    _assert_same(single, runtime.infer(torch.cat((images, goldens), 1)[1:2]))
    # the golden image matters (the features are not ignored), the frame's statistics do not depend on it
    other_pred, other_stats = runtime.infer_cached(images, runtime.golden_features(1.0 - goldens[:1]))
    pred, stats = runtime.infer_cached(images, one)
    assert float((other_pred - pred).abs().max()) > 1e-3
    torch.testing.assert_close(other_stats, stats, atol=1e-5, rtol=1e-5)
    # the golden pass also gives the golden image's drift statistics: those of the golden image paired with itself
    features, golden_stats = runtime.golden_pass(goldens)
    assert golden_stats is not None and golden_stats.dtype == torch.float32
    torch.testing.assert_close(golden_stats, runtime.infer(torch.cat((goldens, goldens), 1))[1], atol=1e-4, rtol=1e-4)
    assert all(torch.equal(a, b) for a, b in zip(features, per_frame))


def test_pt2_package_holds_the_golden_and_frame_models(small_siamese_pt2: dict) -> None:
    path, report = small_siamese_pt2["path"], small_siamese_pt2["report"]  # compiled once per session (conftest.py)
    assert report["meta"]["imgsz"] == IMGSZ
    graphs = report["meta"]["graphs"]
    assert [graphs[g]["model_name"] for g in ("forward", "golden", "frame")] == ["model", "golden", "frame"]
    assert graphs["frame"]["inputs"]["c3"][0] == "B"  # one compiled graph: the runtime expands a golden image's features
    assert report["parity"]["pred"] <= 1e-3 and report["parity_exported"]["scores"] <= 1e-4
    runtime = Runtime.load(path, device="cpu")
    assert runtime.kind == "pt2"
    _check_cached_path(runtime)


@pytest.mark.parametrize("kind", ["checkpoint", "checkpoint_eager", "torchscript", "onnx"])
def test_cached_path_gives_the_two_channel_outputs(artifacts: dict[str, Path], kind: str) -> None:
    if kind == "onnx" and "onnx" not in artifacts:
        pytest.skip("onnx / onnxruntime not installed")
    path = artifacts[kind.removesuffix("_eager")]
    runtime = Runtime.load(path, device="cpu", trace=kind != "checkpoint_eager")
    assert runtime.kind == kind.removesuffix("_eager")
    _check_cached_path(runtime)


def test_artifact_meta_says_which_inputs_each_graph_takes(artifacts: dict[str, Path]) -> None:
    graphs = Runtime.load(artifacts["torchscript"], device="cpu").meta["graphs"]
    c3, c4 = [1, 32, IMGSZ // 8, IMGSZ // 8], [1, 48, IMGSZ // 16, IMGSZ // 16]  # SMALL_MODEL widths 16, 32, 48, 64
    assert graphs["forward"]["inputs"] == {"images": ["B", 2, IMGSZ, IMGSZ]} and graphs["forward"]["method"] == "forward"
    assert graphs["golden"]["inputs"] == {"reference": ["B", 1, IMGSZ, IMGSZ]} and graphs["golden"]["method"] == "golden"
    stats = graphs["forward"]["outputs"]["stats"]
    assert graphs["golden"]["outputs"] == {"c3": ["B", *c3[1:]], "c4": ["B", *c4[1:]], "stats": stats} and stats[1] == 4
    assert graphs["frame"]["inputs"] == {"image": ["B", 1, IMGSZ, IMGSZ], "c3": ["1 or B", *c3[1:]], "c4": ["1 or B", *c4[1:]]}
    assert graphs["frame"]["outputs"] == graphs["forward"]["outputs"]
    features = Runtime.load(artifacts["torchscript"], device="cpu").golden_features(_inputs(1)[1])
    assert [list(f.shape) for f in features] == [c3, c4]


def test_infer_cached_refuses_tta_and_bad_inputs(artifacts: dict[str, Path]) -> None:
    runtime = Runtime.load(artifacts["torchscript"], device="cpu")
    images, goldens = _inputs(2)
    features = runtime.golden_features(goldens[:1])
    with pytest.raises(ValueError, match=r"reference must be \[B, 1, 64, 64\]"):
        runtime.golden_features(torch.cat((images, goldens), 1))
    with pytest.raises(ValueError, match=r"images must be \[B, 1, 64, 64\]"):
        runtime.infer_cached(torch.rand(2, 1, 32, 32), features)
    with pytest.raises(ValueError, match="golden must be the 2 golden_features, batch 1 or 2"):
        runtime.infer_cached(images, features[:1])
    with pytest.raises(ValueError, match="golden must be the 2 golden_features, batch 1 or 2"):
        runtime.infer_cached(images, runtime.golden_features(torch.cat([goldens] * 2)))
    runtime.set_tta("flip2")
    with pytest.raises(ValueError, match="test-time augmentation 'flip2'"):
        runtime.infer_cached(images, features)


def _old_torchscript(checkpoint: Path, out: Path) -> Path:
    """A siamese TorchScript artifact as exported before the golden and frame graphs: ``forward`` only, no meta ``graphs``."""
    loaded = load_checkpoint(checkpoint)
    deploy = DeployModel(loaded.model, IMGSZ)
    with torch.no_grad(), quiet_jit():
        module = torch.jit.freeze(torch.jit.trace(deploy, torch.rand(2, 2, IMGSZ, IMGSZ), check_trace=False).eval())
    meta = checkpoint_meta(loaded, deploy)
    del meta["graphs"]
    out.write_bytes(artifact_bytes(module, meta))
    return out


def test_runtimes_that_cannot_cache_say_so(artifacts: dict[str, Path], tmp_path: Path) -> None:
    single = write_small_checkpoint(tmp_path / "single.pt", IMGSZ)
    diff = write_small_checkpoint(tmp_path / "diff.pt", IMGSZ, in_channels=2, model={"fusion": "diff"})
    old = _old_torchscript(artifacts["checkpoint"], tmp_path / "old.torchscript.pt")
    for path in (single, diff, old):
        runtime = Runtime.load(path, device="cpu")
        assert not runtime.caches_golden
        with pytest.raises(ValueError, match="golden_features needs a siamese golden-template model exported with its golden and frame"):
            runtime.golden_features(torch.rand(1, 1, IMGSZ, IMGSZ))
        with pytest.raises(ValueError, match="infer_cached needs a siamese"):
            runtime.infer_cached(torch.rand(1, 1, IMGSZ, IMGSZ), (torch.rand(1, 1), torch.rand(1, 1)))
    assert Runtime.load(old, device="cpu").infer(torch.rand(1, 2, IMGSZ, IMGSZ))[0].shape[0] == 1  # the old forward still runs


def test_onnx_graph_files_missing_or_from_another_export(
    artifacts: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    if "onnx" not in artifacts:
        pytest.skip("onnx / onnxruntime not installed")
    src = artifacts["onnx"]
    meta = json.loads(src.with_name("siamese.meta.json").read_text())
    assert meta["graphs"]["golden"]["file"] == "siamese.golden.onnx" and meta["graphs"]["frame"]["file"] == "siamese.frame.onnx"
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "siamese.onnx").write_bytes(src.read_bytes())  # the model copied without its graph files
    with caplog.at_level(logging.WARNING, logger="defect_detector.inspect"):
        runtime = Runtime.load(alone / "siamese.onnx", device="cpu")
    assert not runtime.caches_golden and "siamese.golden.onnx, siamese.frame.onnx not found beside it" in caplog.text
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "siamese.onnx").write_bytes(src.read_bytes())
    (mixed / "siamese.golden.onnx").write_bytes(golden_graph_path(src, "golden").read_bytes())
    (mixed / "siamese.frame.onnx").write_bytes(golden_graph_path(src, "golden").read_bytes())  # the wrong graph
    with pytest.raises(ValueError, match="siamese.frame.onnx: not the graph exported with siamese.onnx"):
        Runtime.load(mixed / "siamese.onnx", device="cpu")


def test_an_onnx_meta_with_forward_only_has_no_cached_path(artifacts: dict[str, Path]) -> None:
    """``export --int8`` keeps meta ``graphs`` to ``forward`` (its golden and frame graphs would stay float32, unquantized):
    the runtime then has no cached path, whatever files lie beside the model."""
    from defect_detector.inspect.golden_graphs import load_golden_graphs

    if "onnx" not in artifacts:
        pytest.skip("onnx / onnxruntime not installed")
    meta = json.loads(artifacts["onnx"].with_name("siamese.meta.json").read_text())
    assert load_golden_graphs("onnx", artifacts["onnx"], None, meta, torch.device("cpu")) is not None
    int8_like = {**meta, "graphs": {"forward": meta["graphs"]["forward"]}}
    assert load_golden_graphs("onnx", artifacts["onnx"], None, int8_like, torch.device("cpu")) is None


def test_a_golden_graph_without_statistics_gives_none(tmp_path: Path) -> None:
    """Graphs exported before v0.17 return the features only, and a model monitoring a layer past the trunk (where the
    golden image's own pass does not go) returns NaN: either way the runtime pairs the golden image with itself."""
    x = _inputs(2)[1]
    model = load_checkpoint(write_small_checkpoint(tmp_path / "siamese.pt", IMGSZ, in_channels=2, model=SIAMESE)).model
    deploy = DeployModel(model, IMGSZ)
    old = GoldenGraphs(lambda r: deploy.golden(r)[:2], deploy.frame, same_batch=False)
    features, stats = old.golden_pass(x)
    assert stats is None and len(features) == 2
    past_trunk = DeployModel(model, IMGSZ, layers=("backbone.stage2", "neck.*"))
    assert not past_trunk.golden_stats and torch.isnan(past_trunk.golden(x)[2]).all()
    assert module_graphs(past_trunk).golden_pass(x)[1] is None
    assert module_graphs(deploy).golden_pass(x)[1].shape == (2, len(deploy.layer_names), 2)
