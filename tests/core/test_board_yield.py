"""core/board_yield.py: boards by verdict and first-pass yield (issue 58 item 4), one definition for every count."""

from __future__ import annotations

from defect_detector.core.board_yield import BoardCounts, BoardYield, is_first_inspection


def test_without_serials_each_frame_is_a_board() -> None:
    tally = BoardYield()
    for verdict in ("pass", "fail", "pass", "pass_suspect", "not_inspected", "pass"):
        tally.add(verdict)
    counts = tally.counts
    assert (counts.passed, counts.failed, counts.suspect, counts.not_inspected) == (3, 1, 1, 1)
    assert counts.boards == 5 and counts.first_passed == 3  # the frame not inspected is no board inspected, never a pass
    assert counts.first_pass_yield == 3 / 5 and counts.as_dict()["first_pass_yield"] == 0.6


def test_a_board_passes_first_time_only_on_its_first_inspection() -> None:
    tally = BoardYield()
    assert not tally.add("not_inspected", "SN1")  # a hand over the camera: no inspection of SN1 yet
    assert tally.add("fail", "SN1")  # its first inspection fails
    assert not tally.add("pass", "SN1")  # reworked and passed: a pass, but not a first pass
    assert tally.add("pass", "SN2") and not tally.add("pass", "SN2")
    assert tally.add("pass_suspect", "SN3")  # suspect: a person must look, so no first pass
    counts = tally.counts
    assert (counts.boards, counts.first_passed) == (3, 1) and counts.first_pass_yield == 1 / 3
    assert (counts.passed, counts.failed, counts.suspect, counts.not_inspected) == (3, 1, 1, 1)


def test_the_oldest_serials_are_forgotten_beyond_the_limit() -> None:
    tally = BoardYield(remembered=2)
    for serial in ("A", "B", "C"):
        tally.add("pass", serial)
    assert tally.add("pass", "A") and not tally.add("pass", "C")  # A was forgotten, C is remembered


def test_no_board_inspected_has_no_yield() -> None:
    assert BoardCounts().first_pass_yield is None and BoardCounts().as_dict()["first_pass_yield"] is None
    assert not is_first_inspection("not_inspected", False) and is_first_inspection("fail", False) and not is_first_inspection("pass", True)
