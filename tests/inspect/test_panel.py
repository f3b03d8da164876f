"""inspect/panel.py: a panel's board outlines, the board holding each call (through the frame's registration), and
each board's verdict (issue 58 item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from defect_detector.align.mapping import Mapping
from defect_detector.align.register import Registration
from defect_detector.inspect.panel import BoardOutline, board_verdicts, boards_holding, load_outlines, outlines_of, to_outline_pixels

OUTLINES = (BoardOutline("A", (0.0, 0.0, 100.0, 80.0)), BoardOutline("B", (100.0, 0.0, 200.0, 80.0)))


def test_outlines_are_read_from_json_or_yaml(tmp_path: Path) -> None:
    (tmp_path / "b.json").write_text(json.dumps({"A": [0, 0, 100, 80], "B": [100, 0, 200, 80]}))
    (tmp_path / "b.yaml").write_text("A: [0, 0, 100, 80]\nB: [100, 0, 200, 80]\n")
    assert load_outlines(tmp_path / "b.json") == load_outlines(tmp_path / "b.yaml") == OUTLINES


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ([[0, 0, 1, 1]], "expected a mapping"),
        ({"A": [0, 0, 10]}, "expected \\[x1, y1, x2, y2\\]"),
        ({"A": [0, 0, float("nan"), 5]}, "4 finite numbers"),
        ({"A": [10, 0, 5, 5]}, "0 <= x1 < x2"),
        ({"A": [0, 0, 10, 10], "B": [5, 5, 20, 20]}, "boards A and B overlap"),
        ({"": [0, 0, 10, 10]}, "board name"),
    ],
)
def test_a_bad_outline_is_one_line(raw: object, says: str) -> None:
    with pytest.raises(ValueError, match=says) as info:
        outlines_of(raw, "--boards b.json")
    assert str(info.value).startswith("--boards b.json: ") and "\n" not in str(info.value)


def test_a_missing_or_malformed_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="file not found"):
        load_outlines(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="not a JSON file"):
        load_outlines(tmp_path / "bad.json")


def test_each_call_lies_on_the_board_holding_its_centre_in_the_golden_images_pixels() -> None:
    boxes = np.array([[40.0, 30.0, 60.0, 50.0], [150.0, 30.0, 170.0, 50.0], [300.0, 300.0, 310.0, 310.0]])
    assert boards_holding(to_outline_pixels(boxes, None), OUTLINES) == ["A", "B", None]
    shift = Mapping(np.array([[1.0, 0.0, 30.0], [0.0, 1.0, 0.0]]), (80, 200))  # golden -> frame: +30 px in x
    shifted = Registration(shift, 0.9, True, 30.0, 0.0, 1.0)
    near_seam = np.array([[105.0, 30.0, 115.0, 50.0]])  # centre x 110 in the frame: x 80 in the golden image, board A
    assert boards_holding(to_outline_pixels(near_seam, None), OUTLINES) == ["B"]
    assert boards_holding(to_outline_pixels(near_seam, shifted), OUTLINES) == ["A"]


def test_each_board_gets_the_frames_rule_on_its_own_calls() -> None:
    verdicts = {b.name: (b.verdict, b.calls) for b in board_verdicts(True, False, ["B", "B", None], OUTLINES)}
    assert verdicts == {"A": ("pass", 0), "B": ("fail", 2)}
    assert [b.verdict for b in board_verdicts(True, True, ["B"], OUTLINES)] == ["pass_suspect", "fail"]
    assert [b.verdict for b in board_verdicts(False, False, [], OUTLINES)] == ["not_inspected", "not_inspected"]


def test_a_call_is_mapped_through_a_perspective_mapping_not_only_its_affine_part() -> None:
    """The registration's mapping is general (a homography, a lens term, a local grid): a call lies on the board the
    whole mapping puts it on. Its affine part (``Registration.matrix``, exact at the golden image's centre) would put
    this call, far from the centre, 12 px off: on the other board."""
    tilt = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.002, 0.0, 1.0]])  # golden -> frame: x' = x / (1 + 0.002 x)
    registration = Registration(Mapping(tilt, (80, 200)), 0.9, True, 0.0, 0.0, 1.0)
    narrow = (BoardOutline("C", (0.0, 0.0, 15.0, 80.0)), BoardOutline("D", (15.0, 0.0, 200.0, 80.0)))
    box = np.array([[17.0, 30.0, 23.0, 40.0]])  # centre x 20 in the frame: x 20.8 in the golden image, on board D
    golden = to_outline_pixels(box, registration)
    assert abs(golden[0, 0] - 20.0 / (1 - 0.002 * 20.0)) < 1e-6 and boards_holding(golden, narrow) == ["D"]
    affine = np.linalg.solve(np.vstack([registration.matrix, [0.0, 0.0, 1.0]]), [20.0, 35.0, 1.0])
    assert boards_holding(affine[None, :2], narrow) == ["C"]  # what the affine part alone would have said
