"""``defect-detector val``: score weights (checkpoint or exported artifact) on a COCO json through the frame pipeline."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from defect_detector.cli.errors import CliError, check_imgsz
from defect_detector.cli.options import PRECISION_CHOICES, PRECISION_HELP, TTA_HELP


def add_parser(sub: Any) -> None:
    p = sub.add_parser("val", help="score weights on a COCO json (mAP, per-class AP, DeepPCB F-score, operating points)")
    p.add_argument("--weights", help="checkpoint or artifact: .pt2, TorchScript, ONNX, int8 ONNX (default: the bundled DeepPCB model)")
    p.add_argument("--data", required=True, help="COCO json")
    p.add_argument("--images", help="images root (default: from the json)")
    p.add_argument("--imgsz", type=int, help="input size of a checkpoint (default: the model's; an artifact fixes its own)")
    p.add_argument("--conf", type=float, help="score threshold for the DeepPCB F-score (default: the operating point the weights store)")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--tta", help=TTA_HELP)
    p.add_argument("--precision", choices=PRECISION_CHOICES, default="auto", help=PRECISION_HELP)
    p.add_argument(
        "--no-register",
        action="store_true",
        help="golden-template models: use each json reference as given (already aligned) instead of registering it to its image",
    )
    p.add_argument("--out", help="write metrics JSON here")
    p.add_argument("--plots", help="write PR curves, confusion matrix and a grid of predictions (PNG) to this folder")
    p.add_argument(
        "--gallery",
        metavar="DIR",
        help="write an error gallery here: the lowest-scored true defects (misses at the operating point first) and the "
        "highest-scored false calls, board and golden crops side by side (index.html, one PNG sheet per kind)",
    )
    p.add_argument("--gallery-n", type=int, default=32, metavar="N", help="entries per kind in --gallery (default: 32)")


def run(args: argparse.Namespace) -> None:
    import torch

    from defect_detector.core.io import atomic_write_json
    from defect_detector.jobs.validate import validate

    check_imgsz(args.imgsz)
    if args.gallery_n < 1:
        raise CliError(f"--gallery-n must be >= 1, got {args.gallery_n}")
    if args.threads:
        torch.set_num_threads(args.threads)
    result = validate(
        args.weights, args.data, args.images, args.conf, args.tta, align=not args.no_register, imgsz=args.imgsz, precision=args.precision
    )
    metrics, runtime = result.metrics, result.runtime
    keys = ("map50", "map50_95", "per_class", "absent_classes", "f1_iou033", "precision", "recall", "at_conf")
    keys += ("operating_points", "per_group", "box_fit")
    out = {k: metrics[k] for k in keys}
    out.update(
        {
            "f1_conf": metrics["f1_conf"],
            "tta": runtime.tta,
            "images": len(result.predictions),
            "not_inspected": result.not_inspected,
            "weights": str(runtime.path),
            "kind": runtime.kind,
            **_summary(runtime),
        }
    )
    pairing = f" (image + golden image, {'as given' if args.no_register else 'registered'})" if runtime.channels == 2 else ""
    _print_val(out, f"1x{runtime.channels}x{runtime.imgsz}x{runtime.imgsz}{pairing}", result.dataset.report())
    if args.out:
        atomic_write_json(args.out, out)
        print(f"wrote {args.out}")
    if args.plots:
        from defect_detector.engine.plots import write_eval_plots

        write_eval_plots(Path(args.plots), metrics, result.predictions, result.dataset, runtime.class_names, out["f1_conf"])
        print(f"wrote PR curves, confusion matrix (score >= {out['f1_conf']}) and a grid of predictions to {args.plots}")
    if args.gallery:
        _write_gallery(args.gallery, args.gallery_n, result, out["f1_conf"])


def _write_gallery(folder: str, n: int, result: Any, conf: float) -> None:
    """``val --gallery``: :func:`~defect_detector.engine.gallery.write_gallery` of the validation ``result``."""
    import functools

    from defect_detector.engine.gallery import write_gallery
    from defect_detector.jobs.validate import load_pair

    dataset = result.dataset
    pair = functools.partial(load_pair, result)
    entries = write_gallery(folder, dataset.coco, result.predictions, dataset.label_to_cat_id, result.runtime.class_names, conf, pair, n)
    missed = sum(e.missed for e in entries["miss"])
    print(
        f"wrote the error gallery to {folder}/index.html: {len(entries['miss'])} lowest-scored true defects "
        f"({missed} missed at score >= {conf}), {len(entries['false_call'])} highest-scored false calls"
    )


def _summary(runtime: Any) -> dict[str, Any]:
    """Parameters and GFLOPs of a checkpoint's model (None for an exported artifact, whose graph is frozen)."""
    from defect_detector.model.checkpoint import load_checkpoint
    from defect_detector.model.summary import model_summary

    if runtime.kind != "checkpoint":
        return {"params": None, "gflops": None, "imgsz": runtime.imgsz}
    return model_summary(load_checkpoint(runtime.path).model, runtime.imgsz)


def _print_val(out: dict[str, Any], model_input: str, report: str) -> None:
    """The ``val`` summary lines of the metrics ``out`` (as ``val --out`` writes them): each line names its keys and
    what it counts (which calls, which match)."""
    from defect_detector.data.evaluate import box_convention_note

    size = f"{out['params'] / 1e6:.3f} M parameters, {out['gflops']:.3f} GFLOPs" if out["params"] is not None else "exported artifact"
    print(f"model: {Path(out['weights']).name} ({out['kind']}: {size}) at {model_input}")
    print(f"images: {out['images']} inspected, {len(out['not_inspected'])} not ({report})")
    print(
        f"mAP@0.5 {out['map50']:.4f}  mAP@0.5:0.95 {out['map50_95']:.4f}  (map50, map50_95: COCO, every call ranked, class must "
        f"match; test-time augmentation: {out['tta']})"
    )
    note = box_convention_note(out["box_fit"], out["f1_conf"])
    if note:
        print(note)
    print("per-class AP@0.5 (per_class): " + ", ".join(f"{k} {v:.4f}" for k, v in out["per_class"].items()))
    if out["absent_classes"]:
        print(f"not scored (not among the json's categories): {', '.join(out['absent_classes'])}")
    print(
        f"DeepPCB F-score at score >= {out['f1_conf']:g} (precision, recall, f1_iou033: a call counts when its class is right and "
        f"IoU > 0.33): precision {out['precision']:.4f}  recall {out['recall']:.4f}  F1 {out['f1_iou033']:.4f}"
    )
    at = out["at_conf"]
    print(
        f"inspector's view at score >= {at['conf']:g} (at_conf: a defect is caught by a call of any class at IoU > 0.33): "
        f"{at['caught']:.1%} of {at['defects']} defects caught ({at['missed']} missed), "
        f"{at['false_calls_per_image']:.2f} false calls per board ({at['false_calls']} on {at['images']} boards)"
    )
    for group, m in out["per_group"].items():
        print(f"  {group} ({m['images']} images, ranked alone): mAP@0.5 {m['map50']:.4f}  mAP@0.5:0.95 {m['map50_95']:.4f}")
    for op in out["operating_points"]:
        at = f"conf >= {op['conf']:.4g}" if op["conf"] is not None else f"not reached (max {op['achieved_recall']:.2%}, all detections)"
        print(
            f"catch {op['recall']:.1%} of defects (operating_points: any class, IoU > 0.33): {at} -> "
            f"{op['false_calls_per_image']:.2f} false calls/board"
        )
