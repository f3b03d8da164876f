"""``defect-detector strip``: an inference-only copy of a checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    """The ``strip`` subcommand."""
    p = sub.add_parser("strip", help="inference-only copy of a checkpoint (EMA weights, config, metrics; no optimizer state)")
    p.add_argument("weights", help="training checkpoint, e.g. runs/NAME/weights/best.pt")
    p.add_argument("--out", required=True)
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override for the result, e.g. eval.f1_conf=0.5 (repeatable)")
    p.add_argument("--baseline", help="drift baseline JSON from `calibrate` to carry in the result (checked against the model)")
    p.add_argument(
        "--domain",
        action="append",
        metavar="GOLDEN",
        help="fit the design domain (which golden images look like the training ones) on these golden images and carry it: "
        "a COCO json's reference entries (the training set), a folder or an image; repeat it to fit one domain on all of them",
    )
    p.add_argument(
        "--scale",
        action="append",
        metavar="GOLDEN",
        help="fit only the scale the weights were validated at (domain.scale_range: coarser golden images are inspected "
        "downscaled to it) on these golden images, the rest of the domain kept or fitted by --domain (repeatable)",
    )


def run(args: argparse.Namespace) -> None:
    import torch

    from defect_detector.core.io import atomic_torch_save
    from defect_detector.model.checkpoint import load_checkpoint, strip_checkpoint

    loaded = load_checkpoint(args.weights)  # validates it loads into its model
    baseline = None
    if args.baseline:  # checked against the monitored layers, input size and classes, as export checks it
        from defect_detector.core.constants import DEFAULT_LAYERS
        from defect_detector.export.baseline import export_baseline
        from defect_detector.monitor.hooks import resolve_layers

        layers = resolve_layers(loaded.model, DEFAULT_LAYERS)
        baseline = export_baseline(loaded, args.baseline, layers, loaded.config.data.imgsz)[0]
    domain = None
    if args.domain:
        from defect_detector.engine.domain import fit_domain_files

        domain = fit_domain_files(args.domain)
    ckpt = torch.load(args.weights, map_location="cpu", weights_only=True)
    fitted = domain.to_dict() if domain else None
    if args.scale:
        fitted = _with_scale(fitted or ckpt.get("domain"), args.scale, args.weights)
    atomic_torch_save(strip_checkpoint(ckpt, args.set or [], baseline, fitted), args.out)
    stripped = load_checkpoint(args.out)
    print(f"wrote {args.out} ({Path(args.out).stat().st_size / 1e6:.2f} MB): EMA weights, config, class names, metrics")
    if args.set:
        print(f"config set: {', '.join(args.set)}")
    carried = f"from {args.baseline}" if args.baseline else "kept from the input" if stripped.baseline else "none"
    print(f"drift baseline: {carried} (predict monitors drift whenever the weights carry one)")
    if domain is not None:
        print(
            f"design domain: fitted on {domain.fitted_on} golden images of {', '.join(args.domain)} ({len(domain.references)} references, "
            f"threshold {domain.threshold:.2f}); predict warns once per golden image unlike them"
        )
    else:
        print(f"design domain: {'kept from the input' if stripped.domain else 'none'}")
    if args.scale:
        scale = stripped.domain["scale_range"]
        print(
            f"validated scale: fitted on {scale['fitted_on']} golden images of {', '.join(args.scale)} (detail {scale['detail']:g}, "
            f"narrowest tracks and gaps {scale['fine_width']:g} px); coarser designs are inspected downscaled to it"
        )
    if stripped.taught:
        print(f"taught designs: {len(stripped.taught)} kept from the input ({', '.join(d['name'] for d in stripped.taught)})")


def _with_scale(domain: dict[str, Any] | None, sources: list[str], weights: str) -> dict[str, Any]:
    """``domain`` (``DomainModel.to_dict()`` form) with its ``scale_range`` fitted on ``sources`` alone."""
    from defect_detector.engine.domain import fit_scale_files

    if domain is None:
        raise ValueError(f"{weights}: no design domain to carry a scale range; fit one with --domain")
    return {**domain, "scale_range": fit_scale_files(sources).to_dict()}
