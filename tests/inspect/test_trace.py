"""inspect/trace.py: a frame's serial, lot and work order from its file name (``--trace-pattern``), or given with it
(issue 58 item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from defect_detector.cli.main import main
from defect_detector.inspect.trace import NO_TRACE, Trace, TracePattern


def test_the_pattern_reads_serial_lot_and_order_from_a_file_name() -> None:
    pattern = TracePattern(r"(?P<serial>SN\d+)_(?P<lot>L\d+)(?:_(?P<order>WO\d+))?")
    assert pattern.trace("line1/SN0042_L7_top.png") == Trace("SN0042", "L7", None)
    assert pattern.trace("SN0042_L7_WO88.png").as_dict() == {"serial": "SN0042", "lot": "L7", "order": "WO88"}
    assert pattern.trace("board_0001.png") is NO_TRACE  # no match: no trace, the frame is a board of its own


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("(?P<serial>SN", "not a regular expression"),
        (r"SN\d+", "names no group"),
        (r"(?P<seriel>SN\d+)", r"names group\(s\) seriel"),  # a misspelt group would read nothing, silently
    ],
)
def test_a_bad_pattern_is_one_line(pattern: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as info:
        TracePattern(pattern)
    assert "\n" not in str(info.value) and str(info.value).startswith(f"--trace-pattern '{pattern}'")


def test_predict_refuses_a_bad_pattern_at_start_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", str(tmp_path), "--trace-pattern", r"(?P<sn>\d+)"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("defect-detector predict: error: --trace-pattern") and "names group(s) sn" in err


def test_trace_values_are_one_printable_line() -> None:
    assert Trace(" SN1 ", "", None) == Trace("SN1")  # stripped; an empty one is unknown
    for bad in ("SN\n1", "x" * 129, 42):
        with pytest.raises(ValueError, match="serial"):
            Trace(bad)  # type: ignore[arg-type]
    assert TracePattern(r"(?P<serial>.+)\.png").trace("a\tb.png") is NO_TRACE  # a name the value cannot hold: no trace
