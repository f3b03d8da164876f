"""core/limits.py: every limit of the prepare stage in one typed model, its defaults the config's, a design's own over it."""

from __future__ import annotations

import pytest

from defect_detector.core.config import Config
from defect_detector.core.config_register import RegisterConfig
from defect_detector.core.limits import ExposureLimits, Limits, PhotometricLimits
from defect_detector.core.typed_yaml import ConfigError


def test_the_limits_of_a_default_config_are_the_defaults_and_a_config_sets_its_own() -> None:
    assert Limits.of_config(Config()) == Limits()
    cfg = Config.from_raw({"eval": {"exposure_min_light": 0.4, "hidden_max_area": None}, "register": {"max_slivers": 0.1}})
    limits = Limits.of_config(cfg)
    assert limits.exposure == ExposureLimits(min_light=0.4) and limits.hidden_max_area is None
    assert limits.register == RegisterConfig(max_slivers=0.1) and limits.photometric == PhotometricLimits()


def test_a_design_sets_only_its_own_keys_over_the_weights() -> None:
    weights = Limits.of_config(Config.from_raw({"register": {"max_shift": 30.0}}))
    design = weights.for_design({"photometric": {"max_gain": 0.4}, "register": {"max_spread": 0.3}})
    assert design.photometric.max_gain == 0.4 and design.photometric.max_gamma == PhotometricLimits().max_gamma
    assert design.register.max_spread == 0.3 and design.register.max_shift == 30.0  # the weights' own, kept
    assert weights.changed(design) == {"photometric": {"max_gain": 0.4}, "register": {"max_spread": 0.3}}
    assert weights.for_design(None) is weights and weights.for_design({}) is weights


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"photometric": {"max_gane": 0.4}},
            "limits.photometric.max_gane: unknown key (known: max_gain, max_gamma, max_light_range, max_offset)",
        ),
        ({"register": {"max_spread": 2}}, "limits.register.max_spread: must be in [0, 1], got 2"),
        ({"hidden_max_area": "most"}, "limits.hidden_max_area: must be a number, got 'most'"),
        (["max_gain"], "limits: must be a mapping of the keys a design sets, got list"),
    ],
)
def test_a_bad_design_limit_is_one_line_naming_its_key(overrides: object, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Limits().for_design(overrides)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_the_photometric_envelope_widens_with_its_limits() -> None:
    narrow, wide = PhotometricLimits().envelope([128.0]), PhotometricLimits(max_gain=0.5, max_offset=30.0).envelope([128.0])
    assert wide[0][0] < narrow[0][0] < 128.0 < narrow[1][0] < wide[1][0]
