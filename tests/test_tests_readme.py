"""tests/README.md names the test that holds each case: every ``tests/....py::name`` it cites exists (issue 33, item 9)."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPAN = re.compile(r"`([^`]+)`")
REFERENCE = re.compile(r"^(tests/[\w/]+\.py)?(?:::([\w*]+)(?:\[[^\]]*\])?)?$")


def _test_names(path: Path) -> set[str]:
    """The test functions of a test module, module-level and in classes."""
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test")}


def cited(text: str) -> list[tuple[str, str | None]]:
    """``(file, test or None)`` for each citation in ``text``: ``tests/x/test_y.py``, ``tests/x/test_y.py::name``, or
    ``::name`` (a test of the file cited last before it); ``name`` may hold ``*`` or a ``[parameter]``."""
    out: list[tuple[str, str | None]] = []
    last = None
    for span in SPAN.findall(text):
        for part in (p.strip() for p in span.split(",")):
            match = REFERENCE.match(part)
            if not match or not (match.group(1) or match.group(2)) or not (part.startswith("tests/") or part.startswith("::")):
                continue
            last = match.group(1) or last
            assert last is not None, f"tests/README.md cites {part} before naming any file"
            out.append((last, match.group(2)))
    return out


def test_every_test_the_tests_readme_cites_exists() -> None:
    text = (ROOT / "tests" / "README.md").read_text()
    citations = cited(text)
    assert len(citations) > 40  # the tables cite their tests by path
    missing = []
    for file, name in citations:
        path = ROOT / file
        if not path.is_file():
            missing.append(file)
        elif name is not None and not fnmatch.filter(_test_names(path), name):
            missing.append(f"{file}::{name}")
    assert missing == [], f"tests/README.md cites tests that do not exist: {sorted(set(missing))}"
    bare = [m for m in re.findall(r"`(test_\w+\.py)(?:::|`)", text)]
    assert bare == [], f"tests/README.md cites test files without their folder (tests/...): {sorted(set(bare))}"


def test_every_module_and_benchmark_the_tests_readme_names_exists() -> None:
    """``core/config.py``-style paths are the package's (or the repository's); ``python -m benchmarks.x`` modules exist."""
    text = (ROOT / "tests" / "README.md").read_text()
    modules = {m for span in SPAN.findall(text) for m in re.findall(r"(?<![\w/.])([\w/]+\.py)\b", span) if not m.startswith("tests/")}
    assert len(modules) > 10
    missing = [m for m in sorted(modules) if not (ROOT / "defect_detector" / m).is_file() and not (ROOT / m).is_file()]
    assert missing == [], f"tests/README.md names modules that do not exist: {missing}"
    benchmarks = set(re.findall(r"python -m (benchmarks\.\w+)", text))
    assert [b for b in sorted(benchmarks) if not (ROOT / (b.replace(".", "/") + ".py")).is_file()] == []


def test_the_citation_reader_reads_what_it_should() -> None:
    text = "`tests/cli/test_cli.py::test_a`, `::test_b[x]`; `tests/data/test_fuzz.py::test_*_converter`, `tests/x.py`"
    assert cited(text) == [
        ("tests/cli/test_cli.py", "test_a"),
        ("tests/cli/test_cli.py", "test_b"),
        ("tests/data/test_fuzz.py", "test_*_converter"),
        ("tests/x.py", None),
    ]
