"""``benchmarks/frame_stays.py``: the way of a frame from ``Inspector.run``, counted (issue 57)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.frame_stays import count, main


def test_the_count_reads_stays_and_returns_off_the_way() -> None:
    way = [("a.py", "f"), ("b.py", "g"), ("a.py", "h"), ("c.py", "i"), ("b.py", "j")]
    assert count(way) == {"stays": 5, "returns": 2, "files": 3}
    assert count([("a.py", "f")]) == {"stays": 1, "returns": 0, "files": 1}


def test_the_way_of_a_frame_goes_through_every_stage_in_its_room(tmp_path: Path) -> None:
    assert main(["--json", str(tmp_path / "way.json")]) == 0
    found = json.loads((tmp_path / "way.json").read_text())
    way = [tuple(s) for s in found["way"]]
    assert way[0] == ("inspect/inspector.py", "run") and found["stays"] == len(way)
    for stage in ("frame_size", "blank", "registration", "photometric_fit", "exposure", "light_range", "hidden_area"):
        assert stage in {function for _, function in way}, stage
    assert ("screens/hidden.py", "hidden_area") in way and ("align/register.py", "registration") in way
