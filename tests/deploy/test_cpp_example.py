"""The libtorch C++ examples (deploy/cpp: the TorchScript and the AOTInductor .pt2 targets) build and agree with the
Python runtime, and refuse a golden image that does not fit the frame.

Skipped when cmake, a C++ compiler or OpenCV's CMake package is missing, unless DEFECT_DETECTOR_REQUIRE_DEPLOY_TESTS=1
(CI, .ci/run) turns the skip into a failure. Building takes about 30 s of CPU time (set DEFECT_DETECTOR_CPP_BUILD to a
folder to keep the build between runs).
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
from golden_pairs import BOARDS, golden_pairs
from pipeline_helpers import detect
from small_checkpoint import SPREAD, SPREAD_BIAS, assert_apart, write_small_checkpoint
from torch import nn

from benchmarks.golden_check import correlation
from defect_detector.align.register import check_pair
from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.core.types import Detections
from defect_detector.data.synth import generate_board, generate_board_pair
from defect_detector.export import artifact_bytes, build_meta, export_torchscript, quiet_jit
from defect_detector.inspect.runtime import Runtime
from defect_detector.model.checkpoint import load_checkpoint

CPP_DIR = Path(__file__).resolve().parents[2] / "deploy" / "cpp"
IMGSZ = 320
_OPENCV_CONFIGS = (
    "/usr/lib/*/cmake/opencv4/OpenCVConfig.cmake",
    "/usr/lib/cmake/opencv4/OpenCVConfig.cmake",
    "/usr/local/lib/cmake/opencv4/OpenCVConfig.cmake",
    "/usr/share/OpenCV/OpenCVConfig.cmake",
)


def _missing_tool() -> str | None:
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    if not os.environ.get("OpenCV_DIR") and not any(glob.glob(pattern) for pattern in _OPENCV_CONFIGS):
        return "OpenCV C++ development files not found (apt-get install libopencv-dev)"
    if not (Path(torch.__file__).parent / "include" / "torch" / "script.h").is_file():
        return "this torch installation has no C++ headers"
    return None


MISSING = _missing_tool()
if MISSING is not None and os.environ.get("DEFECT_DETECTOR_REQUIRE_DEPLOY_TESTS") == "1":
    raise RuntimeError(f"DEFECT_DETECTOR_REQUIRE_DEPLOY_TESTS=1 but the C++ example cannot be built: {MISSING}")
pytestmark = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))


def _configure(build: Path) -> subprocess.CompletedProcess:
    """find_package(Torch) first; a CUDA-built wheel's config needs the CUDA toolkit, so without it fall back
    to linking the wheel's CPU libraries (TORCH_WHEEL_DIR, see deploy/cpp/CMakeLists.txt)."""
    command = ["cmake", "-S", str(CPP_DIR), "-B", str(build / "find_package"), f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode == 0 or "cannot find the CUDA" not in done.stdout + done.stderr:
        return done
    wheel = [f"-DTORCH_WHEEL_DIR={Path(torch.__file__).parent}", f"-DTORCH_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    return subprocess.run(["cmake", "-S", str(CPP_DIR), "-B", str(build / "wheel"), *wheel], capture_output=True, text=True, timeout=300)


def _make_artifact(path: Path, in_channels: int = 1) -> Path:
    """A TorchScript export of a small random model whose calls are far from ties (``small_checkpoint.SPREAD``)."""
    ckpt = write_small_checkpoint(path.with_suffix(".ckpt.pt"), IMGSZ, SPREAD_BIAS, seed=1, in_channels=in_channels, spread=SPREAD)
    export_torchscript(load_checkpoint(ckpt), path, optimize=False)
    return path


def _run(executable: Path, *args: str, point: tuple[str, ...] = ("--conf", "0.25", "--iou", "0.5")) -> subprocess.CompletedProcess:
    """Run a C++ example on one thread; ``point``: its score threshold and NMS flags (empty: the weights' own)."""
    command = [str(executable), *args, *point, "--threads", "1"]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _json_lines(stdout: str) -> list[dict]:
    """The detections a C++ example printed, one JSON object per line."""
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def _assert_same_detections(cpp: list[dict], python: Detections) -> None:
    """``cpp`` holds ``python``'s calls: each paired with the closest call of its class. A random model's calls must lie
    apart in score (``assert_apart``) before the call, or rounding decides which of a near-tie NMS keeps in each."""
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


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reuse = os.environ.get("DEFECT_DETECTOR_CPP_BUILD")  # a persistent build folder makes reruns incremental
    configure = _configure(Path(reuse) if reuse else tmp_path_factory.mktemp("cpp_build"))
    assert configure.returncode == 0, configure.stdout[-3000:] + configure.stderr[-3000:]
    build = Path(configure.args[4])
    compiled = subprocess.run(["cmake", "--build", str(build), "-j", "2"], capture_output=True, text=True, timeout=900)
    assert compiled.returncode == 0, compiled.stdout[-3000:] + compiled.stderr[-3000:]
    return build


@pytest.fixture(scope="module")
def executable(build_dir: Path) -> Path:
    """The TorchScript example."""
    return build_dir / "defect_detector_cpp"


@pytest.fixture(scope="module")
def pt2_executable(build_dir: Path) -> Path:
    """The .pt2 example (torch::inductor::AOTIModelPackageLoader)."""
    return build_dir / "defect_detector_pt2"


def test_cpp_matches_python_runtime(executable: Path, tmp_path: Path) -> None:
    artifact = _make_artifact(tmp_path / "small.torchscript.pt")
    # 640x480 into 320: scale exactly 0.5 (OpenCV's INTER_AREA averages 2x2 blocks in both builds), pad_y 40.
    image = generate_board(480, 640, np.random.default_rng(5))[0]
    image_path = tmp_path / "board.png"
    assert cv2.imwrite(str(image_path), image)

    run = _run(executable, str(artifact), str(image_path))
    assert run.returncode == 0, run.stderr
    python = detect(Runtime.load(artifact, device="cpu"), [image], conf=0.25, iou=0.5)[0]
    assert_apart(python.scores)
    _assert_same_detections(_json_lines(run.stdout), python)
    refused = _run(executable, str(artifact), str(image_path), "--reference", str(image_path))
    assert refused.returncode == 2 and "takes 1 input channel" in refused.stderr


def test_cpp_defaults_to_the_weights_operating_point_with_cross_class_demotion(executable: Path, tmp_path: Path) -> None:
    """Without --conf / --iou the example applies meta.json's operating point, cross-class demotion included."""
    ckpt_path = write_small_checkpoint(tmp_path / "point.ckpt.pt", IMGSZ, SPREAD_BIAS, seed=1, spread=SPREAD)
    ckpt = torch.load(ckpt_path, weights_only=True)
    ckpt["config"]["eval"].update({"f1_conf": 0.3, "nms_iou": 0.6, "cross_class_iou": 0.3, "cross_class_factor": 0.9})
    torch.save(ckpt, ckpt_path)
    artifact = tmp_path / "point.torchscript.pt"
    export_torchscript(load_checkpoint(ckpt_path), artifact, optimize=False)
    image = generate_board(480, 640, np.random.default_rng(5))[0]
    image_path = tmp_path / "board.png"
    assert cv2.imwrite(str(image_path), image)
    run = _run(executable, str(artifact), str(image_path), point=())
    assert run.returncode == 0, run.stderr
    cpp = _json_lines(run.stdout)
    python = detect(Runtime.load(artifact, device="cpu"), [image])[0]  # the pipeline's defaults: the weights' point
    ckpt["config"]["eval"]["cross_class_iou"] = None
    torch.save(ckpt, ckpt_path)
    export_torchscript(load_checkpoint(ckpt_path), tmp_path / "plain.torchscript.pt", optimize=False)
    plain = detect(Runtime.load(tmp_path / "plain.torchscript.pt", device="cpu"), [image])[0]
    assert_apart(plain.scores)
    assert_apart(python.scores)
    demoted = [float(s) for s in python.scores if not bool(((plain.scores - s).abs() <= 1e-4).any())]
    assert len(python) < len(plain) and demoted, "some calls demoted below the threshold (dropped), some kept demoted"
    _assert_same_detections(cpp, python)


def test_cpp_reference_model_matches_python_runtime(executable: Path, tmp_path: Path) -> None:
    artifact = _make_artifact(tmp_path / "ref.torchscript.pt", in_channels=2)
    image, template = generate_board_pair(480, 640, np.random.default_rng(6))[:2]  # scale 0.5, pad_y 40, as above
    image_path, reference_path = tmp_path / "board.png", tmp_path / "golden.png"
    assert cv2.imwrite(str(image_path), image) and cv2.imwrite(str(reference_path), template)
    python = detect(Runtime.load(artifact, device="cpu"), [image], conf=0.25, iou=0.5, references=[template])[0]
    assert_apart(python.scores)
    for args in (["--reference", str(reference_path)], [str(reference_path)]):  # flag or third positional argument
        run = _run(executable, str(artifact), str(image_path), *args)
        assert run.returncode == 0, run.stderr
        _assert_same_detections(_json_lines(run.stdout), python)
    missing = _run(executable, str(artifact), str(image_path))
    assert missing.returncode == 2 and "reference model" in missing.stderr
    # a golden image that does not fit the frame is refused (exit 3, one line), never "0 detections"
    other_board = generate_board_pair(480, 640, np.random.default_rng(60))[1]
    wrongs = {"other": other_board, "blank": np.full_like(template, 114), "not_registered": np.roll(template, (37, 53), (0, 1))}
    for name, wrong in wrongs.items():
        assert cv2.imwrite(str(tmp_path / f"{name}.png"), wrong)
        refused = _run(executable, str(artifact), str(image_path), "--reference", str(tmp_path / f"{name}.png"))
        assert refused.returncode == 3 and refused.stdout == "", (name, refused.stderr)
        assert "not inspected" in refused.stderr and "correlation check ZNCC " in refused.stderr
        assert "(needs 0.50; meta.json golden_check.min_zncc)" in refused.stderr
        assert len(refused.stderr.splitlines()) == 1
    small = tmp_path / "small.png"
    assert cv2.imwrite(str(small), template[:-1])
    wrong_size = _run(executable, str(artifact), str(image_path), "--reference", str(small))
    assert wrong_size.returncode == 1 and "register it" in wrong_size.stderr


def test_cpp_correlation_check_is_the_benchmarked_rule_and_differs_from_python_as_stated(executable: Path, tmp_path: Path) -> None:
    """On shipped DeepPCB pairs (golden images already in the board's pixels): the compiled correlation check refuses
    (exit 3) exactly when ``benchmarks/golden_check.py``'s ``correlation`` is below min_zncc, printing that ZNCC; and it
    differs from Python's golden check as deploy/cpp/README.md states: both accept a board's own golden image and refuse
    another design's, and a golden image 6 px off its registration is inspected here and refused by Python."""
    artifact = _make_artifact(tmp_path / "ref.torchscript.pt", in_channels=2)
    expected = {"true": (True, True), "misregistered": (False, True), "other design": (False, False)}  # (Python, C++) accept
    for board_id, other_id in BOARDS:
        board, kinds = golden_pairs(board_id, other_id)
        board_path = tmp_path / f"{board_id}.png"
        assert cv2.imwrite(str(board_path), board)
        for kind, golden in kinds.items():
            golden_path = tmp_path / f"{board_id}_{kind.replace(' ', '_')}.png"
            assert cv2.imwrite(str(golden_path), golden)
            run = _run(executable, str(artifact), str(board_path), "--reference", str(golden_path))
            zncc = correlation(board, golden)
            assert run.returncode == (0 if zncc >= 0.5 else 3), (board_id, kind, zncc, run.stderr)
            assert run.returncode == 0 or f"correlation check ZNCC {zncc:.2f} (needs 0.50" in run.stderr
            assert (check_pair(golden, board).ok, run.returncode == 0) == expected[kind], (board_id, kind)


class CentroidModel(nn.Module):
    """``[B, 2, S, S]`` -> ``pred [B, 2, 4 + 6]``: for input channel ``c``, a 40 px box around that channel's intensity
    centroid (letterboxed pixels) with score 0.9 for class ``c``; ``stats [B, 0, 2]``. Its output shows where each
    channel's content landed on the canvas, which an untrained detector's scores hardly do."""

    def __init__(self, imgsz: int) -> None:
        super().__init__()
        coords = torch.arange(imgsz, dtype=torch.float32)
        self.register_buffer("xs", coords.view(1, 1, 1, -1))
        self.register_buffer("ys", coords.view(1, 1, -1, 1))
        self.register_buffer("scores", torch.eye(2, len(DEEPPCB_CLASSES)) * 0.9)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mass = x.sum((2, 3))  # [B, 2]
        cx, cy = (x * self.xs).sum((2, 3)) / mass, (x * self.ys).sum((2, 3)) / mass
        boxes = torch.stack([cx - 20, cy - 20, cx + 20, cy + 20], dim=-1)  # [B, 2, 4]
        pred = torch.cat([boxes, self.scores.expand(x.shape[0], -1, -1)], dim=-1)
        return pred, pred[:, :0, :2]


def test_cpp_stacks_the_reference_as_channel_1_with_the_image_geometry(executable: Path, tmp_path: Path) -> None:
    with torch.no_grad(), quiet_jit():
        traced = torch.jit.trace(CentroidModel(IMGSZ).eval(), torch.rand(1, 2, IMGSZ, IMGSZ))
    artifact = tmp_path / "centroid.torchscript.pt"
    strides = (IMGSZ, IMGSZ)  # two anchors of one cell each: the meta must describe the graph's 2 predictions
    meta = build_meta(DEEPPCB_CLASSES, IMGSZ, strides, (), channels=2)
    meta["golden_check"]["min_zncc"] = -1.0  # this pair is unlike on purpose: the check is off (tested above)
    artifact.write_bytes(artifact_bytes(traced, meta))
    image = np.zeros((480, 640), np.uint8)
    image[300:360, 500:600] = 250  # bright patch low right
    reference = np.zeros((480, 640), np.uint8)
    reference[20:80, 30:90] = 250  # bright patch top left: a centroid far from the image's
    image_path, reference_path = tmp_path / "image.png", tmp_path / "reference.png"
    assert cv2.imwrite(str(image_path), image) and cv2.imwrite(str(reference_path), reference)
    python = detect(Runtime.load(artifact, device="cpu"), [image], conf=0.25, iou=0.5, references=[reference])[0]
    assert python.labels.tolist() == [0, 1]
    assert float(python.boxes[1, 0]) < float(python.boxes[0, 0]) - 20  # class 1 (the reference's) lies left
    run = _run(executable, str(artifact), str(image_path), "--reference", str(reference_path))
    assert run.returncode == 0, run.stderr
    _assert_same_detections(_json_lines(run.stdout), python)


def test_cpp_pt2_matches_python_runtime(pt2_executable: Path, small_pt2: dict, tmp_path: Path) -> None:
    artifact = small_pt2["path"]  # compiled once per session (conftest.py), imgsz 320 like the artifacts above
    image = generate_board(480, 640, np.random.default_rng(5))[0]
    image_path = tmp_path / "board.png"
    assert cv2.imwrite(str(image_path), image)
    run = _run(pt2_executable, str(artifact), str(image_path))
    assert run.returncode == 0, run.stderr
    python = detect(Runtime.load(artifact, device="cpu"), [image], conf=0.25, iou=0.5)[0]
    assert_apart(python.scores)  # the shared .pt2's model spreads its scores (conftest.py)
    _assert_same_detections(_json_lines(run.stdout), python)
    refused = _run(pt2_executable, str(artifact), str(image_path), "--reference", str(image_path))
    assert refused.returncode == 2 and "takes 1 input channel" in refused.stderr
    torchscript = tmp_path / "small.torchscript.pt"
    export_torchscript(load_checkpoint(small_pt2["checkpoint"]), torchscript, optimize=False)
    wrong_kind = _run(pt2_executable, str(torchscript), str(image_path))  # a TorchScript file: one line, no backtrace
    assert wrong_kind.returncode == 1 and wrong_kind.stderr.startswith("error: ") and len(wrong_kind.stderr.splitlines()) == 1


def _siamese_boards(tmp_path: Path, height: int, width: int) -> tuple[list[Path], Path, list[np.ndarray], np.ndarray]:
    """Two boards of one design and their golden image (the second board: the first with a painted blob), as files."""
    image, template = generate_board_pair(height, width, np.random.default_rng(6))[:2]
    second = image.copy()
    second[height // 4 : height // 4 + height // 12, width // 3 : width // 3 + width // 10] = 255
    paths = [tmp_path / "board1.png", tmp_path / "board2.png"]
    for path, board in zip(paths, (image, second)):
        assert cv2.imwrite(str(path), board)
    assert cv2.imwrite(str(tmp_path / "golden.png"), template)
    return paths, tmp_path / "golden.png", [image, second], template


def _check_boards_against_one_golden_image(executable: Path, artifact: Path, tmp_path: Path, height: int, width: int) -> None:
    """The example computes the golden features once and inspects both boards with them, as the Python runtime does
    for each pair (a model whose calls are far from ties: ``small_checkpoint.SPREAD``)."""
    paths, golden, boards, template = _siamese_boards(tmp_path, height, width)
    conf = 0.25
    point = ("--conf", str(conf), "--iou", "0.5")
    run = _run(executable, str(artifact), str(paths[0]), "--reference", str(golden), "--board", str(paths[1]), point=point)
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("golden features: ") == 1 and "computed once for every board" in run.stderr
    lines = _json_lines(run.stdout)
    runtime = Runtime.load(artifact, device="cpu")
    assert runtime.caches_golden
    for path, board in zip(paths, boards):
        python = detect(runtime, [board], conf=conf, iou=0.5, references=[template])[0]
        assert_apart(python.scores)
        _assert_same_detections([{k: v for k, v in d.items() if k != "image"} for d in lines if d["image"] == str(path)], python)
    single = _run(executable, str(artifact), str(paths[0]), "--reference", str(golden))  # one board: no "image" key
    assert single.returncode == 0 and all("image" not in d for d in _json_lines(single.stdout))


def test_cpp_siamese_model_computes_the_golden_features_once(executable: Path, tmp_path: Path) -> None:
    model = {"fusion": "siamese"}
    ckpt_path = write_small_checkpoint(tmp_path / "siamese.ckpt.pt", IMGSZ, SPREAD_BIAS, seed=1, in_channels=2, model=model, spread=SPREAD)
    artifact = tmp_path / "siamese.torchscript.pt"
    export_torchscript(load_checkpoint(ckpt_path), artifact, optimize=False)
    _check_boards_against_one_golden_image(executable, artifact, tmp_path, 480, 640)  # scale 0.5, pad_y 40, as above


def test_cpp_pt2_siamese_model_computes_the_golden_features_once(pt2_executable: Path, small_siamese_pt2: dict, tmp_path: Path) -> None:
    size = small_siamese_pt2["report"]["meta"]["imgsz"]  # compiled once per session (conftest.py)
    _check_boards_against_one_golden_image(pt2_executable, small_siamese_pt2["path"], tmp_path, size * 3 // 2, size * 2)


def test_cpp_reports_bad_input(executable: Path, tmp_path: Path) -> None:
    command = [str(executable), str(tmp_path / "missing.pt"), str(tmp_path / "missing.png")]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "error" in run.stderr
    assert subprocess.run([str(executable)], capture_output=True, text=True, timeout=60).returncode == 2
    for bad in (["--conf", "high"], ["--conf"], ["--unknown", "1"]):  # a usage error, not a crash
        assert subprocess.run([*command, *bad], capture_output=True, text=True, timeout=60).returncode == 2
