"""Issue 57, "measured behaviour unchanged": the frame path reshaped into stages and consumers makes the same calls
and verdicts as the commit before it (0e1c048) on the frames of ``behaviour_cases.py``: the DeepPCB samples scanned
and as a line captures them, glare, a dark spot, another design's golden image, a blank frame, and the single-image
model. ``data/behaviour_kept.json`` was written by that commit; boxes may move 0.5 px and scores 0.002 (BLAS order)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from behaviour_cases import records

KEPT = Path(__file__).with_name("data") / "behaviour_kept.json"

pytestmark = pytest.mark.usefixtures("one_thread")


def test_calls_and_verdicts_are_those_of_the_commit_before_the_reshaping() -> None:
    kept, now = json.loads(KEPT.read_text(encoding="utf-8")), records()
    assert now.keys() == kept.keys()
    assert sum(r["verdict"] == "not_inspected" for r in kept.values()) >= 4  # the refusals are in it
    for name, before in kept.items():
        after = now[name]
        assert (after["verdict"], after["reason"], after["drift"]) == (before["verdict"], before["reason"], before["drift"]), name
        assert (after["shift"] is None) == (before["shift"] is None), name
        if before["shift"] is not None:
            assert after["shift"] == pytest.approx(before["shift"], abs=0.05), name
        assert [c["class"] for c in after["calls"]] == [c["class"] for c in before["calls"]], name
        for a, b in zip(after["calls"], before["calls"]):
            assert a["bbox"] == pytest.approx(b["bbox"], abs=0.5) and a["score"] == pytest.approx(b["score"], abs=0.002), name
