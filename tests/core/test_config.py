from pathlib import Path

import pytest
import yaml

from defect_detector.core.config import Config, ConfigError, apply_overrides, config_from_dict, load_config, save_config, without_retired

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_defaults_are_valid_and_round_trip() -> None:
    assert config_from_dict(Config().to_dict()) == Config() == load_config(None)


def _leaves(raw: dict, prefix: str = "") -> dict[str, object]:
    """``{"section.key": value}`` of a nested YAML mapping (lists as they are)."""
    out: dict[str, object] = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_load_with_every_value_they_set(path: Path, tmp_path: Path) -> None:
    cfg = load_config(path)
    written = _leaves(yaml.safe_load(path.read_text()))
    loaded = _leaves(cfg.to_dict())
    assert written, f"{path.name} sets nothing"
    for key, value in written.items():  # each value the YAML sets is the one the config holds (none dropped or coerced away)
        assert loaded[key] == value, key
    save_config(cfg, tmp_path / "saved.yaml")
    assert load_config(tmp_path / "saved.yaml").to_dict() == cfg.to_dict()  # what a run folder records loads back the same


def test_unknown_key_is_named() -> None:
    with pytest.raises(ConfigError, match=r"^train\.epoch: unknown key"):
        config_from_dict({"train": {"epoch": 3}})


def test_unknown_top_level_key_is_named() -> None:
    with pytest.raises(ConfigError, match=r"^modle: unknown key"):
        config_from_dict({"modle": {}})


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"train": {"lr": -1.0}}, r"train\.lr"),
        ({"train": {"epochs": "ten"}}, r"train\.epochs"),
        ({"data": {"imgsz": 100}}, r"data\.imgsz"),
        ({"augment": {"hflip": 1.5}}, r"augment\.hflip"),
        ({"model": {"widths": [16, 32, 48]}}, r"model\.widths"),
        ({"model": {"head_box_convs": 0}}, r"model\.head_box_convs"),
        ({"train": {"amp": "fp8"}}, r"train\.amp"),
        ({"train": {"freeze": [""]}}, r"train\.freeze"),
        ({"data": {"class_names": ["a", "a"]}}, r"data\.class_names"),
        ({"augment": {"invert_negatives": 1.5}}, r"augment\.invert_negatives"),
        ({"eval": {"tta": "d8"}}, r"eval\.tta"),
    ],
)
def test_bad_values_are_named(raw: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{key}"):
        config_from_dict(raw)


def test_overrides_parse_yaml_scalars() -> None:
    raw = apply_overrides({"train": {"epochs": 1}}, ["train.epochs=5", "train.lr=1e-3", "data.class_names=[a, b]"])
    cfg = config_from_dict(raw)
    assert cfg.train.epochs == 5 and cfg.train.lr == pytest.approx(1e-3) and cfg.data.class_names == ("a", "b")


def test_override_without_equals_fails() -> None:
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["train.epochs"])


def test_save_then_load_round_trips(tmp_path: Path) -> None:
    cfg = config_from_dict({"name": "x", "train": {"epochs": 7}, "model": {"widths": [16, 32, 64, 128]}})
    save_config(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["train"]["epochs"] == 7


def test_malformed_yaml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [unclosed")
    with pytest.raises(ConfigError, match="malformed YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- data\n- train\n", "the config must be a mapping of sections (data:, train:, ...), got a list"),
        ("just a string\n", "the config must be a mapping of sections (data:, train:, ...), got a str"),
        ("", "the config file is empty (a run needs at least data.train; see configs/default.yaml)"),
        ("# only a comment\n", "the config file is empty (a run needs at least data.train; see configs/default.yaml)"),
        (
            "train:\n  lr: 0.01\n  epochs: 3\n  lr: 0.1\n",
            "line 4: duplicate key 'lr' (first set at line 2; YAML would keep only the last)",
        ),
        ("train:\n  epochs: 3\ntrain:\n  lr: 0.1\n", "line 3: duplicate key 'train' (first set at line 1; YAML would keep only the last)"),
        (b"train:\n  name: \xff\n", "cannot read config file: 'utf-8' codec can't decode"),
    ],
    ids=["list", "scalar", "empty", "comment-only", "duplicate-key", "duplicate-section", "not-utf8"],
)
def test_a_config_that_is_no_mapping_empty_or_repeats_a_key_is_one_line(tmp_path: Path, text: str | bytes, problem: str) -> None:
    path = tmp_path / "run.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    for overrides in ([], ["train.lr=0.01"]):  # a list with any key=value was a traceback
        with pytest.raises(ConfigError) as info:
            load_config(path, overrides)
        message = str(info.value)
        assert message.startswith(f"{path}: {problem}") and "\n" not in message


