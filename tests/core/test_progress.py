"""Progress on stderr (issue 58 item 4): where stderr is a log or a pipe, the bar is whole lines, at the start and at
the end (tqdm alone drew nothing there: ``val`` ran 11 minutes silent)."""

from __future__ import annotations

import pytest

from defect_detector.core.progress import progress


def test_a_log_gets_the_bar_as_whole_lines_at_the_start_and_the_end(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(progress(range(7), desc="val")) == list(range(7))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("val:   0%") and "0/7" in lines[0]
    assert lines[-1].startswith("val: 100%") and "7/7" in lines[-1]
    assert all("\r" not in line for line in lines)


def test_a_bar_advanced_by_hand_ends_at_its_total(capsys: pytest.CaptureFixture[str]) -> None:
    with progress(total=5, desc="layer statistics") as bar:
        bar.update(3)
        bar.update(2)
    assert capsys.readouterr().err.splitlines()[-1].startswith("layer statistics: 100%")


def test_a_disabled_bar_writes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(progress(range(3), desc="val", enabled=False)) == [0, 1, 2]
    assert capsys.readouterr().err == ""
