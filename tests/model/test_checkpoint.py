import json
from pathlib import Path

import cv2
import pytest
import torch

from defect_detector.cli.main import main
from defect_detector.core.config import ConfigError, ModelConfig, config_from_dict
from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.model.checkpoint import average_checkpoints, load_checkpoint, load_matching_weights
from defect_detector.model.detector import build_model

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

SMALL = ModelConfig(widths=(8, 16, 24, 32), depths=(1, 1, 1, 1), neck_channels=16, head_convs=1)
TINY = {"widths": [8, 16, 24, 32], "depths": [1, 1, 1, 1], "neck_channels": 16, "head_convs": 1}


def test_load_matching_weights_copies_same_shapes_and_keeps_the_rest(tmp_path: Path) -> None:
    torch.manual_seed(0)
    source = build_model(SMALL, num_classes=6)
    path = tmp_path / "src.pt"
    torch.save({"model": {k: torch.zeros_like(v) for k, v in source.state_dict().items()}, "ema": source.state_dict()}, path)

    torch.manual_seed(1)
    wider = ModelConfig(widths=(8, 16, 40, 32), depths=(1, 1, 2, 1), neck_channels=16, head_convs=1)
    target = build_model(wider, num_classes=3)  # another label set: the class branches differ
    fresh = {k: v.clone() for k, v in target.state_dict().items()}
    loaded, skipped = load_matching_weights(target, path)

    state, src = target.state_dict(), source.state_dict()
    assert "backbone.stem.0.weight" in loaded and "backbone.stage2.0.depthwise.0.weight" in loaded
    assert any(k.startswith("backbone.stage3") for k in skipped) and any(k.startswith("head.cls") for k in skipped)
    for k in loaded:
        torch.testing.assert_close(state[k], src[k])  # the EMA weights, not the zeroed raw ones
    for k in skipped:
        torch.testing.assert_close(state[k], fresh[k])
    assert sorted(loaded + skipped) == sorted(state)


