"""``defect-detector train``: train a detector from a YAML config."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    """The ``train`` subcommand."""
    p = sub.add_parser("train", help="train a detector from a YAML config")
    p.add_argument("--config", required=True, help="YAML config, e.g. configs/deeppcb.yaml")
    p.add_argument("--resume", action="store_true", help="continue from runs/<name>/weights/last.pt")
    p.add_argument("--exist-ok", action="store_true", help="replace an earlier run of the same name")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: the cores not busy with other work)")
    p.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip calibrating the drift baseline at the end (default: best.pt and last.pt carry one, from 300 training images)",
    )
    p.add_argument(
        "--allow-data-change",
        action="store_true",
        help="--resume on training/validation jsons that changed since the run's last epoch (refused by default)",
    )
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.epochs=3")


def run(args: argparse.Namespace) -> None:
    import time

    from defect_detector.core.config import load_config
    from defect_detector.engine.budget import Budget
    from defect_detector.engine.state import adopt_init_architecture, adopt_init_operating_point
    from defect_detector.engine.trainer import fit
    from defect_detector.jobs.calibrate import RUN_CALIBRATION_IMAGES, calibrate_run
    from defect_detector.jobs.validate import TrainingValidation

    started = time.perf_counter()
    cfg = load_config(args.config, args.overrides)
    named = _named_keys(args.config, args.overrides)
    if not args.resume and not any(k == "model" or k.startswith("model.") for k in named):
        cfg = adopt_init_architecture(cfg)  # fine-tuning: the architecture of train.init_weights
    if not args.resume:
        cfg = adopt_init_operating_point(cfg, named)  # and its NMS IoU and cross-class demotion
    frames = 0 if args.no_baseline else RUN_CALIBRATION_IMAGES
    budget = Budget.start(cfg.train.max_minutes, started, frames, cfg.model.in_channels == 2)
    run_dir = fit(
        cfg,
        resume=args.resume,
        exist_ok=args.exist_ok,
        threads=args.threads,
        allow_data_change=args.allow_data_change,
        budget=budget,
        validator=TrainingValidation(),  # as `val` scores: the frame pipeline
    )
    print(f"run folder: {run_dir}")
    if not args.no_baseline:
        print(calibrate_run(run_dir, cfg.data.train, cfg.data.train_images, budget=budget))
    if cfg.train.max_minutes is not None:
        print(f"train.max_minutes={cfg.train.max_minutes:g}: the run took {(time.perf_counter() - started) / 60:.1f} min")


def _named_keys(path: str, overrides: list[str]) -> set[str]:
    """The dotted keys (``model.widths``, ``eval.nms_iou``, ...) that the YAML at ``path`` or an override sets: what a
    fine-tune keeps from its config rather than from ``train.init_weights``."""
    import yaml

    def flat(tree: Any, prefix: str) -> set[str]:
        if not isinstance(tree, dict):
            return {prefix[:-1]}
        return {key for name, value in tree.items() for key in flat(value, f"{prefix}{name}.")} if tree else {prefix[:-1]}

    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    return (flat(raw, "") if isinstance(raw, dict) else set()) | {o.split("=", 1)[0].strip() for o in overrides}
