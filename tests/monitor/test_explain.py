"""monitor/explain.py: the fault an alert's change looks like, and what moved."""

from __future__ import annotations

import numpy as np
import pytest

from defect_detector.core.config import MonitorConfig
from defect_detector.monitor.baseline import calibrate
from defect_detector.monitor.drift import DriftDetector
from defect_detector.monitor.explain import HINTS, UNKNOWN_HINT, describe, hint

LAYERS = [f"layer{i}" for i in range(4)]
DIRECTIONS = {  # how each simulated fault moves the 8 statistics, in units of their spread
    "defocus": [0, -3, 0, -2, 0, -1, 0, -1],
    "contrast_loss": [-3, -3, 0, -1, -1, -1, 0, -2],
    "lighting_drop": [-2, -1, 3, 0, 0, 1, 0, -2],
    "salt_and_pepper": [1, 1, 1, 1, 3, 1, 2, 3],
}


@pytest.fixture(scope="module")
def detector() -> DriftDetector:
    rng = np.random.default_rng(0)
    frames = rng.normal([[1.0, 0.5]] * len(LAYERS), 0.1, size=(300, len(LAYERS), 2))
    clean = frames[:64]
    faults = {"clean": clean}
    for name, direction in DIRECTIONS.items():
        moved = clean + 0.1 * np.asarray(direction, float).reshape(len(LAYERS), 2)
        faults[name] = moved + rng.normal(0, 0.01, size=moved.shape)
    baseline = calibrate([frames], LAYERS, faults=faults, space="linear")
    return DriftDetector(baseline, MonitorConfig(layers=("layer*",)))


@pytest.mark.parametrize("fault", list(DIRECTIONS))
def test_each_fault_direction_is_named_whatever_its_strength(detector: DriftDetector, fault: str) -> None:
    direction = np.asarray(DIRECTIONS[fault], float).reshape(len(LAYERS), 2)
    for strength in (0.5, 1.0, 3.0):  # in scale units: the feature is a direction, so strength does not matter
        assert detector.classifier.classify(direction * strength) == fault


def test_a_change_unlike_every_fault_is_unknown(detector: DriftDetector) -> None:
    other = np.array([0, 0, 0, 0, 0, 0, 3.0, 0]).reshape(len(LAYERS), 2)  # stage-3 mean alone: no simulated fault does that
    assert detector.classifier.classify(other) is None
    assert hint(None) == UNKNOWN_HINT


def test_hints_differ_per_fault_in_the_documented_order() -> None:
    assert list(HINTS) == ["defocus", "contrast_loss", "lighting_drop", "salt_and_pepper"]
    assert len(set(HINTS.values())) == 4
    assert "focus" in HINTS["defocus"] and "contrast" in HINTS["contrast_loss"]
    assert "lighting" in HINTS["lighting_drop"] and "noise" in HINTS["salt_and_pepper"]


@pytest.mark.parametrize(
    ("z", "text"),
    [
        (((5.0, 0.2), (4.0, 0.1)), "mean activation rose"),
        (((-6.0, 0.0), (-2.0, 0.3)), "mean activation fell"),
        (((0.1, -6.0), (0.2, -3.0)), "activation contrast (std) fell"),
        (((0.0, 0.5), (0.3, 0.4)), "activation contrast (std) rose"),
    ],
)
def test_describe_names_the_statistic_and_direction(z: tuple, text: str) -> None:
    z = np.array(z)
    statistic, members, said = describe(z, z * 0.05, [0, 1])
    assert said.startswith(f"the model's {text}"), said
    assert members and all(abs(z[i, statistic]) > 0 for i in members)
    assert said.endswith("in 1 layer" if len(members) == 1 else f"in {len(members)} layers")
