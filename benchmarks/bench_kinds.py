"""Every artifact kind in one interleaved run: TorchScript, ``.pt2``, ONNX float32, ONNX int8 (and a traced YOLOv8n).

Each kind is written by the real export (``export_torchscript`` as ``export`` writes it on this machine, ``export_pt2``,
``export_onnx``, ``export_int8`` calibrated on ``calib``), loaded back by :class:`Runtime` as ``predict`` loads it, and
timed through ``Runtime.infer`` on one ``[1, C, S, S]`` input, one call of each kind per round, so that background load
falls on all of them alike. Ratios are medians of per-round ratios against the float32 TorchScript artifact
(:func:`benchmarks.timing.paired_ratio`). ONNX Runtime runs with its threads not spinning (``inspect/artifacts.py``):
spinning threads would steal the cores from the candidate timed next, as they would from a line PC's other work.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.timing import measure_interleaved, paired_ratio
from defect_detector.data.synth import write_synthetic_dataset
from defect_detector.export import export_int8, export_onnx, export_pt2, export_torchscript
from defect_detector.inspect.runtime import Runtime
from defect_detector.model.checkpoint import LoadedModel

TARGETS = {"int8_vs_torchscript_max": 0.6, "pt2_vs_torchscript_max": 1.0}
KINDS = ("torchscript", "pt2", "onnx", "int8")


def export_kinds(loaded: LoadedModel, folder: Path, imgsz: int, calib: str | None, calib_images: int) -> dict[str, Path]:
    """Write every kind of ``loaded`` into ``folder`` (a kind whose file is there already is kept: ``--keep DIR`` reruns
    reuse them); ``calib``: the int8 calibration json (None: 8 synthetic boards, each its own golden image for a
    golden-template model: speed does not depend on where the ranges came from)."""
    paths = {kind: folder / name for kind, name in zip(KINDS, ("m.torchscript.pt", "m.pt2", "m.onnx", "m.int8.onnx"))}
    if all(p.is_file() for p in paths.values()):
        return paths
    checked = calib is not None  # an int8 model calibrated on synthetic frames is timed, not deployed: no accuracy check
    if calib is None:
        ann = write_synthetic_dataset(folder / "calib", n_images=8, height=imgsz, width=imgsz, seed=0)
        raw = json.loads(ann.read_text())
        for image in raw["images"]:
            image["reference"] = image["file_name"]
        ann.write_text(json.dumps(raw))
        calib = str(ann)
    export_torchscript(loaded, paths["torchscript"], imgsz=imgsz, optimize=False)
    export_pt2(loaded, paths["pt2"], imgsz=imgsz)
    export_onnx(loaded, paths["onnx"], imgsz=imgsz)
    export_int8(loaded, paths["int8"], calib, imgsz=imgsz, max_images=calib_images, check=checked)
    return paths


def bench_kinds(
    loaded: LoadedModel,
    imgsz: int = 640,
    threads: int = 2,
    iters: int = 60,
    yolo: bool = False,
    calib: str | None = None,
    calib_images: int = 100,
    keep: str | None = None,
) -> dict[str, Any]:
    """Time every kind (and YOLOv8n with ``yolo``, when ultralytics is installed) at batch 1, ``threads`` threads.

    ``keep``: export into this folder and keep the files (a rerun reuses them) instead of a temporary one.
    Returns ``{"latency": {kind: summary + "vs_torchscript"}, "ratios": {...}, "targets", "threads", "imgsz", "yolov8n"}``."""
    from benchmarks.bench import build_yolov8n

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(keep) if keep else Path(tmp)
            folder.mkdir(parents=True, exist_ok=True)
            paths = export_kinds(loaded, folder, imgsz, calib, calib_images)
            runtimes = {kind: Runtime.load(path, device="cpu", threads=threads) for kind, path in paths.items()}
            channels = runtimes["torchscript"].channels
            x = torch.rand(1, channels, imgsz, imgsz)
            candidates: dict[str, Callable[[], Any]] = {kind: (lambda r=r: r.infer(x)) for kind, r in runtimes.items()}
            yolo_info: dict[str, Any] = {"available": False}
            if yolo:
                built = build_yolov8n(imgsz)
                if built is None:
                    yolo_info["reason"] = "ultralytics is not installed"
                else:
                    model, flops = built
                    x3 = torch.rand(1, 3, imgsz, imgsz)
                    candidates["yolov8n"] = lambda: _no_grad(model, x3)
                    yolo_info = {"available": True, "gflops": flops / 1e9, "source": "ultralytics yolov8n.yaml, random init, fused, traced"}
            raw: dict[str, list[float]] = {}
            summary = measure_interleaved(candidates, iters, raw=raw)
    finally:
        torch.set_num_threads(before)
    for name, row in summary.items():
        row["vs_torchscript"] = round(paired_ratio(raw[name], raw["torchscript"]), 3)
    ratios = {
        "int8_vs_torchscript": summary["int8"]["vs_torchscript"],
        "pt2_vs_torchscript": summary["pt2"]["vs_torchscript"],
        "onnx_vs_torchscript": summary["onnx"]["vs_torchscript"],
        "int8_vs_onnx": round(paired_ratio(raw["int8"], raw["onnx"]), 3),
    }
    if "yolov8n" in raw:
        ratios.update({f"{k}_vs_yolov8n": round(paired_ratio(raw[k], raw["yolov8n"]), 3) for k in KINDS})
    return {"imgsz": imgsz, "threads": threads, "batch": 1, "latency": summary, "ratios": ratios, "targets": TARGETS, "yolov8n": yolo_info}


def _no_grad(model: Any, x: torch.Tensor) -> Any:
    with torch.inference_mode():
        return model(x)


def print_kinds(result: dict[str, Any]) -> None:
    """The kinds table and ratios, one line each."""
    print(f"artifact kinds at {result['imgsz']}x{result['imgsz']}, batch 1, {result['threads']} threads, interleaved:")
    for name, row in result["latency"].items():
        print(
            f"{name:>12}: median {row['median_ms']:8.2f} ms  p90 {row['p90_ms']:8.2f} ms  min {row['min_ms']:8.2f} ms  "
            f"x{row['vs_torchscript']:.3f} of TorchScript"
        )
    targets = result["targets"]
    print(
        f"int8 / TorchScript {result['ratios']['int8_vs_torchscript']:.3f} (target <= {targets['int8_vs_torchscript_max']}), "
        f".pt2 / TorchScript {result['ratios']['pt2_vs_torchscript']:.3f} (target <= {targets['pt2_vs_torchscript_max']}), "
        f"int8 / ONNX float32 {result['ratios']['int8_vs_onnx']:.3f}"
    )
