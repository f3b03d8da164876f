"""Per-frame cost of a golden-template inspection against traced YOLOv8n, in one interleaved run (issue 35).

    python -m benchmarks.bench_frame_cost --threads 2 --iters 40          # needs ultralytics for the YOLOv8n column
    python -m benchmarks.bench_frame_cost --data data/deeppcb/deeppcb_val.json --boards 8 --threads 1

Each round times one call of each candidate, on the same boards (``--data``: the json's first ``--boards`` boards and
their golden images; default: the bundled samples, ``data/samples/deeppcb`` and ``golden``):

- ``yolov8n``: ultralytics' YOLOv8n, fused, traced and frozen at ``[1, 3, S, S]`` (``benchmarks/bench.py``), the model alone;
- ``line_golden_view``: the line's case, one golden board for every frame (the first board, moved by 0-0.5 px from frame
  to frame as in a fixture): the prepare stage (levels, blank check, the
  design's registration reused, the golden check, the screens) and the model in the golden view, the golden image's
  features cached (``inspect/prepare.py``), postprocess included;
- ``line_frame_view``: the same frames with the golden image registered into each frame and run through the model
  with it (two trunk passes per frame);
- ``new_golden_view`` / ``new_golden_frame_view``: a new golden image every frame (DeepPCB's case): a full registration,
  and in the golden view the golden image's features computed too;
- ``model_cached`` / ``model_infer``: the model alone, ``infer_cached`` of one frame against cached features, and ``infer``
  of the two-channel input (``benchmarks/bench_cached.py``).

Ratios are paired (median over rounds of candidate / YOLOv8n). Target: ``line_golden_view`` <= 0.25.

``--photographs`` times photograph-sized frames instead (``benchmarks/photo_frames.py``: the pairs enlarged
``--photo-scale`` times and rendered as photographs): ``line_golden_view`` and ``new_golden_golden_view`` at the working
scale the weights read from the golden image (``inspect/design_scale.py``), against ``yolov8n_tiled``, YOLOv8n over the
frame at its native resolution in 640 px tiles with the pipeline's overlap; per frame and per megapixel. Target:
``line_golden_view`` <= 0.30 of ``yolov8n_tiled``::

    python -m benchmarks.bench_frame_cost --photographs --boards 4 --iters 8
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

from benchmarks.bench import build_yolov8n
from benchmarks.bench_cached import runtime_calls
from benchmarks.photo_frames import PHOTO_SCALE, photo_pairs, yolo_tiled
from benchmarks.report import json_command
from benchmarks.timing import measure_interleaved, paired_ratio
from defect_detector.core.frame import Frame
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.data.images import load_image_gray
from defect_detector.inspect.designs import Designs
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.prepare import Prepare, detect
from defect_detector.inspect.runtime import PRECISIONS, Runtime, precision_half
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "samples"
TARGET = 0.25
PHOTO_TARGET = 0.30


def load_pairs(data: str | None, boards: int, class_names: Sequence[str]) -> list[tuple[str, Any, Any]]:
    """``(name, board, golden)`` uint8 pairs: the json's first ``boards`` boards, or the bundled samples."""
    if data is None:
        paths = sorted((SAMPLES / "deeppcb").glob("*.jpg"))[:boards]
        return [(p.name, load_image_gray(p), load_image_gray(SAMPLES / "golden" / p.name)) for p in paths]
    dataset = CocoDetectionDataset(data, None, class_names, 640, None, "skip", reference=True)
    return [(Path(p).name, load_image_gray(p), load_image_gray(g)) for _, p, g in dataset.files()[:boards]]


