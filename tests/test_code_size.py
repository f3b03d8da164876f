"""Functions of about 60 lines (the brief's "How we write code"), and a module limit set where it no longer splits a
concept: a module is split where its concept ends, by review, never at a line count (issue 57). The module limit only
catches a file that has clearly grown into two concepts."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / "defect_detector").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")])
MODULE_LINES = 800
FUNCTION_LINES = 64


def test_modules_stay_under_the_review_limit() -> None:
    long = {str(p.relative_to(ROOT)): n for p in SOURCES if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES}
    assert SOURCES and not long, f"split these modules (over {MODULE_LINES} lines): {long}"


def test_functions_stay_near_60_lines() -> None:
    long = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > FUNCTION_LINES:
                long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = node.end_lineno - node.lineno + 1
    assert not long, f"split these functions (over {FUNCTION_LINES} lines): {long}"