def test_a_repeated_key_in_a_monitor_config_is_refused(tmp_path: Path) -> None:
    from defect_detector.monitor.setup import MonitorSetupError, load_monitor_config

    (tmp_path / "m.yaml").write_text("window: 4\nwindow: 8\n")
    with pytest.raises(MonitorSetupError, match=r"m\.yaml: line 2: duplicate key 'window'"):
        load_monitor_config(tmp_path / "m.yaml")
    (tmp_path / "empty.yaml").write_text("")
    assert load_monitor_config(tmp_path / "empty.yaml").window > 0  # empty: the default thresholds, as before
    (tmp_path / "bad.yaml").write_text("monitor:\n  z_warn: 9.0\n")
    with pytest.raises(MonitorSetupError, match=r"bad\.yaml: monitor\.z_warn: must be > 0 and <= monitor\.z_alert, got 9\.0"):
        load_monitor_config(tmp_path / "bad.yaml")


@pytest.mark.parametrize(
    ("item", "problem"),
    [("train.lr=[0.1", "train.lr=[0.1: the value is not valid YAML"), (".lr=1", ".lr=1: override key must be a dotted name")],
)
def test_a_malformed_override_is_one_line(item: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        apply_overrides({}, [item])
    assert str(info.value).startswith(problem) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"train": {"lr": "fast"}}, "train.lr: must be a number, got 'fast'"),
        ({"train": {"epochs": 3.0}}, "train.epochs: must be an integer, got 3.0"),
        ({"data": {"register_train": "yes"}}, "data.register_train: must be true or false, got 'yes'"),
        ({"model": {"widths": [32, 64, True, 192]}}, "model.widths[2]: must be an integer, got True"),
        ({"model": {"widths": [16, 32, 48]}}, "model.widths: has too few items, got [16, 32, 48]"),
        ({"data": {"class_names": "open"}}, "data.class_names: must be a list, got 'open'"),
        ({"train": 5}, "train: must be a mapping, got 5"),
        ({"name": "a/b"}, "name: must be a non-empty name without '/', got 'a/b'"),
        (
            {"eval": {"tta2": "d8"}},
            "eval.tta2: unknown key (known: conf, cross_class_factor, cross_class_iou, exposure_max_clipped, exposure_max_highlights, "
            "exposure_max_midtones, exposure_min_contrast, exposure_min_light, f1_conf, hidden_max_area, max_det, merge_ios, nms_iou)",
        ),
    ],
)
def test_an_error_is_one_line_naming_the_dotted_key_and_the_value(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"register": {"max_shift": float("inf")}}, "register.max_shift"),
        ({"train": {"max_minutes": float("inf")}}, "train.max_minutes"),
        ({"train": {"grad_clip": float("inf")}}, "train.grad_clip"),
        ({"train": {"grad_clip": float("nan")}}, "train.grad_clip"),
        ({"eval": {"hidden_max_area": float("nan")}}, "eval.hidden_max_area"),
        ({"augment": {"ref_shift": float("inf")}}, "augment.ref_shift"),
    ],
)
def test_an_infinite_or_nan_limit_is_refused_naming_its_key(raw: dict, key: str) -> None:
    """Issue 58: ``.inf`` as a limit switches its check off (a registration that allows any shift); every float of every
    section must be finite."""
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    value = next(iter(next(iter(raw.values())).values()))
    assert str(info.value) == f"{key}: must be a finite number, got {value!r}"
    with pytest.raises(ConfigError, match=rf"^{key}: must be a finite number"):  # a YAML override alike
        load_config(None, [f"{key}={'.inf' if value == float('inf') else '.nan'}"])


