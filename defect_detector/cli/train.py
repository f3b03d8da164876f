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
    from defect_detector.core.config import load_config
    from defect_detector.engine.state import adopt_init_architecture
    from defect_detector.engine.trainer import fit

    cfg = load_config(args.config, args.overrides)
    if not args.resume and not _names_model(args.config, args.overrides):
        cfg = adopt_init_architecture(cfg)  # fine-tuning: the architecture of train.init_weights
    run_dir = fit(cfg, resume=args.resume, exist_ok=args.exist_ok, threads=args.threads, allow_data_change=args.allow_data_change)
    print(f"run folder: {run_dir}")
    if not args.no_baseline:
        import time

        from defect_detector.inspect.calibrate import calibrate_run

        start = time.perf_counter()
        baseline = calibrate_run(run_dir, cfg.data.train, cfg.data.train_images)
        print(
            f"drift baseline: {baseline.count} training images in {time.perf_counter() - start:.0f} s, carried in best.pt and last.pt "
            f"(predict monitors the camera with them; {run_dir / 'baseline.json'})"
        )


def _names_model(path: str, overrides: list[str]) -> bool:
    """Whether the YAML at ``path`` or an override names the ``model`` section (then ``train.init_weights`` must fit it)."""
    import yaml

    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    return (isinstance(raw, dict) and "model" in raw) or any(o.strip().startswith("model.") for o in overrides)
