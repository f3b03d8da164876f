"""What good boards teach (jobs/teach_good.py): painted defects on them are read as the line meets them."""

import numpy as np

from defect_detector.inspect.tolerance import Tolerance
from defect_detector.jobs.teach_good import GoodBoards


def test_a_painted_defect_counts_as_caught_only_where_the_map_of_the_other_boards_keeps_its_call() -> None:
    """Each board's painted defects are read against the tolerance learnt on the OTHER boards: a call at a place those
    boards draw calls must beat it by the margin, as it must on the line; a defect no call caught is missed."""
    centres = [np.array([[100.0, 100.0]]), np.array([[105.0, 100.0]])]  # both good boards draw a 0.5 call there
    scores = [np.array([0.5]), np.array([0.5])]
    painted = [
        [np.array([[0.52, 100.0, 102.0]]), np.zeros((0, 3))],  # board 0: under the other board's 0.5 + 0.03; missed
        [np.array([[0.9, 300.0, 300.0], [0.45, 300.0, 302.0]])],  # board 1: off any place, caught at 0.9
    ]
    tolerance = Tolerance(np.array([[100.0, 100.0, 0.5]]))
    good = GoodBoards(["a", "b"], [], tolerance, 0.4, 0.4, scores, scores, centres=centres, painted=painted)
    assert good.painted_caught(0.4) == (1, 3)
    assert good.painted_caught(0.95) == (0, 3)  # no call scores that high
    painted[0][0] = np.array([[0.6, 100.0, 102.0]])  # beats the place by more than the margin: caught
    assert good.painted_caught(0.4) == (2, 3)
