"""inspect/options.py: the options of an inspection, declared once for ``Inspector.load``, ``predict`` and a sibling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from defect_detector.cli.main import COMMANDS
from defect_detector.cli.parser import build_parser, parse_args
from defect_detector.inspect.options import InspectOptions


def test_every_option_is_a_predict_flag_of_its_name_and_reads_back() -> None:
    """``predict``'s flags and ``Inspector.load``'s keywords cannot drift apart: each option has the flag of its name
    (``monitor``: ``--no-monitor``), and the flags read back into the options, defaults included."""
    parser = build_parser(COMMANDS)
    args = parse_args(parser, ["predict", "frames/"])
    flags = {name for name in vars(args)}
    assert set(InspectOptions.model_fields) - {"monitor"} <= flags and "no_monitor" in flags
    assert InspectOptions.of_args(args) == InspectOptions()  # the flags' defaults are the options'
    given = ["predict", "f/", "--conf", "0.3", "--max-det", "7", "--no-tile", "--no-monitor", "--precision", "float32", "--threads", "2"]
    o = InspectOptions.of_args(parse_args(parser, given))
    assert (o.conf, o.max_det, o.tile, o.monitor, o.precision, o.threads) == (0.3, 7, False, False, "float32", 2)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"conf": 1.0}, "conf: must be in [0, 1) (a score threshold of 1 or more passes every board), got 1.0"),
        ({"iou": 2.0}, "iou: must be in [0, 1], got 2.0"),
        ({"max_det": 0}, "max_det: must be >= 1, got 0"),
        ({"device": 3}, "device: must be a string, got 3"),
        ({"threads": "two"}, "threads: must be an integer, got 'two'"),
        ({"confidence": 0.3}, "confidence: unknown key (known: alerts, baseline, boards, conf, db, device,"),
        ({"reference": np.zeros((1920, 1280), np.uint8)}, "reference.str: must be a string, got ndarray of uint8 [1920, 1280]"),
    ],
)
def test_a_bad_option_is_one_line_naming_it(options: dict, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        InspectOptions.checked(**options)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value) and len(str(caught.value)) < 400


def test_a_sibling_keeps_the_options_but_not_the_sinks_the_first_inspector_holds() -> None:
    first = InspectOptions(
        reference="golden/", device="cpu", threads=2, conf=0.3, tile=True, precision="float32", alerts="a.jsonl", db="line.db"
    )
    sibling = first.for_weights(Path("photo_ref.pt"))
    assert (sibling.weights, sibling.threads, sibling.conf, sibling.tile) == (Path("photo_ref.pt"), 2, 0.3, True)
    assert sibling.precision == "float32"
    assert sibling.reference == "golden/" and sibling.alerts is None and sibling.db is None and first.alerts == "a.jsonl"
