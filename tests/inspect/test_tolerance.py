"""A design's tolerance map (inspect/tolerance.py): learnt places in golden-image pixels, applied to that design only."""

from pathlib import Path

import numpy as np
import pytest
import torch

from defect_detector.align.mapping import Mapping, identity_mapping
from defect_detector.core.types import Detections
from defect_detector.data.images import load_image_gray, pixel_fingerprint
from defect_detector.inspect.inspector import Inspector
from defect_detector.inspect.runtime import Runtime
from defect_detector.inspect.tolerance import (
    TOLERANCE_CAP,
    TOLERANCE_MARGIN,
    TOLERANCE_RADIUS,
    Tolerance,
    apply_tolerance,
    in_golden,
    learn_places,
    left_out_scores,
    tolerated,
)
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, load_checkpoint

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
PLACE = Tolerance(np.array([[100.0, 100.0, 0.4]]))


def _calls(centres: list[tuple[float, float]], scores: list[float]) -> Detections:
    """Detections of 20x20 px boxes centred at ``centres`` (frame px), best first."""
    boxes = torch.tensor([[x - 10, y - 10, x + 10, y + 10] for x, y in centres], dtype=torch.float32).reshape(-1, 4)
    n, labels = len(scores), torch.zeros(len(scores), dtype=torch.int64)
    return Detections(boxes, torch.tensor(scores, dtype=torch.float32), labels, ["short"] * n, torch.zeros(4, 2), {}, None)


def test_a_call_at_a_place_must_beat_its_score_by_the_margin_and_the_cap_always_counts() -> None:
    centres = np.array([[110.0, 100.0], [110.0, 100.0], [100.0, 150.0], [100.0, 100.0], [100.0, 100.0 + TOLERANCE_RADIUS + 1]])
    scores = np.array([0.42, 0.45, 0.2, TOLERANCE_CAP, 0.2])
    # inside at 0.42 <= 0.4 + 0.03: dropped; 0.45 beats it: kept; 50 px off at 0.2: dropped; at the cap: kept; outside: kept
    assert tolerated(centres, scores, PLACE).tolist() == [True, False, True, False, False]
    strong = Tolerance(np.array([[100.0, 100.0, 0.95]]))  # a good board's glint above the cap still silences nothing above it
    assert tolerated(np.array([[100.0, 100.0]]), np.array([0.93]), strong).tolist() == [False]
    assert tolerated(np.zeros((0, 2)), np.zeros(0), PLACE).tolist() == []
    assert PLACE.radius == TOLERANCE_RADIUS == 60.0 and PLACE.margin == TOLERANCE_MARGIN == 0.03


def test_places_merge_within_the_radius_keeping_the_best_score() -> None:
    boards = [np.array([[100.0, 100.0], [400.0, 400.0]]), np.array([[130.0, 100.0]]), np.array([[100.0, 200.0]])]
    scores = [np.array([0.3, 0.2]), np.array([0.5]), np.array([0.1])]
    places = learn_places(boards, scores)
    assert places.tolist() == [[130.0, 100.0, 0.5], [400.0, 400.0, 0.2], [100.0, 200.0, 0.1]]
    every = tolerated(np.concatenate(boards), np.concatenate(scores), Tolerance(places))
    assert every.all()  # every good-board call lies at a place scoring at least its own
    assert learn_places([], []).shape == (0, 3)


def test_the_place_is_in_golden_pixels_and_the_call_in_the_frames() -> None:
    """A board moved by (200, 100) px: the golden image's (100, 100) is the frame's (300, 200)."""
    moved = Mapping(np.array([[1.0, 0.0, 200.0], [0.0, 1.0, 100.0]]), (512, 512))
    calls = _calls([(300.0, 200.0), (100.0, 100.0)], [0.3, 0.3])
    assert np.allclose(in_golden(calls.boxes, moved), [[100.0, 100.0], [-100.0, 0.0]])
    kept = apply_tolerance(calls, moved, PLACE)
    assert kept.boxes.tolist() == [[90.0, 90.0, 110.0, 110.0]] and kept.tolerated == 1
    unmoved = apply_tolerance(calls, identity_mapping((512, 512)), PLACE)  # the same calls on an unmoved board
    assert unmoved.boxes.tolist() == [[290.0, 190.0, 310.0, 210.0]] and unmoved.tolerated == 1


