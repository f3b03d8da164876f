"""Architecture search by measurement: candidate golden-template networks against a traced YOLOv8n, interleaved.

Each candidate is the bundled golden-template model's architecture (``configs/deeppcb_ref.yaml``'s ``model`` section:
siamese trunk, DFL box head) with some ``model.*`` keys changed (:data:`CANDIDATES`): where the channels sit (fewer
at strides 2-4: ``stem_channels``, ``widths``), a stem that reaches stride 4 at once (``stem: patch4``), depthwise or
re-parameterisable dense blocks per stage (``blocks``), and where the golden image's features meet the board's
(``fusion: siamese``: in the trunk at strides 8 and 16, the golden image's trunk cached per design; ``early``: at the
input, both images through one trunk every frame). Weights are random (speed does not depend on their values).

What is timed is what deploys: :class:`DeployModel` (rep blocks re-parameterised, BatchNorm folded, channels_last,
oneDNN conv + SiLU where available, decode, the monitored layers' statistics), traced and frozen by
``export.trace_deploy_model`` as ``export`` does, batch 1, ``imgsz`` x ``imgsz``. For a siamese candidate that is the
per-frame graph ``frame`` (the board against cached golden features), for an early one ``forward`` on the pair.
YOLOv8n (ultralytics' ``yolov8n.yaml``, random init, fused, traced, frozen, NCHW ``[1, 3, S, S]``: ``benchmarks.bench``)
runs in the same rounds: one call of each per round (``timing.measure_interleaved``), and each candidate's figure is
the median over rounds of its time / YOLOv8n's time in that round (``timing.paired_ratio``), so load shared with other
work on the machine cancels. Absolute milliseconds are recorded but are not the result.

Counts, of the deployed (re-parameterised, BatchNorm-folded) graph's timed part, with ``torch.utils.flop_counter``:
``macs`` = multiply-adds of convolutions and matrix products; ``flops`` = 2 x ``macs`` (FlopCounterMode's convention).
``params`` of the training form (what trains and what a checkpoint holds) and of the deployed form.

    python -m benchmarks.bench_arch [--imgsz 640] [--threads 2 1] [--iters 20] [--only NAME ...] [--out JSON] [--markdown]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.bench import build_yolov8n
from benchmarks.timing import measure_interleaved, paired_ratio
from defect_detector.core.config import ModelConfig, load_config
from defect_detector.core.constants import DEEPPCB_CLASSES, DEFAULT_LAYERS
from defect_detector.export import GOLDEN_FEATURES, DeployModel, trace_deploy_model
from defect_detector.export.onednn import onednn_available
from defect_detector.model.detector import build_model
from defect_detector.model.summary import count_flops, count_flops_cached_frame, count_parameters

BASE_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "deeppcb_ref.yaml"
REP12 = ["rep", "rep", "depthwise", "depthwise"]
CANDIDATES: dict[str, dict[str, Any]] = {
    "bundled": {},
    "stem16": {"stem_channels": 16},
    "patch4": {"stem": "patch4", "stem_channels": 24},
    "rep1": {"blocks": ["rep", "depthwise", "depthwise", "depthwise"]},
    "rep12": {"blocks": REP12},
    "rep12_narrow": {"blocks": REP12, "widths": [16, 32, 128, 256], "stem_channels": 16},
    "patch4_rep12": {"stem": "patch4", "stem_channels": 16, "blocks": REP12, "widths": [16, 32, 128, 256]},
    "patch4_early": {"stem": "patch4", "stem_channels": 24, "fusion": "early"},
    "bundled_early": {"fusion": "early"},
}
"""Name -> ``model.*`` keys changed from the bundled golden-template architecture (``configs/deeppcb_ref.yaml``)."""
REFERENCE = "yolov8n"


def candidate_config(changes: dict[str, Any], base: Path = BASE_CONFIG) -> ModelConfig:
    """The bundled golden-template model section with ``changes`` applied (validated like a YAML config)."""
    model = load_config(base).model
    return ModelConfig(**{**model.model_dump(), **changes})


def build_candidate(cfg: ModelConfig, imgsz: int) -> tuple[Callable[[], Any], dict[str, Any]]:
    """``(the timed call, facts)`` for one architecture: its traced, frozen deploy graph on random batch-1 input
    (``frame`` against cached golden features for a siamese model, ``forward`` otherwise), and its counts."""
    torch.manual_seed(0)
    model = build_model(cfg, len(DEEPPCB_CLASSES)).eval()
    plain = DeployModel(model, imgsz, (), cpu_fusion=False).model  # re-parameterised, BatchNorm folded: what is counted
    siamese = cfg.fusion == "siamese"
    flops = count_flops_cached_frame(plain, imgsz) if siamese else count_flops(plain, imgsz)
    base = load_config(BASE_CONFIG).model.model_dump()
    facts = {
        "changes": {k: v for k, v in cfg.model_dump().items() if v != base[k]},
        "params_train": count_parameters(model),
        "params_deploy": count_parameters(plain),
        "macs": flops // 2,
        "flops": flops,
        "timed": "frame (golden features cached)" if siamese else "forward (image + golden image)",
    }
    deploy = DeployModel(model, imgsz, DEFAULT_LAYERS, cpu_fusion=onednn_available()).eval()
    traced = trace_deploy_model(deploy)
    x = torch.rand(1, cfg.in_channels, imgsz, imgsz).contiguous(memory_format=torch.channels_last)
    if not siamese:
        return (lambda: traced(x)), facts
    with torch.no_grad():
        c3, c4 = traced.golden(x[:, 1:2])[: len(GOLDEN_FEATURES)]
    board = x[:, :1].contiguous(memory_format=torch.channels_last)
    return (lambda: traced.frame(board, c3, c4)), facts


def run(
    imgsz: int = 640, threads: Sequence[int] = (2, 1), iters: int = 20, only: Sequence[str] | None = None, yolo: bool = True
) -> dict[str, Any]:
    """Build every candidate (``only``: those names) and YOLOv8n, then time them interleaved at each thread count.

    Returns ``{"imgsz", "iters", "onednn", "reference", "rows": {name: facts}, "timings": {threads: {name: {"median_ms",
    ..., "ratio"}}}}``; ``ratio`` is the paired ratio to YOLOv8n (to the first candidate when ``yolo`` is False or
    ultralytics is missing; ``reference`` names it)."""
    calls: dict[str, Callable[[], Any]] = {}
    rows: dict[str, dict[str, Any]] = {}
    for name in only or CANDIDATES:
        calls[name], rows[name] = build_candidate(candidate_config(CANDIDATES[name]), imgsz)
    built = build_yolov8n(imgsz) if yolo else None
    if built is not None:
        traced_yolo, yolo_flops = built
        x3 = torch.rand(1, 3, imgsz, imgsz)
        calls[REFERENCE] = lambda: traced_yolo(x3)
        rows[REFERENCE] = {"params_deploy": None, "params_train": _yolov8n_params(), "macs": yolo_flops // 2, "flops": yolo_flops}
        rows[REFERENCE]["timed"] = "ultralytics yolov8n.yaml, random init, fused, traced, frozen, [1, 3, S, S]"
    reference = REFERENCE if built is not None else next(iter(calls))
    timings: dict[int, dict[str, dict[str, float]]] = {}
    for n in threads:
        torch.set_num_threads(n)
        raw: dict[str, list[float]] = {}
        with torch.no_grad():
            summary = measure_interleaved(calls, iters, warmup=3, raw=raw)
        timings[n] = {name: {**summary[name], "ratio": round(paired_ratio(raw[name], raw[reference]), 3)} for name in calls}
    return {"imgsz": imgsz, "iters": iters, "onednn": onednn_available(), "reference": reference, "rows": rows, "timings": timings}


def _yaml(value: Any) -> str:
    """A config value as YAML flow style writes it (``[rep, rep, depthwise, depthwise]``)."""
    return "[" + ", ".join(map(str, value)) + "]" if isinstance(value, (list, tuple)) else str(value)


def _yolov8n_params() -> int:
    """Parameters of ultralytics' YOLOv8n as built from ``yolov8n.yaml`` (80 classes; the traced graph holds constants)."""
    from ultralytics import YOLO  # present: build_yolov8n just used it

    return count_parameters(YOLO("yolov8n.yaml").model)