def frame_candidates(runtime: Runtime, pairs: Sequence[tuple[str, Any, Any]], frame_views: bool = True) -> dict[str, Callable[[], Any]]:
    """The inspection candidates (module docstring), each inspecting the next board per call (``frame_views`` False:
    the golden view only, where the model has one)."""
    views = {"golden_view": True, "frame_view": False} if runtime.caches_golden else {"frame_view": False}
    if not frame_views and runtime.caches_golden:
        views = {"golden_view": True}
    out: dict[str, Callable[[], Any]] = {}
    fixture = line_frames(pairs[0])
    for label, golden_view in views.items():
        pipeline = Pipeline(runtime, golden_view=golden_view)
        line = Prepare(pipeline, Designs(None))  # one design all along: pairs[0]'s golden image
        out[f"line_{label}"] = _cycling(lambda i, p=line, q=pipeline: _inspect(p, q, fixture[i], pairs[0][2]), len(fixture))
        fresh = _cycling(lambda i, v=golden_view: _new_design(runtime, v, pairs[i]), len(pairs))
        out[f"new_golden_{label}"] = fresh  # a new design every frame: nothing cached
    return out


def line_frames(pair: tuple[str, Any, Any]) -> list[tuple[str, Any, Any]]:
    """One board as a fixture shows it frame after frame: moved by 0-0.5 px (border replicated), same golden image."""
    name, board, golden = pair
    moves = ((0.0, 0.0), (0.5, 0.0), (0.0, 0.5), (0.5, 0.5))
    size = (board.shape[1], board.shape[0])
    shifted = [cv2.warpAffine(board, np.float64([[1, 0, dx], [0, 1, dy]]), size, borderMode=cv2.BORDER_REPLICATE) for dx, dy in moves]
    return [(name, image, golden) for image in shifted]


def _inspect(prepare: Prepare, pipeline: Pipeline, pair: tuple[str, Any, Any], golden: Any) -> None:
    name, board, _ = pair
    record = prepare(Frame(0, board, "bench", name, 0.0), golden)
    if record.refused:
        raise RuntimeError(f"{name}: refused by the prepare stage: {record.refusal.message}")
    detect(pipeline, [record])


def _new_design(runtime: Runtime, golden_view: bool, pair: tuple[str, Any, Any]) -> None:
    """``pair`` inspected as a design never met: a pipeline of its own, so that no golden features are kept from an
    earlier round (a pipeline keeps the last ``FEATURES_KEPT`` designs' and the boards cycle)."""
    pipeline = Pipeline(runtime, golden_view=golden_view)
    _inspect(Prepare(pipeline, Designs(None)), pipeline, pair, pair[2])


def _cycling(fn: Callable[[int], Any], n: int) -> Callable[[], Any]:
    state = {"i": 0}

    def call() -> Any:
        state["i"] = (state["i"] + 1) % n
        return fn(state["i"])

    return call


def run(  # noqa: PLR0913 - the command line's options
    weights: str | None,
    data: str | None,
    boards: int,
    threads: int,
    iters: int,
    photo_scale: float | None = None,
    half: bool | str = "auto",
) -> dict[str, Any]:
    """Time every candidate interleaved; ``{"timings", "ratios_vs_yolov8n", ...}``. ``photo_scale``: time photograph
    frames instead (``benchmarks/photo_frames.py``: the pairs enlarged and rendered), against YOLOv8n tiled over them.
    ``half``: the checkpoint's precision (``Runtime.load``: ``auto``, ``False`` float32, ``"bf16"``)."""
    torch.set_num_threads(threads)
    runtime = Runtime.load(weights or DEFAULT_REFERENCE_WEIGHTS, device="cpu", half=half)
    if runtime.channels != 2:
        raise ValueError(f"{runtime.path}: a single-image model; this benchmark times a golden-template model's frames")
    pairs = load_pairs(data, boards, runtime.class_names)
    if not pairs:
        raise ValueError(f"{data}: no board with a golden image to time")
    if photo_scale is not None:
        return _photographs(runtime, photo_pairs(pairs, photo_scale), threads, iters) | {"photo_scale": photo_scale}
    candidates = {**frame_candidates(runtime, pairs), **(runtime_calls(runtime, "model") if runtime.caches_golden else {})}
    yolo = build_yolov8n(runtime.imgsz)
    if yolo is not None:
        x = torch.rand(1, 3, runtime.imgsz, runtime.imgsz)
        candidates["yolov8n"] = lambda: yolo[0](x)
    timings, ratios = _interleaved(candidates, iters, "yolov8n")
    return {
        "weights": str(runtime.path),
        "dtype": str(runtime.dtype).removeprefix("torch."),
        "threads": threads,
        "boards": len(pairs),
        "caches_golden": runtime.caches_golden,
        "timings": timings,
        "ratios_vs_yolov8n": ratios,
        "target_line_ratio": TARGET,
    }


