"""The design domain (issue 34 item 4): the look of a golden image, and a model of the training goldens' looks that
calls a photograph unlike binarized DeepPCB scans and stays silent on DeepPCB's held-out goldens."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from defect_detector.data.images import load_image_gray
from defect_detector.data.synth import generate_board_pair
from defect_detector.engine.domain import extend_domain, fit_domain, fit_domain_files, golden_paths
from defect_detector.monitor.domain import FEATURES, MAX_REFERENCES, MIN_THRESHOLD, DesignStats, DomainModel, design_stats

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def photograph(golden: np.ndarray, seed: int, levels: tuple[float, float, float] = (30.0, 57.0, 140.0)) -> np.ndarray:
    """A photograph-like render of a binarized golden image (copper dark): substrate, copper under the mask and pads
    (the copper's opening by a 15 px disc) at ``levels``, edges blurred (sigma 1.2 px), a light gradient, texture and
    sensor noise (sigma 3)."""
    rng = np.random.default_rng(seed)
    copper = (golden < 128).astype(np.uint8)
    pads = cv2.morphologyEx(copper, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (15, 15)))
    image = np.where(copper > 0, levels[1], levels[0]).astype(np.float32)
    image[pads > 0] = levels[2]
    image = cv2.GaussianBlur(image, (0, 0), 1.2)
    h, w = image.shape
    image *= np.linspace(0.9, 1.1, w, dtype=np.float32)[None, :]
    image += 3.0 * cv2.GaussianBlur(rng.normal(0, 3, (h, w)).astype(np.float32), (0, 0), 2.0)
    image += rng.normal(0, 3.0, (h, w)).astype(np.float32)
    return np.clip(image, 0, 255).round().astype(np.uint8)


@pytest.fixture(scope="module")
def deeppcb_domain() -> DomainModel:
    """Fitted on the 15 DeepPCB training goldens of data/samples/calib (groups 00041, 13000, 20085, 44000, 77000)."""
    return fit_domain_files(SAMPLES / "calib" / "calib.json")


def _held_out() -> list[np.ndarray]:
    """The 8 golden images of DeepPCB's held-out groups 50600 and 92000 (data/samples/golden)."""
    return [load_image_gray(p) for p in sorted((SAMPLES / "golden").glob("*.jpg"))]


def test_stats_tell_a_binarized_scan_from_a_photograph() -> None:
    golden = _held_out()[0]
    scan, photo = design_stats(golden), design_stats(photograph(golden, 0))
    assert scan.binary > 0.99 and scan.midtones < 0.01 and scan.contrast > 240 and scan.texture < 0.005 and scan.edge_width <= 2.2
    assert photo.binary < 0.9 and photo.contrast < 130 and photo.texture > 0.01 and photo.edge_width > 2.5
    assert not scan.flat and design_stats(np.full((64, 64), 255, np.uint8)).flat  # nothing to read on a white image


def test_track_width_is_in_the_original_pixels_of_a_large_image() -> None:
    golden = _held_out()[0]
    small = design_stats(golden).track_width
    big = design_stats(cv2.resize(golden, None, fx=3, fy=3, interpolation=cv2.INTER_NEAREST))  # 1920x1920: read downscaled
    assert big.track_width == pytest.approx(3 * small, rel=0.2) and big.binary > 0.95


def test_fires_on_photographs_and_is_silent_on_held_out_deeppcb_goldens(deeppcb_domain: DomainModel) -> None:
    assert deeppcb_domain.fitted_on == 15 and deeppcb_domain.threshold >= MIN_THRESHOLD
    held_out = _held_out()
    assert [deeppcb_domain.is_unlike(design_stats(g)) for g in held_out] == [False] * len(held_out)
    synthetic = [generate_board_pair(480, 640, np.random.default_rng(i))[1] for i in range(3)]  # data/synth.py goldens
    assert not any(deeppcb_domain.is_unlike(design_stats(g)) for g in synthetic)
    photos = [photograph(g, i) for i, g in enumerate(held_out)] + [photograph(held_out[0], 9, (60.0, 75.0, 90.0))]
    distances = [deeppcb_domain.distance(design_stats(p)) for p in photos]
    assert min(distances) > 2 * deeppcb_domain.threshold
    why = deeppcb_domain.explain(design_stats(photos[0]))
    assert "training at least" in why or "training at most" in why


def test_round_trip_and_bad_input(deeppcb_domain: DomainModel) -> None:
    data = deeppcb_domain.to_dict()
    assert len(json.dumps(data)) < 64_000 and data["features"] == list(FEATURES)
    again = DomainModel.from_dict(json.loads(json.dumps(data)))
    photo = design_stats(photograph(_held_out()[1], 1))
    assert again.distance(photo) == pytest.approx(deeppcb_domain.distance(photo), abs=1e-3)
    assert again.to_dict() == data
    with pytest.raises(ValueError, match=r"^meta\.json domain: threshold"):
        DomainModel.from_dict({**data, "threshold": -1}, where="meta.json domain")
    with pytest.raises(ValueError, match="features"):
        DomainModel.from_dict({**data, "features": ["contrast"] * len(FEATURES)})
    with pytest.raises(ValueError, match="at least 2"):
        DomainModel.fit([design_stats(_held_out()[0])])
    with pytest.raises(ValueError, match="uint8 gray"):
        design_stats(np.zeros((32, 32, 3), np.uint8))


def test_extend_teaches_a_new_look(deeppcb_domain: DomainModel) -> None:
    model = DomainModel.from_dict(deeppcb_domain.to_dict())
    photos = [design_stats(photograph(g, i)) for i, g in enumerate(_held_out()[:4])]
    assert all(model.is_unlike(s) for s in photos)
    assert model.extend(photos[:2] + [design_stats(np.zeros((64, 64), np.uint8))]) == 2  # the flat image is skipped
    assert model.distance(photos[0]) == pytest.approx(0.0, abs=1e-3) and not model.is_unlike(photos[2])  # the same look
    assert not model.is_unlike(design_stats(_held_out()[5]))  # DeepPCB still known
    assert len(DomainModel.from_dict(model.to_dict()).taught) == 2
    taught = extend_domain(deeppcb_domain.to_dict(), [photograph(_held_out()[0], 0)])  # what teach stores in its weights
    assert len(taught["taught"]) == 1 and not DomainModel.from_dict(taught).is_unlike(photos[0])
    assert extend_domain(None, [photograph(_held_out()[0], 0)]) is None and deeppcb_domain.taught.shape == (0, len(FEATURES))


def test_fit_is_deterministic_and_keeps_at_most_max_references() -> None:
    rng = np.random.default_rng(0)
    rows = np.column_stack([rng.uniform(0, 1, (400, 2)), rng.uniform(50, 255, 400), rng.uniform(0, 0.1, 400), rng.uniform(1, 5, 400)])
    stats = [DesignStats(*row, track_width=rng.uniform(3, 90)) for row in rows.tolist()]
    first, second = DomainModel.fit(stats), DomainModel.fit(list(stats))
    assert first.to_dict() == second.to_dict() and len(first.references) == MAX_REFERENCES
    assert not any(first.is_unlike(s) for s in stats)  # every training golden within the threshold (leave-one-out, margin)


def test_fit_domain_takes_any_iterable_and_golden_paths_reads_a_json_or_folder() -> None:
    paths = golden_paths(SAMPLES / "calib" / "calib.json")
    assert len(paths) == 15 and all(p.name.endswith("_temp.jpg") for p in paths)
    assert len(golden_paths(SAMPLES / "golden")) == 8
    model = fit_domain(load_image_gray(p) for p in paths[:4])
    assert model.fitted_on == 4
