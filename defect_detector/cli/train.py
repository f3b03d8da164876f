"""``defect-detector train``: train a detector from a YAML config."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    """The ``train`` subcommand."""
    p = sub.add_parser("train", help="train a detector from a YAML config")
    p.add_argument("--config", required=True, help="YAML config, e.g. configs/deeppcb.yaml")
    p.add_argument("--resume", action="store_true", help="continue from runs/<name>/weights/last.pt")
    p.add_argument("--exist-ok", action="store_true", help="replace an earlier run of the same name")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: the cores not busy with other work)")
    p.add_argument(
        "--allow-data-change",
        action="store_true",
        help="--resume on training/validation jsons that changed since the run's last epoch (refused by default)",
    )
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.epochs=3")


def run(args: argparse.Namespace) -> None:
    from defect_detector.core.config import load_config
    from defect_detector.engine.trainer import fit

    cfg = load_config(args.config, args.overrides)
    run_dir = fit(cfg, resume=args.resume, exist_ok=args.exist_ok, threads=args.threads, allow_data_change=args.allow_data_change)
    print(f"run folder: {run_dir}")
