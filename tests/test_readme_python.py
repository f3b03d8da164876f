"""Every ```python block of README.md runs as written (issue 43): in a temporary folder that sees the repository's
``data/``, ``configs/`` and ``defect_detector/`` (the bundled weights), so the paths a block names resolve as they do
in a checkout and whatever it writes lands in the temporary folder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEEN = ("data", "configs", "defect_detector")
DRIFT_STATES = ("warming_up", "normal", "warning", "critical", "off")
"""Every value of ``Inspection.drift``: the monitor's flag (monitor/drift.py), or ``off`` without monitoring."""


def python_blocks(page: Path) -> list[str]:
    """The ```python blocks of ``page``, in order."""
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)


BLOCKS = python_blocks(ROOT / "README.md")


def test_the_readme_shows_python() -> None:
    assert BLOCKS, "README.md has no ```python block"


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_python_block_runs_as_written(
    block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in SEEN:
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec"), {"__name__": "__readme__"})  # noqa: S102 - the README's own code
    printed = capsys.readouterr().out
    if "result.drift" in block:  # what it prints is among the states its comment names, and the comment names them all
        drift = printed.splitlines()[-1].split()[0]
        assert drift in DRIFT_STATES and all(f'"{state}"' in block for state in DRIFT_STATES), printed