def test_leave_one_out_keeps_the_calls_the_other_boards_do_not_tolerate() -> None:
    centres = [np.array([[100.0, 100.0]]), np.array([[105.0, 100.0]]), np.array([[400.0, 400.0], [100.0, 100.0]])]
    scores = [np.array([0.3]), np.array([0.35]), np.array([0.5, 0.2])]
    # board 0: 0.3 under board 1's 0.35; board 1: 0.35 over board 0's 0.3 + 0.03 -> kept (board 2's 0.2 place too low);
    # board 2: (400, 400) seen on no other board -> kept; its 0.2 at (100, 100) lies under the others' 0.35
    left = left_out_scores(centres, scores)
    assert [s.tolist() for s in left] == [[], [0.35], [0.5]]


def test_a_bad_tolerance_map_is_one_line_and_a_good_one_loads(tmp_path: Path) -> None:
    start = torch.load(DEFAULT_REFERENCE_WEIGHTS, map_location="cpu", weights_only=True)
    entry = {"name": "a.png", "key": "image:a", "conf": 0.3} | PLACE.to_entry()
    good = tmp_path / "good.pt"
    torch.save(start | {"taught": [entry]}, good)
    assert load_checkpoint(good).taught == [entry]
    rejected = {"rejected": [[5.0, 6.0, 0.5]], "rejected_radius": 20.0}  # operators' rejections (jobs/rejections.py)
    torch.save(start | {"taught": [entry | rejected]}, good)
    assert load_checkpoint(good).taught == [entry | rejected]
    broken = ({"tolerance": [[1.0, 2.0, 1.5]]}, {"tolerance_radius": -1.0}, {"tolerance_margin": None}, {"tolerance": "x"})
    broken += ({"rejected": [[5.0, 6.0, 0.5]]}, rejected | {"rejected": [[5.0, float("nan"), 0.5]]}, rejected | {"rejected_radius": 0.0})
    for bad in broken:
        path = tmp_path / "bad.pt"
        torch.save(start | {"taught": [entry | bad]}, path)
        with pytest.raises(ValueError) as caught:
            load_checkpoint(path)
        message = str(caught.value)
        assert message.startswith(f"{path}: 'taught' entry of a.png: its tolerance map must be") and "\n" not in message


def test_a_stored_tolerance_applies_to_its_designs_frames_only(tmp_path: Path) -> None:
    """Places at design A's calls (learnt from A's own frame, as good boards would be) quieten A's calls below the cap,
    counted in the record; design B's frame keeps its calls; an explicit conf inspects without it."""
    boards = sorted((SAMPLES / "deeppcb").glob("*.jpg"))[:2]
    frames = [load_image_gray(b) for b in boards]
    key_a = pixel_fingerprint(load_image_gray(SAMPLES / "golden" / boards[0].name))

    def inspect(weights: Path, conf: float | None = None) -> list:
        with Inspector.load(weights, reference=SAMPLES / "golden", device="cpu", threads=1, monitor=False, conf=conf) as inspector:
            return [inspector.inspect(image, name=b.name) for b, image in zip(boards, frames)]

    plain = inspect(DEFAULT_REFERENCE_WEIGHTS)
    calls_a = plain[0].detections
    scores_a = calls_a.scores.double().numpy()
    assert len(plain[1].detections) > 0 and (scores_a < TOLERANCE_CAP).any()
    places = learn_places([in_golden(calls_a.boxes, plain[0].registration.mapping)], [scores_a])
    start = torch.load(DEFAULT_REFERENCE_WEIGHTS, map_location="cpu", weights_only=True)
    weights = tmp_path / "tolerant_a.pt"
    torch.save(start | {"taught": [{"name": boards[0].name, "key": key_a} | Tolerance(places).to_entry()]}, weights)
    stored = torch.load(weights, map_location="cpu", weights_only=True)["taught"][0]
    assert stored["tolerance_radius"] == TOLERANCE_RADIUS and len(stored["tolerance"]) == len(places)
    assert set(Runtime.load(weights, device="cpu").design_tolerances) == {key_a}

    tolerant = inspect(weights)
    quiet = int((scores_a < TOLERANCE_CAP).sum())
    assert tolerant[0].detections.scores.tolist() == [s for s in calls_a.scores.tolist() if s >= TOLERANCE_CAP]
    assert tolerant[0].detections.tolerated == quiet and tolerant[0].to_json()["tolerated"] == quiet
    assert tolerant[1].detections.scores.tolist() == plain[1].detections.scores.tolist() and tolerant[1].to_json()["tolerated"] == 0
    explicit = inspect(weights, conf=plain[0].conf)
    assert len(explicit[0].detections) == len(calls_a) and explicit[0].detections.tolerated == 0