def _interleaved(candidates: dict[str, Callable[[], Any]], iters: int, reference: str) -> tuple[dict[str, Any], dict[str, float]]:
    """``(timings, ratios)``: every candidate timed in the same rounds, and each one's paired ratio to ``reference``'s
    (``{}`` when ``reference`` is not among them: YOLOv8n needs ultralytics)."""
    raw: dict[str, list[float]] = {}
    with torch.inference_mode():
        timings = measure_interleaved(candidates, iters, raw=raw)
    if reference not in raw:
        return timings, {}
    return timings, {k: round(paired_ratio(raw[k], raw[reference]), 3) for k in raw if k != reference}


def _photographs(runtime: Runtime, pairs: Sequence[tuple[str, Any, Any]], threads: int, iters: int) -> dict[str, Any]:
    """The photograph frames' candidates (the golden view's line and new-golden cases) and YOLOv8n tiled over the
    first frame at its native resolution, interleaved: ms per frame and per megapixel, paired ratios."""
    board = pairs[0][1]
    record = Prepare(Pipeline(runtime), Designs(None))(Frame(0, board, "bench", pairs[0][0], 0.0), pairs[0][2])
    if record.refused:
        raise ValueError(f"{pairs[0][0]}: the photograph was refused by the prepare stage: {record.refusal.message}")
    candidates = frame_candidates(runtime, pairs, frame_views=False)
    yolo = build_yolov8n(runtime.imgsz)
    tiles_yolo = 0
    if yolo is not None:
        candidates["yolov8n_tiled"], tiles_yolo = yolo_tiled(yolo[0], board, runtime.imgsz)
    timings, ratios = _interleaved(candidates, iters, "yolov8n_tiled")
    megapixels = board.shape[0] * board.shape[1] / 1e6
    per_mp = {k: round(v["median_ms"] / megapixels, 1) for k, v in timings.items()}
    return {
        "weights": str(runtime.path),
        "dtype": str(runtime.dtype).removeprefix("torch."),
        "threads": threads,
        "frames": len(pairs),
        "frame_px": [int(board.shape[1]), int(board.shape[0])],
        "megapixels": round(megapixels, 2),
        "working_scale": record.working_scale,
        "model_inputs": len(record.plan) if record.plan is not None else 1,
        "yolov8n_tiles": tiles_yolo,
        "timings": timings,
        "ms_per_megapixel": per_mp,
        "ratios_vs_yolov8n_tiled": ratios,
        "target_photo_ratio": PHOTO_TARGET,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", help="golden-template checkpoint or artifact (default: the bundled deeppcb_ref.pt)")
    parser.add_argument("--data", help="COCO json with reference entries (default: the bundled samples)")
    parser.add_argument("--boards", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--out", help="write the result as JSON here")
    parser.add_argument(
        "--precision", choices=list(PRECISIONS), default="auto", help="the checkpoint's precision (Runtime.load half)"
    )
    parser.add_argument("--photographs", action="store_true", help="time photograph-sized frames (benchmarks/photo_frames.py)")
    parser.add_argument("--photo-scale", type=float, default=PHOTO_SCALE, help=f"their enlargement (default {PHOTO_SCALE})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    photo_scale = args.photo_scale if args.photographs else None
    half = precision_half(args.precision)
    return json_command(lambda: run(args.weights, args.data, args.boards, args.threads, args.iters, photo_scale, half), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
