"""Modules of about 400 lines and functions of about 60 (the brief's "How we write code"): the limits below are that
"about", so a module or function that grows past them is split before it lands."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / "defect_detector").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")])
MODULE_LINES = 440
FUNCTION_LINES = 64


def test_modules_stay_near_400_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in SOURCES if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES}
    assert SOURCES and not long, f"split these modules (over {MODULE_LINES} lines): {long}"


def test_functions_stay_near_60_lines() -> None:
    long = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > FUNCTION_LINES:
                long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = node.end_lineno - node.lineno + 1
    assert not long, f"split these functions (over {FUNCTION_LINES} lines): {long}"
