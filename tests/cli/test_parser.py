"""The command line's parsing: ``key=value`` overrides after options (``train ... --resume train.lr=0.01``)."""

from __future__ import annotations

import pytest

from defect_detector.cli.main import COMMANDS
from defect_detector.cli.parser import build_parser, parse_args


def test_overrides_may_follow_options() -> None:
    argv = ["train", "--config", "c.yaml", "train.epochs=2", "--resume", "train.lr=0.01", "--threads", "1", "seed=3"]
    args = parse_args(build_parser(COMMANDS), argv)  # "unrecognized arguments: train.lr=0.01" before
    assert args.resume and args.threads == 1 and args.overrides == ["train.epochs=2", "train.lr=0.01", "seed=3"]
    assert parse_args(build_parser(COMMANDS), ["train", "--config", "c.yaml", "--resume"]).overrides == []
    args = parse_args(build_parser(COMMANDS), ["train", "--config", "c.yaml", "--resume", "--allow-data-change", "train.lr=0.01"])
    assert args.allow_data_change and args.overrides == ["train.lr=0.01"]


@pytest.mark.parametrize("argv", [["train", "--config", "c.yaml", "--resume", "--bogus"], ["predict", "x.png", "zz=1"]])
def test_other_leftovers_are_still_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_args(build_parser(COMMANDS), argv)
    assert info.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err