def markdown(result: dict[str, Any]) -> str:
    """The result as a Markdown table: one row per candidate, the paired ratio to the reference per thread count."""
    threads = list(result["timings"])
    head = ["candidate", "changes", "params (train / deploy)", "GMACs", "GFLOPs"] + [f"x {result['reference']}, {n} thr" for n in threads]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, row in result["rows"].items():
        deployed = "-" if row["params_deploy"] is None else f"{row['params_deploy'] / 1e6:.3f}M"
        params = f"{row['params_train'] / 1e6:.3f}M / {deployed}"
        changes = ", ".join(f"{k}: {_yaml(v)}" for k, v in row.get("changes", {}).items()) or "-" if name != REFERENCE else row["timed"]
        ratios = [f"{result['timings'][n][name]['ratio']:.3f}" for n in threads]
        lines.append(f"| {name} | {changes} | {params} | {row['macs'] / 1e9:.3f} | {row['flops'] / 1e9:.3f} | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--only", nargs="+", choices=list(CANDIDATES), help="time only these candidates")
    parser.add_argument("--out", help="write the result JSON here")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = parser.parse_args(argv)
    result = run(args.imgsz, args.threads, args.iters, args.only)
    print(markdown(result) if args.markdown else json.dumps(result["timings"], indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
