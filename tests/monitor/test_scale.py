"""The scale an image shows its design at (``monitor/scale.py``; issue 44 item 4, issue 46 item 3): an upscaled board
reads its factor, a native or downscaled one 1.0; the validated range travels with the design domain."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from defect_detector.data.images import load_image_gray
from defect_detector.engine.domain import extend_domain, fit_domain
from defect_detector.monitor.domain import DomainModel
from defect_detector.monitor.scale import FLAT, ImageScale, ScaleRange, image_scale

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "samples" / "golden"


def _resized(image: np.ndarray, factor: float, interpolation: int = cv2.INTER_LINEAR) -> np.ndarray:
    return cv2.resize(image, None, fx=factor, fy=factor, interpolation=interpolation)


def test_an_upscaled_golden_image_reads_its_factor_and_a_native_or_downscaled_one_reads_1() -> None:
    for path in sorted(GOLDEN.glob("*.jpg"))[::3]:  # three designs: 50600000, 50600046, 92000061
        golden = load_image_gray(path)
        native = image_scale(golden)
        assert native.detail == 1.0 and not native.flat, path.name
        assert image_scale(_resized(golden, 2.0)).detail == 2.0, path.name
        assert image_scale(_resized(golden, 2.0, cv2.INTER_CUBIC)).detail >= 1.5, path.name
        assert image_scale(_resized(golden, 0.5, cv2.INTER_AREA)).detail == 1.0, path.name
    golden = load_image_gray(GOLDEN / "50600000_test.jpg")
    fine = image_scale(golden).fine_width
    assert 6.0 <= fine <= 14.0  # its narrowest gaps, ~10 px
    assert 1.6 * fine <= image_scale(_resized(golden, 2.0)).fine_width <= 2.4 * fine


def test_a_flat_image_has_no_reading_and_a_bad_one_is_refused() -> None:
    assert image_scale(np.full((64, 64), 200, np.uint8)) == FLAT
    with pytest.raises(ValueError, match="uint8 gray"):
        image_scale(np.zeros((64, 64), np.float32))


def test_the_validated_range_travels_with_the_domain_and_is_checked() -> None:
    goldens = [load_image_gray(p) for p in sorted(GOLDEN.glob("*.jpg"))]
    domain = fit_domain(goldens)
    assert domain.scale_range is not None and domain.scale_range.detail == 1.0 and domain.scale_range.fitted_on == 8
    raw = domain.to_dict()
    assert DomainModel.from_dict(raw).scale_range == ScaleRange.from_dict(raw["scale_range"])
    old = {k: v for k, v in raw.items() if k != "scale_range"}  # a domain fitted before: no scale, no check
    assert DomainModel.from_dict(old).scale_range is None and "scale_range" not in DomainModel.from_dict(old).to_dict()
    with pytest.raises(ValueError, match="scale_range.fine_width must be a finite number > 0"):
        DomainModel.from_dict(raw | {"scale_range": {"detail": 1.0, "fine_width": -1.0}})
    taught = extend_domain(raw, [_resized(goldens[0], 2.0)])  # a design taught at 2x is validated there
    assert taught["scale_range"]["detail"] == 2.0 and taught["scale_range"]["fine_width"] == raw["scale_range"]["fine_width"]
    assert ScaleRange.fit([FLAT, ImageScale(1.0, 5.0)]) is None