@pytest.mark.parametrize("value", [".inf", ".nan"])
def test_a_monitor_config_with_an_infinite_or_nan_alert_level_names_it(tmp_path: Path, value: str) -> None:
    """Issue 58: ``z_alert: .inf`` turned every ``pass_suspect`` into ``pass``; ``.nan`` was reported as ``z_warn``."""
    from defect_detector.monitor.setup import MonitorSetupError, load_monitor_config

    (tmp_path / "m.yaml").write_text(f"monitor:\n  z_alert: {value}\n")
    with pytest.raises(MonitorSetupError, match=r"m\.yaml: monitor\.z_alert: must be a finite number, got (inf|nan)$"):
        load_monitor_config(tmp_path / "m.yaml")


def test_a_retired_key_in_a_config_or_an_override_stops_at_start_saying_why(tmp_path: Path) -> None:
    """Issue 43: ``data.register_val`` is retired (training-time validation always registers); naming it is an error
    that says so, where an unknown key would only list the known ones."""
    why = "data.register_val: retired (issue 43: validation during training always registers, through the frame pipeline); remove it"
    path = tmp_path / "old.yaml"
    path.write_text("data:\n  train: t.json\n  register_val: false\n")
    for config, overrides in ((path, []), (None, ["data.register_val=true"])):
        with pytest.raises(ConfigError) as info:
            load_config(config, overrides)
        assert str(info.value) == why
    with pytest.raises(ConfigError, match=r"^eval\.tta: retired \(v0\.8\.0: test-time augmentation is asked for per command"):
        config_from_dict({"eval": {"tta": "d8"}})
    with pytest.raises(ConfigError, match=r"^monitor: retired \(issue 43: drift thresholds are not a training setting"):
        load_config(None, ["monitor.z_warn=4"])  # nothing read a training config's monitor section


def test_a_checkpoint_config_drops_its_retired_keys(caplog: pytest.LogCaptureFixture) -> None:
    raw = Config().to_dict()
    raw["data"]["register_val"] = False
    raw["monitor"] = {"z_warn": 5.5, "recover": 16}  # the bundled weights store a monitor section
    with caplog.at_level("DEBUG", logger="defect_detector.config"):
        kept = without_retired(raw, "old.pt")
    assert config_from_dict(kept) == Config() and "register_val" in raw["data"]  # the caller's dict is left alone
    assert [r.levelname for r in caplog.records] == ["DEBUG", "DEBUG"]
    assert "old.pt: dropped the retired config key data.register_val" in caplog.text
    assert "monitor" in raw and "old.pt: dropped the retired config key monitor (" in caplog.text


def test_default_yaml_states_the_code_defaults() -> None:
    """``configs/default.yaml`` is the template a newcomer copies: every key it sets has the value ``Config()`` has,
    but for the run's name and the data it points at (``train.epochs`` 60 / ``train.lr`` 0.004 drifted from 30 / 2e-3)."""
    own = {"name", "data.train", "data.val"}
    written = _leaves(yaml.safe_load((CONFIGS / "default.yaml").read_text()))
    defaults = _leaves(Config().to_dict())
    differ = {k: (v, defaults.get(k)) for k, v in written.items() if k not in own and v != defaults.get(k)}
    assert written.keys() > own and not differ


def test_a_section_built_from_keywords_names_its_section() -> None:
    from defect_detector.core.config import ModelConfig, TrainConfig

    with pytest.raises(ConfigError, match=r"^train\.lr: must be finite and > 0, got -1\.0$"):
        TrainConfig(lr=-1.0)
    with pytest.raises(ConfigError, match=r"^model\.widht: unknown key \(known: blocks, box_head, depths, "):
        ModelConfig(widht=(32, 64, 128, 192))
    assert TrainConfig(lr=1).lr == 1.0 and isinstance(TrainConfig(lr=1).lr, float)  # an integer where a number is asked for
    assert TrainConfig(lr="1e-3").lr == pytest.approx(1e-3)  # YAML 1.1 reads 1e-3 (no dot) as a string
