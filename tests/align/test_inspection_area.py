"""A design's inspection area (align/inspection_area.py): the board, in golden-image pixels; stored with the design;
nothing off it is called or refuses a frame."""

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from defect_detector.align.inspection_area import MAX_POINTS, InspectionArea
from defect_detector.align.mapping import Mapping
from defect_detector.data.images import load_image_gray, pixel_fingerprint
from defect_detector.inspect.inspector import Inspector
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, load_checkpoint

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def _on_grey(image: np.ndarray, x: int, y: int, shape: tuple[int, int] = (900, 1100)) -> np.ndarray:
    canvas = np.full(shape, 128, np.uint8)
    canvas[y : y + image.shape[0], x : x + image.shape[1]] = image
    return canvas


def test_the_board_on_a_plain_background_is_the_area_and_a_board_filling_its_image_has_none() -> None:
    golden = _on_grey(load_image_gray(SAMPLES / "golden" / "50600017_test.jpg"), 230, 130)
    area = InspectionArea.of_board(golden)
    assert area is not None and len(area.polygons) == 1
    (x0, y0), (x1, y1) = area.polygons[0].min(axis=0), area.polygons[0].max(axis=0)
    assert abs(x0 - 230) <= 3 and abs(y0 - 130) <= 3 and abs(x1 - 869) <= 3 and abs(y1 - 769) <= 3
    assert area.mask()[450, 550] and not area.mask()[450, 1000] and area.share == pytest.approx(640 * 640 / (900 * 1100), abs=0.01)
    assert InspectionArea.of_board(load_image_gray(SAMPLES / "golden" / "50600017_test.jpg")) is None


def test_a_mask_gives_its_regions_simplified_and_refuses_one_marking_no_board() -> None:
    mask = np.zeros((400, 600), np.uint8)
    cv2.circle(mask, (150, 200), 120, 255, -1)  # a round board: its outline simplified to what is stored
    cv2.rectangle(mask, (350, 50), (550, 350), 1, -1)  # a second board of a panel, any non-zero level
    mask[5:8, 5:8] = 255  # a speck of the brush: no board
    area = InspectionArea.from_mask(mask)
    assert len(area.polygons) == 2 and sum(len(p) for p in area.polygons) <= MAX_POINTS
    assert area.mask()[200, 150] and area.mask()[200, 450] and not area.mask()[6, 6] and not area.mask()[200, 300]
    again = InspectionArea.from_entry(area.to_entry())
    assert again is not None and np.array_equal(again.mask(), area.mask()) and again.shape == (400, 600)
    with pytest.raises(ValueError, match=r"^m\.png: marks no board"):
        InspectionArea.from_mask(np.zeros((40, 60), np.uint8), "m.png")


def test_the_area_follows_the_frames_registration() -> None:
    area = InspectionArea((np.array([[10.0, 10.0], [49.0, 10.0], [49.0, 29.0], [10.0, 29.0]]),), (60, 80))
    moved = Mapping(np.array([[1.0, 0.0, 20.0], [0.0, 1.0, 5.0]]), (60, 80))  # golden px + (20, 5) = frame px
    inside = area.in_frame(moved, (70, 100))
    ys, xs = np.nonzero(inside)
    assert (xs.min(), xs.max(), ys.min(), ys.max()) == (30, 69, 15, 34)


