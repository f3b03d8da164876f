"""Command line: thin subcommands over the package modules.

Every command exits non-zero with one clear line on stderr for bad arguments,
missing files or malformed data.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

from defect_detector import __version__  # noqa: E402

log = logging.getLogger("defect_detector")


class CliError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


def _cmd_convert(args: argparse.Namespace) -> None:
    from defect_detector.data import convert
    from defect_detector.io import atomic_write_json

    out = Path(args.out)
    if args.format == "deeppcb":
        split = Path(args.split)
        if not split.is_absolute() and not split.exists():
            split = Path(args.src) / split
        coco = convert.deeppcb_to_coco(args.src, split)
    elif args.format == "voc":
        coco = convert.voc_to_coco(args.src, args.images or args.src, args.classes.split(",") if args.classes else None)
    else:
        if not args.classes:
            raise CliError("convert yolo needs --classes name1,name2,...")
        coco = convert.yolo_to_coco(args.src, args.images or args.src, args.classes.split(","))
    coco.setdefault("info", {})["images_root"] = os.path.relpath(Path(coco["info"].get("images_root", args.src)).resolve(), out.resolve().parent)
    atomic_write_json(out, coco)
    print(f"wrote {out}: {len(coco['images'])} images, {len(coco['annotations'])} annotations")
    if args.val_groups:
        train, val = convert.split_deeppcb_by_group(coco, [g.strip() for g in args.val_groups.split(",")])
        for name, part in (("train", train), ("val", val)):
            path = out.with_name(f"{out.stem}_{name}.json")
            atomic_write_json(path, part)
            print(f"wrote {path}: {len(part['images'])} images, {len(part['annotations'])} annotations")


def _cmd_train(args: argparse.Namespace) -> None:
    from defect_detector.config import load_config
    from defect_detector.engine.trainer import fit

    cfg = load_config(args.config, args.overrides)
    run_dir = fit(cfg, resume=args.resume, exist_ok=args.exist_ok)
    print(f"run folder: {run_dir}")


def _cmd_val(args: argparse.Namespace) -> None:
    import torch

    from defect_detector.data.collate import build_loader
    from defect_detector.data.dataset import CocoDetectionDataset
    from defect_detector.engine.evaluate import evaluate_predictions, predict_dataset
    from defect_detector.io import atomic_write_json
    from defect_detector.model.checkpoint import load_checkpoint
    from defect_detector.model.summary import model_summary

    loaded = load_checkpoint(args.weights)
    cfg = loaded.config
    torch.set_num_threads(args.threads) if args.threads else None
    dataset = CocoDetectionDataset(args.data, args.images, loaded.class_names, args.imgsz or cfg.data.imgsz, None, "skip")
    loader = build_loader(dataset, args.batch_size, train=False, workers=args.workers, seed=0)
    predictions = predict_dataset(loaded.model, loader, torch.device("cpu"), cfg.eval.conf, cfg.eval.nms_iou, cfg.eval.max_det)
    metrics = evaluate_predictions(dataset.coco, predictions, dataset.label_to_cat_id, loaded.class_names, args.conf)
    summary = model_summary(loaded.model, dataset.imgsz)
    out = {k: metrics[k] for k in ("map50", "map50_95", "per_class", "f1_iou033", "precision", "recall")}
    out.update({"f1_conf": args.conf, "images": len(predictions), "weights": str(loaded.path), **summary})
    print(f"model: {summary['params'] / 1e6:.3f} M parameters, {summary['gflops']:.3f} GFLOPs at 1x1x{dataset.imgsz}x{dataset.imgsz}")
    print(f"images: {len(predictions)} (skipped: {dataset.report()})")
    print(f"mAP@0.5 {out['map50']:.4f}  mAP@0.5:0.95 {out['map50_95']:.4f}")
    print("per-class AP@0.5: " + ", ".join(f"{k} {v:.4f}" for k, v in out["per_class"].items()))
    print(f"DeepPCB protocol (IoU>0.33, score>={args.conf}): precision {out['precision']:.4f} recall {out['recall']:.4f} F1 {out['f1_iou033']:.4f}")
    if args.out:
        atomic_write_json(args.out, out)
        print(f"wrote {args.out}")


def _cmd_info(args: argparse.Namespace) -> None:
    from defect_detector.model.checkpoint import load_checkpoint
    from defect_detector.model.summary import model_summary

    loaded = load_checkpoint(args.weights)
    summary = model_summary(loaded.model, loaded.config.data.imgsz)
    print(json.dumps({"weights": str(loaded.path), "class_names": list(loaded.class_names), **summary, "metrics": loaded.metrics}, indent=2))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="defect-detector", description="PCB defect detection on grayscale images.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("convert", help="convert DeepPCB / Pascal VOC / YOLO annotations to COCO json")
    p.add_argument("format", choices=["deeppcb", "voc", "yolo"])
    p.add_argument("src", help="DeepPCB root, VOC xml folder or YOLO labels folder")
    p.add_argument("--split", default="trainval.txt", help="DeepPCB split file (relative to SRC or a path)")
    p.add_argument("--images", help="images folder (VOC/YOLO; default SRC)")
    p.add_argument("--classes", help="comma-separated class names (YOLO: required, in id order)")
    p.add_argument("--val-groups", help="DeepPCB: comma-separated board groups to hold out; also writes OUT_train.json and OUT_val.json")
    p.add_argument("--out", required=True, help="output COCO json")
    p.set_defaults(func=_cmd_convert)

    p = sub.add_parser("train", help="train a detector from a YAML config")
    p.add_argument("--config", required=True, help="YAML config, e.g. configs/deeppcb.yaml")
    p.add_argument("--resume", action="store_true", help="continue from runs/<name>/weights/last.pt")
    p.add_argument("--exist-ok", action="store_true", help="replace an earlier run of the same name")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.epochs=3")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("val", help="evaluate weights on a COCO json (mAP, per-class AP, DeepPCB F-score)")
    p.add_argument("--weights", help="checkpoint (default: bundled DeepPCB model)")
    p.add_argument("--data", required=True, help="COCO json")
    p.add_argument("--images", help="images root (default: from the json)")
    p.add_argument("--imgsz", type=int, help="input size (default: the model's)")
    p.add_argument("--conf", type=float, default=0.3, help="score threshold for the DeepPCB F-score")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--out", help="write metrics JSON here")
    p.set_defaults(func=_cmd_val)

    p = sub.add_parser("info", help="print parameters, FLOPs and metrics of a checkpoint")
    p.add_argument("--weights", help="checkpoint (default: bundled DeepPCB model)")
    p.set_defaults(func=_cmd_info)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from defect_detector.config import ConfigError

    try:
        args.func(args)
    except (CliError, ConfigError, FileNotFoundError, FileExistsError, ValueError) as exc:
        print(f"defect-detector {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"defect-detector {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
