"""Issue 43: a ``.pt2`` export on a CPU-only machine with a CUDA toolkit printed torch's "No CUDA runtime is found"
(logged when ``torch.utils.cpp_extension`` is first imported); ``export/pt2.py`` drops that one message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _stderr(code: str, cuda_home: Path) -> str:
    env = {**os.environ, "CUDA_HOME": str(cuda_home), "PYTHONPATH": str(ROOT), "NO_ALBUMENTATIONS_UPDATE": "1"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=True).stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch logs the message only without a CUDA runtime")
def test_the_no_cuda_runtime_message_is_dropped_and_only_it(tmp_path: Path) -> None:
    assert "No CUDA runtime is found" in _stderr("import torch.utils.cpp_extension", tmp_path)  # what the export printed
    quiet = "import logging; from defect_detector.export.pt2 import _import_cpp_extension; _import_cpp_extension()\n"
    quiet += "logging.getLogger('torch.utils.cpp_extension').warning('another message')"
    printed = _stderr(quiet, tmp_path)
    assert "No CUDA runtime is found" not in printed and "another message" in printed