def test_off_the_area_nothing_refuses_the_frame_or_is_called(tmp_path: Path) -> None:
    """A DeepPCB board on a grey frame with a dark clamp and a white label beside it: refused as a shadow over the
    frame without an area; with the board's area stored for its design it is inspected, its calls on the board only."""
    name = "50600017_test.jpg"
    golden = _on_grey(load_image_gray(SAMPLES / "golden" / name), 230, 130)
    frame = _on_grey(load_image_gray(SAMPLES / "deeppcb" / name), 236, 133)
    cv2.rectangle(frame, (900, 300), (1060, 600), 20, -1)
    cv2.rectangle(frame, (20, 50), (120, 90), 250, -1)
    assert cv2.imwrite(str(tmp_path / "golden.png"), golden)
    area = InspectionArea.of_board(golden)
    start = torch.load(DEFAULT_REFERENCE_WEIGHTS, map_location="cpu", weights_only=True)
    weights = tmp_path / "taught.pt"
    torch.save(start | {"taught": [{"name": "golden.png", "key": pixel_fingerprint(golden), "conf": 0.4} | area.to_entry()]}, weights)
    assert load_checkpoint(weights).taught[0]["area_shape"] == [900, 1100]
    records = {}
    for key, path in (("plain", DEFAULT_REFERENCE_WEIGHTS), ("area", weights)):
        with Inspector.load(path, reference=tmp_path / "golden.png", device="cpu", threads=1, monitor=False) as inspector:
            records[key] = inspector.inspect(frame, name="clamped.png")
    assert records["plain"].verdict.value == "not_inspected" and "x 990, y 450" in records["plain"].reason
    found = records["area"]
    assert found.verdict.value == "fail" and len(found.detections) > 0
    centres = found.detections.boxes.reshape(-1, 2, 2).mean(dim=1)
    assert bool(((centres[:, 0] > 236) & (centres[:, 0] < 876) & (centres[:, 1] > 133) & (centres[:, 1] < 773)).all())


def test_a_bad_area_in_the_weights_is_one_line(tmp_path: Path) -> None:
    start = torch.load(DEFAULT_REFERENCE_WEIGHTS, map_location="cpu", weights_only=True)
    entry = {"name": "a.png", "key": "image:a", "conf": 0.3}
    broken = ({"area": [[[1.0, 2.0], [3.0, 4.0]]], "area_shape": [10, 10]}, {"area": [[[0, 0], [5, 0], [5, 5]]]}, {"area_shape": [10, 0]})
    for bad in broken:
        torch.save(start | {"taught": [entry | bad]}, tmp_path / "bad.pt")
        with pytest.raises(ValueError) as caught:
            load_checkpoint(tmp_path / "bad.pt")
        assert "'taught' entry of a.png: its inspection area must be" in str(caught.value) and "\n" not in str(caught.value)


def test_a_neighbouring_board_beside_the_board_refuses_nothing_off_its_area(tmp_path: Path) -> None:
    """A panel: another board's crop 30 px beside the board. Registration fits the board alone (its local grid reads
    only the golden image's structure); without the area the neighbour is hidden area ("dark occluder or shadow" at
    x 945), with it the frame is inspected on its board."""
    names = sorted(p.name for p in (SAMPLES / "deeppcb").glob("*.jpg"))
    golden = _on_grey(load_image_gray(SAMPLES / "golden" / names[1]), 130, 130)
    frame = _on_grey(load_image_gray(SAMPLES / "deeppcb" / names[1]), 136, 133)
    frame[130:770, 800:1100] = load_image_gray(SAMPLES / "golden" / names[5])[:, :300]
    assert cv2.imwrite(str(tmp_path / "golden.png"), golden)
    start = torch.load(DEFAULT_REFERENCE_WEIGHTS, map_location="cpu", weights_only=True)
    entry = {"name": "golden.png", "key": pixel_fingerprint(golden), "conf": 0.4} | InspectionArea.of_board(golden).to_entry()
    torch.save(start | {"taught": [entry]}, tmp_path / "taught.pt")
    found = {}
    for key, path in (("plain", DEFAULT_REFERENCE_WEIGHTS), ("area", tmp_path / "taught.pt")):
        with Inspector.load(path, reference=tmp_path / "golden.png", device="cpu", threads=1, monitor=False) as inspector:
            found[key] = inspector.inspect(frame, name="panel.png")
    assert found["plain"].verdict.value == "not_inspected" and "dark occluder or shadow" in found["plain"].reason
    assert found["area"].verdict.value == "fail" and found["area"].registration.ok
    centres = found["area"].detections.boxes.reshape(-1, 2, 2).mean(dim=1)
    assert bool((centres[:, 0] < 780).all())  # every call on the board, none on its neighbour
