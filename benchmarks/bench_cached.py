"""Per-frame model time of a siamese golden-template model against one fixed golden board (the line's case), CPU, batch 1:
``Runtime.infer`` (the pair as two channels: both trunk passes every frame) against ``Runtime.infer_cached`` (the golden
image's trunk features computed once by ``Runtime.golden_features``, outside the timed call), for each artifact kind
asked, interleaved (one call of each candidate per round, ``benchmarks.timing.measure_interleaved``) and compared by
the median of per-round ratios (``paired_ratio``), which cancels load shared by the machine. One run per thread count.

    python -m benchmarks.bench_cached [--weights W] [--imgsz 640] [--threads 2 1] [--kinds checkpoint torchscript]
                                      [--iters 40] [--out JSON]

``--weights`` defaults to the bundled golden-template model (``defect_detector/weights/deeppcb_ref.pt``). Kinds:
``checkpoint`` (traced at load, as ``Runtime.load`` does), ``torchscript`` and ``onnx`` (exported here into a temporary
folder) and ``pt2`` (AOTInductor: minutes of compiling at 640).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.timing import measure_interleaved, paired_ratio
from defect_detector.core.io import atomic_write_json
from defect_detector.export import export_onnx, export_pt2, export_torchscript, parity_inputs
from defect_detector.inspect.runtime import Runtime
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, load_checkpoint

REF_WEIGHTS = DEFAULT_REFERENCE_WEIGHTS
KINDS = ("checkpoint", "torchscript", "onnx", "pt2")
_EXPORTS: dict[str, tuple[str, Callable[..., Any]]] = {
    "torchscript": ("model.torchscript.pt", export_torchscript),
    "onnx": ("model.onnx", export_onnx),
    "pt2": ("model.pt2", export_pt2),
}


def artifacts(weights: str | Path, kinds: Sequence[str], imgsz: int, folder: Path) -> dict[str, Path]:
    """``{kind: path}``: ``weights`` itself for ``checkpoint``, an export into ``folder`` for the other kinds."""
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown kinds {unknown}; choose from {', '.join(KINDS)}")
    paths: dict[str, Path] = {}
    loaded = load_checkpoint(weights)
    for kind in kinds:
        if kind == "checkpoint":
            paths[kind] = Path(weights)
            continue
        name, export = _EXPORTS[kind]
        export(loaded, folder / name, imgsz=imgsz)
        paths[kind] = folder / name
    return paths


def candidates(paths: dict[str, Path], imgsz: int, threads: int) -> dict[str, Callable[[], Any]]:
    """``{<kind>_infer, <kind>_cached: timed call}`` for each artifact, loaded with ``threads``; one synthetic board and
    its golden image (``export.parity_inputs``), the golden features computed once here."""
    calls: dict[str, Callable[[], Any]] = {}
    for kind, path in paths.items():
        runtime = Runtime.load(path, device="cpu", threads=threads, imgsz=imgsz if kind == "checkpoint" else None)
        calls.update(runtime_calls(runtime, kind))
    return calls


def runtime_calls(runtime: Runtime, label: str) -> dict[str, Callable[[], Any]]:
    """``{<label>_infer, <label>_cached: timed call}`` of one loaded siamese ``runtime``: the pair through ``infer``, and
    the board through ``infer_cached`` against its golden features computed once here (one synthetic board and its
    golden image, ``export.parity_inputs``). ``ValueError`` for a runtime without the cached path."""
    if not runtime.caches_golden:
        raise ValueError(f"{runtime.path}: not a siamese golden-template model with golden and frame graphs (caches_golden False)")
    pair = parity_inputs(runtime.imgsz, channels=2)[:1]
    image, features = pair[:, :1], runtime.golden_features(pair[:, 1:2])
    return {f"{label}_infer": lambda: runtime.infer(pair), f"{label}_cached": lambda: runtime.infer_cached(image, features)}


def run(
    weights: str | Path = REF_WEIGHTS,
    imgsz: int = 640,
    threads: Sequence[int] = (2, 1),
    kinds: Sequence[str] = ("checkpoint", "torchscript"),
    iters: int = 40,
) -> dict[str, Any]:
    """``{"weights", "imgsz", "iters", "runs": [{"threads", "rows": {name: timing}, "cached_over_infer": {kind: ratio}}]}``."""
    before = torch.get_num_threads()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = artifacts(weights, kinds, imgsz, Path(tmp))
        try:
            for count in threads:
                calls = candidates(paths, imgsz, count)
                raw: dict[str, list[float]] = {}
                rows = measure_interleaved(calls, iters, warmup=3, raw=raw)
                ratios = {kind: round(paired_ratio(raw[f"{kind}_cached"], raw[f"{kind}_infer"]), 3) for kind in paths}
                runs.append({"threads": count, "rows": rows, "cached_over_infer": ratios})
        finally:
            torch.set_num_threads(before)
    return {"weights": str(weights), "imgsz": imgsz, "iters": iters, "runs": runs}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default=str(REF_WEIGHTS), help="a siamese golden-template checkpoint")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    parser.add_argument("--kinds", nargs="+", default=["checkpoint", "torchscript"], choices=KINDS)
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--out", help="write the result JSON here")
    args = parser.parse_args(argv)
    result = run(args.weights, args.imgsz, args.threads, args.kinds, args.iters)
    for entry in result["runs"]:
        for name, row in entry["rows"].items():
            print(f"threads {entry['threads']} {name:>18}: median {row['median_ms']:7.2f} ms  p90 {row['p90_ms']:7.2f} ms")
        print(f"threads {entry['threads']} cached / infer (paired): {entry['cached_over_infer']}")
    if args.out:
        atomic_write_json(args.out, result)


if __name__ == "__main__":
    main()
