"""The libtorch C++ example (deploy/cpp) builds and agrees with the Python runtime.

Skipped when cmake, a C++ compiler or OpenCV's CMake package is missing. Building takes about 30 s of CPU
time (set DEFECT_DETECTOR_CPP_BUILD to a folder to keep the build between runs).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from small_checkpoint import write_small_checkpoint

from defect_detector.data.synth import generate_board
from defect_detector.deploy.export import export_torchscript
from defect_detector.deploy.runtime import Runtime
from defect_detector.model.checkpoint import load_checkpoint

CPP_DIR = Path(__file__).resolve().parent.parent / "deploy" / "cpp"
IMGSZ = 320
_OPENCV_CONFIGS = ("/usr/lib/*/cmake/opencv4/OpenCVConfig.cmake", "/usr/lib/cmake/opencv4/OpenCVConfig.cmake",
                   "/usr/local/lib/cmake/opencv4/OpenCVConfig.cmake", "/usr/share/OpenCV/OpenCVConfig.cmake")


def _missing_tool() -> str | None:
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    if not os.environ.get("OpenCV_DIR") and not any(glob.glob(pattern) for pattern in _OPENCV_CONFIGS):
        return "OpenCV C++ development files not found (apt-get install libopencv-dev)"
    if not (Path(torch.__file__).parent / "include" / "torch" / "script.h").is_file():
        return "this torch installation has no C++ headers"
    return None


pytestmark = pytest.mark.skipif(_missing_tool() is not None, reason=str(_missing_tool()))


def _configure(build: Path) -> subprocess.CompletedProcess:
    """find_package(Torch) first; a CUDA-built wheel's config needs the CUDA toolkit, so without it fall back
    to linking the wheel's CPU libraries (TORCH_WHEEL_DIR, see deploy/cpp/CMakeLists.txt)."""
    command = ["cmake", "-S", str(CPP_DIR), "-B", str(build / "find_package"), f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode == 0 or "cannot find the CUDA" not in done.stdout + done.stderr:
        return done
    wheel = [f"-DTORCH_WHEEL_DIR={Path(torch.__file__).parent}", f"-DTORCH_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    return subprocess.run(["cmake", "-S", str(CPP_DIR), "-B", str(build / "wheel"), *wheel], capture_output=True, text=True, timeout=300)


def _make_artifact(path: Path) -> Path:
    ckpt = write_small_checkpoint(path.with_suffix(".ckpt.pt"), IMGSZ, seed=1)
    export_torchscript(load_checkpoint(ckpt), path, optimize=False)
    return path


@pytest.fixture(scope="module")
def executable(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reuse = os.environ.get("DEFECT_DETECTOR_CPP_BUILD")  # a persistent build folder makes reruns incremental
    configure = _configure(Path(reuse) if reuse else tmp_path_factory.mktemp("cpp_build"))
    assert configure.returncode == 0, configure.stdout[-3000:] + configure.stderr[-3000:]
    build = Path(configure.args[4])
    compiled = subprocess.run(["cmake", "--build", str(build), "-j", "2"], capture_output=True, text=True, timeout=900)
    assert compiled.returncode == 0, compiled.stdout[-3000:] + compiled.stderr[-3000:]
    return build / "defect_detector_cpp"


def test_cpp_matches_python_runtime(executable: Path, tmp_path: Path) -> None:
    artifact = _make_artifact(tmp_path / "small.torchscript.pt")
    # 640x480 into 320: scale exactly 0.5 (OpenCV's INTER_AREA averages 2x2 blocks in both builds), pad_y 40.
    image = generate_board(480, 640, np.random.default_rng(5))[0]
    image_path = tmp_path / "board.png"
    assert cv2.imwrite(str(image_path), image)

    run = subprocess.run([str(executable), str(artifact), str(image_path), "--conf", "0.25", "--iou", "0.5", "--threads", "1"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr
    cpp = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]

    python = Runtime.load(artifact, device="cpu").predict([image], conf=0.25, iou=0.5)[0]
    assert len(python) > 0, "the test model should produce detections"
    assert len(cpp) == len(python)
    unmatched = list(range(len(python)))
    for det in cpp:  # pair each C++ detection with the closest Python detection of the same class
        same_class = [i for i in unmatched if int(python.labels[i]) == det["label"]]
        assert same_class, f"C++ detection {det} has no Python counterpart"
        i = min(same_class, key=lambda j: float((python.boxes[j] - torch.tensor(det["box"])).abs().max()))
        unmatched.remove(i)
        assert det["category_name"] == python.names[i]
        np.testing.assert_allclose(det["box"], python.boxes[i].tolist(), atol=1.0)
        assert det["score"] == pytest.approx(float(python.scores[i]), abs=1e-3)


def test_cpp_reports_bad_input(executable: Path, tmp_path: Path) -> None:
    command = [str(executable), str(tmp_path / "missing.pt"), str(tmp_path / "missing.png")]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "error" in run.stderr
    assert subprocess.run([str(executable)], capture_output=True, text=True, timeout=60).returncode == 2

