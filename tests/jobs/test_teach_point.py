"""A taught design's operating point (jobs/teach_point.py) and the fine-tune's verdict (jobs/teach_tune.py)."""

import numpy as np
import pytest

from defect_detector.jobs.teach_point import DesignPoint, DesignScores, design_index, design_point, held_out_point
from defect_detector.jobs.teach_tune import TuneScores, keep_tuned, wants_tuning


def _scores(clean: list[float], painted: list[tuple[float, bool]], boards: int = 10, defects: int = 4) -> DesignScores:
    order = sorted(painted, key=lambda p: -p[0])
    return DesignScores(np.array(clean, float), boards, np.array([p[0] for p in order], float), np.array([p[1] for p in order]), defects)


def test_the_point_allows_at_most_one_false_call_in_ten_defect_free_boards() -> None:
    scores = _scores([0.9, 0.5, 0.3], [(0.95, True), (0.6, True), (0.45, True)])
    point = design_point(scores, own=0.2)
    assert 0.5 < point.conf < 0.5001  # above the second-highest clean call: one call on 10 boards is left
    assert point.false_calls == pytest.approx(0.1) and point.caught == pytest.approx(0.5)


def test_a_whole_board_counts_its_crops_area() -> None:
    """A golden image taught on crops of a quarter of its area: one call per ten crops is 0.4 per board, too many."""
    scores = _scores([0.9, 0.5], [(0.95, True)])
    point = design_point(scores, own=0.2, area_factor=4.0)
    assert point.conf > 0.9 and point.false_calls == 0.0


def test_the_point_goes_below_the_weights_own_only_for_painted_recall() -> None:
    quiet = [0.05]  # defect-free captures allow any threshold above 0.05
    lower = design_point(_scores(quiet, [(0.8, True), (0.3, True), (0.2, False)]), own=0.4)
    assert lower.conf == pytest.approx(0.3) and lower.caught == pytest.approx(0.5)  # down to the defect 0.4 misses
    same = design_point(_scores(quiet, [(0.8, True), (0.3, False)]), own=0.4)
    assert same.conf == pytest.approx(0.4)  # nothing to gain below: the weights' own point


def test_a_boards_design_is_its_file_prefix() -> None:
    assert design_index("boards/d07_clean012.png") == 7 and design_index("d12_held000.png") == 12


def _tune(caught: float, false: float, rehearsal: float) -> TuneScores:
    return TuneScores([DesignPoint(0.3, caught, false)], rehearsal)


@pytest.mark.parametrize(
    ("after", "kept", "words"),
    [
        (_tune(0.9, 0.1, 0.80), True, "fine-tune kept"),
        (_tune(0.7, 0.1, 0.80), False, "painted recall did not rise"),
        (_tune(0.9, 0.3, 0.80), False, "more false calls"),
        (_tune(0.9, 0.1, 0.70), False, "forgot real defects"),
        (_tune(0.9, 0.14, 0.795), True, "fine-tune kept"),  # within the stated noise
    ],
)
def test_a_fine_tune_is_kept_only_when_it_paid(after: TuneScores, kept: bool, words: str) -> None:
    keep, line = keep_tuned(_tune(0.7, 0.1, 0.80), after)
    assert keep is kept and words in line and "rehearsal mAP@0.5 0.800" in line


def test_a_fine_tune_is_tried_only_while_painted_defects_are_missed() -> None:
    assert wants_tuning([DesignPoint(0.3, 1.0, 0.0), DesignPoint(0.3, 0.9, 0.0)])
    assert not wants_tuning([DesignPoint(0.3, 1.0, 0.0), DesignPoint(0.3, 0.995, 0.05)])


def test_the_held_out_point_rises_over_what_held_out_good_boards_still_draw() -> None:
    left = [np.zeros(0), np.array([0.35]), np.array([0.5, 0.1])]  # per good board, the calls the others' map keeps
    point = held_out_point(left, conf=0.25)  # 3 boards allow no false call at 0.1 per board: just over the best, 0.5
    assert 0.5 < point < 0.5 + 1e-9
    assert held_out_point(left, conf=0.6) == 0.6  # already above every call kept: unchanged
    assert held_out_point([*left, *[np.zeros(0)] * 7], conf=0.25) == pytest.approx(0.35)  # 10 boards allow one call
