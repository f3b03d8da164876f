"""``defect-detector info``: parameters, FLOPs and metrics of weights, and the designs they were taught (each with its
point, its tolerance places learnt from good boards, the places operators rejected at the station, the limits
it sets over the weights' and the good boards its own drift level was read on: 0 for none)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(sub: Any) -> None:
    """The ``info`` subcommand."""
    p = sub.add_parser("info", help="print parameters, FLOPs and metrics of a checkpoint")
    p.add_argument("--weights", help="checkpoint (default: bundled DeepPCB model)")


def run(args: argparse.Namespace) -> None:
    from defect_detector.model.checkpoint import load_checkpoint
    from defect_detector.model.summary import model_summary

    loaded = load_checkpoint(args.weights)
    summary = model_summary(loaded.model, loaded.config.data.imgsz)
    info = {"weights": str(loaded.path), "class_names": list(loaded.class_names), **summary, "metrics": loaded.metrics}
    info["designs"] = [
        {"name": d["name"], "key": d["key"], "conf": d.get("conf")}
        | {"tolerance_places": len(d.get("tolerance", [])), "rejected_places": len(d.get("rejected", []))}
        | {"area_polygons": len(d.get("area", [])), "limits": d.get("limits") or {}}
        | {"drift_level_boards": (d.get("drift") or {}).get("boards", 0)}
        for d in loaded.taught
    ]
    print(json.dumps(info, indent=2))
