"""The version is one number in one place (issue 33, item 9): core/version.py, read by pyproject and the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from defect_detector import __version__
from defect_detector.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_reads_the_version_from_core_version() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "defect_detector.core.version.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


def test_the_cli_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.split() == ["defect-detector", __version__]


def test_no_doc_restates_it() -> None:
    """Docs name releases (``v0.10``'s model) but never write the current number, which would go stale."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "deploy").rglob("*.md"))]
    assert [p.name for p in pages if __version__ in p.read_text()] == []
