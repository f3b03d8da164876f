"""Latency of reference-model architectures (``model.fusion``), interleaved with a baseline, TorchScript, batch 1.

Each candidate is the deployed computation (:class:`DeployModel`: BatchNorm folded, channels_last, oneDNN conv +
SiLU where available, decode and the monitored layers' statistics) traced as ``export`` traces it. A siamese
model is timed twice: ``<name>`` is the whole ``[1, 2, S, S]`` pass (both trunk passes, what the exported artifact
runs), ``<name>_cached`` only the per-frame part (:class:`CachedFrame`: the board's trunk pass, fusion, neck, head,
decode and statistics) against golden-image trunk features computed once outside the timed call. Candidates run
one call each per round (``bench.measure_interleaved``) and are compared with the first weights given by the
median of per-round ratios (``bench.paired_ratio``), which cancels load shared by the machine.

    python -m benchmarks.bench_fusion W_BASELINE W_OTHER ... [--imgsz 640] [--threads 1] [--iters 60] [--out JSON]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from benchmarks.bench import measure_interleaved, paired_ratio
from defect_detector.core.constants import DEFAULT_LAYERS
from defect_detector.export import DeployModel, quiet_jit
from defect_detector.export.onednn import onednn_available
from defect_detector.model.checkpoint import load_checkpoint
from defect_detector.model.postprocess import decode
from defect_detector.model.summary import count_flops, count_flops_cached_frame, count_parameters


class CachedFrame(nn.Module):
    """The per-frame part of a siamese :class:`DeployModel`: ``(board [B, 1, S, S], golden c3, golden c4) ->
    (pred [B, A, 4 + C], stats [B, L, 2])``, the golden features from ``deploy.model.golden_features``."""

    def __init__(self, deploy: DeployModel) -> None:
        super().__init__()
        self.deploy = deploy

    def forward(self, board: torch.Tensor, c3: torch.Tensor, c4: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.deploy
        raw = d.model.forward_cached(board, [c3, c4])
        pred = decode(raw, d.points, d.anchor_strides, d.box_bins)
        stats = d.monitor.stats() if d.monitor is not None else torch.zeros_like(pred[:, :0, :2])
        return pred, stats


def _trace(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.jit.ScriptModule:
    with torch.no_grad(), quiet_jit():
        return torch.jit.trace(module, inputs, check_trace=False)


def candidates(weights: Sequence[str], imgsz: int) -> tuple[dict[str, Callable[[], Any]], dict[str, dict[str, Any]]]:
    """``({name: timed call}, {name: facts})`` for each checkpoint (named by its file stem, then its folder)."""
    calls: dict[str, Callable[[], Any]] = {}
    facts: dict[str, dict[str, Any]] = {}
    for path in weights:
        loaded = load_checkpoint(path)
        model = loaded.model.eval()
        name = Path(path).parent.parent.name if Path(path).stem in ("best", "last") else Path(path).stem  # runs/NAME/weights/best.pt
        deploy = DeployModel(model, imgsz, DEFAULT_LAYERS, cpu_fusion=onednn_available()).eval()
        x = torch.rand(1, deploy.in_channels, imgsz, imgsz).contiguous(memory_format=torch.channels_last)
        traced = _trace(deploy, (x,))
        fusion = getattr(model, "fusion", "early")
        facts[name] = {"weights": str(path), "fusion": fusion, "params": count_parameters(model), "gflops": count_flops(model, imgsz) / 1e9}
        calls[name] = lambda traced=traced, x=x: traced(x)
        if fusion == "siamese":
            with torch.no_grad():
                c3, c4 = deploy.model.golden_features(x[:, 1:2])
            board = x[:, :1].contiguous(memory_format=torch.channels_last)
            per_frame = _trace(CachedFrame(deploy), (board, c3, c4))
            calls[f"{name}_cached"] = lambda t=per_frame, b=board, c3=c3, c4=c4: t(b, c3, c4)
            facts[f"{name}_cached"] = {
                **facts[name],
                "gflops": count_flops_cached_frame(model, imgsz) / 1e9,
                "part": "per frame: the board's trunk pass + fusion + neck + head + decode + stats",
            }
    return calls, facts


def run(weights: Sequence[str], imgsz: int = 640, threads: int = 1, iters: int = 60) -> dict[str, Any]:
    """Interleaved latencies and per-round ratios to the first candidate."""
    torch.set_num_threads(threads)
    calls, facts = candidates(weights, imgsz)
    raw: dict[str, list[float]] = {}
    with torch.no_grad():
        summary = measure_interleaved(calls, iters, warmup=3, raw=raw)
    base = next(iter(calls))
    rows = {name: {**facts[name], **summary[name], "ratio_to_" + base: round(paired_ratio(raw[name], raw[base]), 3)} for name in calls}
    return {"imgsz": imgsz, "threads": threads, "iters": iters, "onednn": onednn_available(), "rows": rows}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("weights", nargs="+", help="checkpoints; the first is the baseline of the ratios")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--out", help="write the result JSON here")
    args = parser.parse_args(argv)
    result = run(args.weights, args.imgsz, args.threads, args.iters)
    for name, row in result["rows"].items():
        ratio = next(v for k, v in row.items() if k.startswith("ratio_to_"))
        print(f"{name:>28}: median {row['median_ms']:7.2f} ms  min {row['min_ms']:7.2f} ms  x{ratio:.3f}  {row['gflops']:.3f} GFLOPs")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