def test_load_matching_weights_rejects_an_unrelated_file(tmp_path: Path) -> None:
    path = tmp_path / "other.pt"
    torch.save({"model": {"fc.weight": torch.zeros(2, 2)}}, path)
    with pytest.raises(ValueError, match="no tensor matches"):
        load_matching_weights(build_model(SMALL, num_classes=6), path)
    (tmp_path / "corrupt.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="corrupt.pt: not a readable checkpoint"):
        load_matching_weights(build_model(SMALL, num_classes=6), tmp_path / "corrupt.pt")
    with pytest.raises(FileNotFoundError, match="missing.pt: weights file not found"):
        load_matching_weights(build_model(SMALL, num_classes=6), tmp_path / "missing.pt")


def _small_checkpoint(path: Path, seed: int, widths: list[int] | None = None) -> Path:
    cfg = config_from_dict({"model": {**TINY, **({"widths": widths} if widths else {})}, "data": {"imgsz": 64}})
    torch.manual_seed(seed)
    state = build_model(cfg.model, len(DEEPPCB_CLASSES)).state_dict()
    torch.save({"model": state, "ema": state, "config": cfg.to_dict(), "class_names": list(DEEPPCB_CLASSES)}, path)
    return path


def test_average_checkpoints_is_the_mean_and_takes_overrides(tmp_path: Path) -> None:
    paths = [_small_checkpoint(tmp_path / f"{seed}.pt", seed) for seed in (1, 2, 3)]
    states = [torch.load(p, weights_only=True)["ema"] for p in paths]
    soup = average_checkpoints(paths, ["eval.f1_conf=0.45"])
    for key, value in soup["model"].items():
        if value.is_floating_point():
            torch.testing.assert_close(value, sum(s[key] for s in states) / 3)
        else:
            assert torch.equal(value, states[0][key])
    assert soup["config"]["eval"]["f1_conf"] == 0.45 and soup["metrics"]["averaged_from"] == [str(p) for p in paths]
    out = tmp_path / "soup.pt"
    assert main(["average", *map(str, paths[:2]), "--out", str(out), "--set", "eval.f1_conf=0.35"]) == 0
    loaded = load_checkpoint(out)
    assert loaded.config.eval.f1_conf == 0.35 and loaded.class_names == DEEPPCB_CLASSES


def test_average_checkpoints_names_what_does_not_fit(tmp_path: Path) -> None:
    a = _small_checkpoint(tmp_path / "a.pt", 1)
    wide = _small_checkpoint(tmp_path / "wide.pt", 2, widths=[16, 32, 48, 96])
    with pytest.raises(ValueError, match="at least two"):
        average_checkpoints([a])
    with pytest.raises(ValueError, match="wide.pt: model config"):
        average_checkpoints([a, wide])
    with pytest.raises(ConfigError, match="eval.f1_conf"):
        average_checkpoints([a, a], ["eval.f1_conf=2"])
    with pytest.raises(ConfigError, match="eval.tta"):  # retired: test-time augmentation is not stored with a model
        average_checkpoints([a, a], ["eval.tta=d8"])
    assert main(["average", str(a), str(tmp_path / "missing.pt"), "--out", str(tmp_path / "x.pt")]) == 2
    assert not (tmp_path / "x.pt").exists()


def test_strip_keeps_the_ema_weights_and_applies_validated_config_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = config_from_dict({"model": {**TINY, "in_channels": 2}})
    torch.manual_seed(0)
    ema = build_model(cfg.model, len(DEEPPCB_CLASSES)).state_dict()
    raw = {k: torch.zeros_like(v) for k, v in ema.items()}
    src = tmp_path / "last.pt"
    torch.save({"model": raw, "ema": ema, "optimizer": {}, "config": cfg.to_dict(), "class_names": list(DEEPPCB_CLASSES)}, src)
    out = tmp_path / "small.pt"
    assert main(["strip", str(src), "--out", str(out), "--set", "eval.f1_conf=0.55", "--set", "data.register_train=true"]) == 0
    assert "config set: eval.f1_conf=0.55, data.register_train=true" in capsys.readouterr().out
    loaded = load_checkpoint(out)
    assert loaded.config.eval.f1_conf == 0.55 and loaded.config.data.register_train is True and loaded.config.model.in_channels == 2
    assert "optimizer" not in torch.load(out, weights_only=True)
    for k, v in loaded.model.state_dict().items():
        torch.testing.assert_close(v, ema[k])
    assert main(["strip", str(src), "--out", str(tmp_path / "bad.pt"), "--set", "eval.f1_conf=2"]) == 2
    assert "eval.f1_conf: must be in [0, 1], got 2\n" in capsys.readouterr().err  # the value as written
    assert not (tmp_path / "bad.pt").exists()


def test_strip_carries_a_checked_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    from defect_detector.core.constants import DEFAULT_LAYERS
    from defect_detector.monitor.baseline import calibrate

    source = _small_checkpoint(tmp_path / "a.pt", 1)
    imgsz = load_checkpoint(source).config.data.imgsz
    frames = np.random.default_rng(0).normal(1.0, 0.1, size=(40, len(DEFAULT_LAYERS), 2))
    good, wrong_size = tmp_path / "good.json", tmp_path / "wrong_size.json"
    calibrate([frames], DEFAULT_LAYERS, imgsz=imgsz).save(good)
    calibrate([frames], DEFAULT_LAYERS, imgsz=imgsz // 2).save(wrong_size)
    out = tmp_path / "stripped.pt"
    assert main(["strip", str(source), "--baseline", str(good), "--out", str(out)]) == 0
    assert f"drift baseline: from {good}" in capsys.readouterr().out
    assert load_checkpoint(out).baseline["layer_names"] == list(DEFAULT_LAYERS)
    assert main(["strip", str(out), "--out", str(tmp_path / "again.pt")]) == 0  # kept when no new one is given
    assert "drift baseline: kept from the input" in capsys.readouterr().out
    assert main(["strip", str(source), "--baseline", str(wrong_size), "--out", str(tmp_path / "bad.pt")]) == 2
    assert f"imgsz {imgsz // 2}" in capsys.readouterr().err and not (tmp_path / "bad.pt").exists()


def test_strip_refuses_a_baseline_measured_with_other_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 58: ``calibrate`` without ``--weights`` measured the bundled model, and ``strip best.pt --baseline`` carried
    it into another one (a critical alert at frame 17 on clean frames). The baseline records the digest of the weights
    it was measured with; ``strip`` refuses other weights in one line, and takes the same weights stripped before."""
    from defect_detector.data.synth import write_synthetic_dataset
    from defect_detector.jobs.calibrate import run_calibrate
    from defect_detector.model.checkpoint import weights_digest

    measured, other = _small_checkpoint(tmp_path / "measured.pt", 1), _small_checkpoint(tmp_path / "other.pt", 2)
    ann = write_synthetic_dataset(tmp_path / "data", 3, 64, 64, seed=3)
    baseline = run_calibrate(measured, ann, None, tmp_path / "baseline.json", max_images=3, progress=False, fault_frames=2)
    assert baseline.model["weights_sha256"] == weights_digest(load_checkpoint(measured).model)
    assert main(["strip", str(other), "--baseline", str(tmp_path / "baseline.json"), "--out", str(tmp_path / "bad.pt")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"defect-detector strip: error: {tmp_path / 'baseline.json'}: baseline was measured with other weights (")
    assert "\n" not in err and f"calibrate --weights {other}" in err and not (tmp_path / "bad.pt").exists()
    assert main(["strip", str(measured), "--out", str(tmp_path / "plain.pt")]) == 0  # the same weights, stripped first
    assert main(["strip", str(tmp_path / "plain.pt"), "--baseline", str(tmp_path / "baseline.json"), "--out", str(tmp_path / "ok.pt")]) == 0
    assert load_checkpoint(tmp_path / "ok.pt").baseline["model"]["weights_sha256"] == baseline.model["weights_sha256"]


def test_strip_fits_and_carries_a_design_domain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``strip --domain GOLDEN`` fits the design domain on golden images (a COCO json's reference entries, or a folder)
    and stores it; a later strip keeps it; every meta the weights give carries it."""
    from defect_detector.export.deploy_model import DeployModel, checkpoint_meta

    samples = Path(__file__).resolve().parents[2] / "data" / "samples"
    source = _small_checkpoint(tmp_path / "a.pt", 1)
    assert load_checkpoint(source).domain is None
    out = tmp_path / "domain.pt"
    assert main(["strip", str(source), "--domain", str(samples / "calib" / "calib.json"), "--out", str(out)]) == 0
    assert "design domain: fitted on 15 golden images" in capsys.readouterr().out
    loaded = load_checkpoint(out)
    assert loaded.domain["fitted_on"] == 15 and checkpoint_meta(loaded, DeployModel(loaded.model, 64))["domain"] == loaded.domain
    assert main(["strip", str(out), "--out", str(tmp_path / "again.pt")]) == 0
    assert "design domain: kept from the input" in capsys.readouterr().out
    assert load_checkpoint(tmp_path / "again.pt").domain == loaded.domain
    assert main(["strip", str(source), "--domain", str(tmp_path / "none"), "--out", str(tmp_path / "bad.pt")]) == 2
    assert "golden images not found" in capsys.readouterr().err and not (tmp_path / "bad.pt").exists()


def test_strip_set_on_a_checkpoint_with_retired_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An old checkpoint's retired keys (``eval.tta``, the ``monitor`` section, ``data.register_val``) are dropped, not
    refused, when ``strip --set`` re-validates its config (v0.8 failed with ``eval.tta: unknown key`` on both bundled
    checkpoints); an override that names one is refused, saying why."""
    cfg = config_from_dict({"model": TINY}).to_dict()
    cfg["eval"]["tta"] = "d8"
    cfg["monitor"] = {"min_layers": 2, "z_warn": 5.5}
    cfg["data"]["register_val"] = False
    state = build_model(config_from_dict({"model": TINY}).model, len(DEEPPCB_CLASSES)).state_dict()
    src = tmp_path / "old.pt"
    torch.save({"model": state, "config": cfg, "class_names": list(DEEPPCB_CLASSES)}, src)
    out = tmp_path / "new.pt"
    assert main(["strip", str(src), "--out", str(out), "--set", "eval.f1_conf=0.35"]) == 0, capsys.readouterr().err
    stored = torch.load(out, weights_only=True)["config"]
    assert "tta" not in stored["eval"] and "monitor" not in stored and stored["eval"]["f1_conf"] == 0.35
    assert "register_val" not in stored["data"] and load_checkpoint(src).config == config_from_dict({"model": TINY})
    assert main(["strip", str(src), "--out", str(out), "--set", "data.register_val=true"]) == 2
    assert "data.register_val: retired (issue 43: validation during training always registers" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["deeppcb.pt", "deeppcb_ref.pt", "photo_ref.pt"])  # each stores data.register_val
def test_strip_set_on_the_bundled_weights(name: str, tmp_path: Path) -> None:
    from defect_detector.model.checkpoint import DEFAULT_WEIGHTS

    out = tmp_path / name
    assert main(["strip", str(DEFAULT_WEIGHTS.with_name(name)), "--out", str(out), "--set", "eval.f1_conf=0.45"]) == 0
    loaded = load_checkpoint(out)
    assert loaded.config.eval.f1_conf == 0.45 and loaded.baseline is not None  # the baseline is kept


class _Foreign:
    """A Python object a checkpoint of this package never holds (weights_only refuses to unpickle it)."""


def test_a_pickled_object_is_refused_in_one_line_that_does_not_suggest_unsafe_loading(tmp_path: Path, capsys) -> None:
    from defect_detector.cli.main import main
    from defect_detector.model.checkpoint import load_checkpoint

    path = tmp_path / "foreign.pt"
    torch.save({"model": {}, "config": {}, "payload": _Foreign()}, path)
    with pytest.raises(ValueError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert message.startswith(f"{path}: refused: it holds Python code (a pickled ") and "_Foreign" in message and "\n" not in message
    assert "weights_only=False" not in message and len(message) - len(str(path)) < 260  # it was 654 characters, suggesting that
    assert main(["predict", str(tmp_path), "--weights", str(path)]) == 2
    assert "weights_only" not in capsys.readouterr().err
    evil = tmp_path / "evil.pt"
    torch.save({"model": _Foreign}, evil)  # a callable: loading it could run code
    args = ["train", "--config", str(CONFIGS / "finetune_ref.yaml"), f"train.init_weights={evil}", f"out_dir={tmp_path}"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"defect-detector train: error: train.init_weights={evil}: refused: it holds Python code") and "\n" not in err
    path.write_bytes(b"\x80\x02garbage that is no pickle")
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        load_checkpoint(path)


TAUGHT = [{"name": "photo.png", "key": "image:0123456789abcdef"}, {"name": "other.png", "key": "image:fedcba9876543210"}]


def test_strip_keeps_what_teach_taught_and_every_meta_carries_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint's ``taught`` list (the designs ``teach`` taught it, issue 34) survives ``strip`` and goes into the
    meta of every artifact; weights without one have [] in both."""
    from defect_detector.export.deploy_model import DeployModel, checkpoint_meta
    from defect_detector.export.meta import parse_meta

    source = _small_checkpoint(tmp_path / "a.pt", 1)
    plain = load_checkpoint(source)
    assert plain.taught == [] and checkpoint_meta(plain, DeployModel(plain.model, 64))["taught"] == []
    ckpt = torch.load(source, weights_only=True)
    torch.save(ckpt | {"taught": TAUGHT}, tmp_path / "taught.pt")
    assert main(["strip", str(tmp_path / "taught.pt"), "--out", str(tmp_path / "stripped.pt")]) == 0
    assert "taught designs: 2 kept from the input (photo.png, other.png)" in capsys.readouterr().out
    stripped = load_checkpoint(tmp_path / "stripped.pt")
    assert stripped.taught == TAUGHT and torch.load(tmp_path / "stripped.pt", weights_only=True)["taught"] == TAUGHT
    meta = checkpoint_meta(stripped, DeployModel(stripped.model, 64))
    assert meta["taught"] == TAUGHT and parse_meta("w.pt", json.dumps(meta))["taught"] == TAUGHT
    assert "taught" not in average_checkpoints([tmp_path / "stripped.pt", source])  # a soup is another model: none


@pytest.mark.parametrize(
    "bad",
    [
        "photo.png",
        {"name": "photo.png", "key": "image:0"},
        [{"name": "photo.png"}],
        [{"name": "photo.png", "key": 3}],
        [["photo.png", "image:0"]],
        [TAUGHT[0], None],
        [{"name": "photo.png", "key": "image:0", "conf": 1.5}],
        [{"name": "photo.png", "key": "image:0", "conf": "0.3"}],
    ],
)
def test_a_bad_taught_entry_is_one_line(tmp_path: Path, bad: object) -> None:
    path = tmp_path / "bad.pt"
    torch.save(torch.load(_small_checkpoint(tmp_path / "a.pt", 1), weights_only=True) | {"taught": bad}, path)
    with pytest.raises(ValueError) as caught:
        load_checkpoint(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: 'taught' entry must be a list of {{'name': str, 'key': str, 'conf': float in [0, 1]")
    assert "\n" not in message
    assert len(message) - len(str(path)) < 260  # one line, whatever the temporary folder's name


def test_strip_fits_one_design_domain_on_several_sources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``strip --domain A --domain B`` fits one design domain on the golden images of both (a golden image both name
    counts once), not only on the last one."""
    samples = Path(__file__).resolve().parents[2] / "data" / "samples"
    source = _small_checkpoint(tmp_path / "a.pt", 1)
    calib, golden = samples / "calib" / "calib.json", samples / "golden"
    both = tmp_path / "both.pt"
    args = ["strip", str(source), "--domain", str(calib), "--domain", str(golden), "--domain", str(golden / "50600000_test.jpg")]
    assert main([*args, "--out", str(both)]) == 0
    assert f"design domain: fitted on 23 golden images of {calib}, {golden}, {golden / '50600000_test.jpg'}" in capsys.readouterr().out
    assert load_checkpoint(both).domain["fitted_on"] == 15 + 8
    for one, count in ((calib, 15), (golden, 8)):
        assert main(["strip", str(source), "--domain", str(one), "--out", str(tmp_path / "one.pt")]) == 0
        assert load_checkpoint(tmp_path / "one.pt").domain["fitted_on"] == count
    assert main(["strip", str(source), "--domain", str(calib), "--domain", str(tmp_path / "none"), "--out", str(tmp_path / "bad.pt")]) == 2
    assert "golden images not found" in capsys.readouterr().err and not (tmp_path / "bad.pt").exists()


def test_strip_scale_fits_the_validated_scale_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``strip --scale GOLDEN`` reads the scale the weights were validated at on those golden images alone and keeps
    the rest of the look domain (``photo_ref.pt``: looks of zoomed renders, validated down to DeepPCB's scale); weights
    without a domain are refused in one line."""
    samples = Path(__file__).resolve().parents[2] / "data" / "samples"
    source = _small_checkpoint(tmp_path / "a.pt", 1)
    assert main(["strip", str(source), "--scale", str(samples / "golden"), "--out", str(tmp_path / "bad.pt")]) == 2
    assert "no design domain to carry a scale range" in capsys.readouterr().err and not (tmp_path / "bad.pt").exists()
    looks = tmp_path / "looks.pt"
    assert main(["strip", str(source), "--domain", str(samples / "calib" / "calib.json"), "--out", str(looks)]) == 0
    coarse = tmp_path / "coarse"
    coarse.mkdir()
    for path in sorted((samples / "golden").glob("*.jpg"))[:3]:
        image = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
        assert cv2.imwrite(str(coarse / f"{path.stem}.png"), cv2.resize(image, None, fx=2, fy=2, interpolation=cv2.INTER_LINEAR))
    out = tmp_path / "scaled.pt"
    assert main(["strip", str(looks), "--scale", str(coarse), "--out", str(out)]) == 0
    assert "validated scale: fitted on 3 golden images" in capsys.readouterr().out
    before, after = load_checkpoint(looks).domain, load_checkpoint(out).domain
    assert after["scale_range"]["fitted_on"] == 3 and after["scale_range"]["detail"] == 2.0 != before["scale_range"]["detail"]
    assert {k: v for k, v in after.items() if k != "scale_range"} == {k: v for k, v in before.items() if k != "scale_range"}
