"""``defect-detector convert``: convert DeepPCB / Pascal VOC / YOLO annotations to COCO json."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from defect_detector.cli.errors import CliError

log = logging.getLogger("defect_detector")


def add_parser(sub: Any) -> None:
    """The ``convert`` subcommand."""
    p = sub.add_parser("convert", help="convert DeepPCB / Pascal VOC / YOLO annotations to COCO json")
    p.add_argument("format", choices=["deeppcb", "voc", "yolo"])
    p.add_argument("src", help="DeepPCB root, VOC xml folder or YOLO labels folder")
    p.add_argument("--split", default="trainval.txt", help="DeepPCB split file (relative to SRC or a path)")
    p.add_argument("--images", help="images folder (VOC/YOLO; default SRC)")
    p.add_argument("--classes", help="comma-separated class names (YOLO: required, in id order)")
    p.add_argument("--val-groups", help="DeepPCB: comma-separated board groups to hold out; also writes OUT_train.json and OUT_val.json")
    p.add_argument(
        "--templates",
        action="store_true",
        help="DeepPCB: also list each pair's defect-free template (<id>_temp.jpg) as an image without defects "
        "(training negatives; never in the OUT_val.json of --val-groups)",
    )
    p.add_argument(
        "--references",
        help="VOC/YOLO: folder of golden (defect-free) images; each image's reference is the file with its relative path, "
        "else its file name",
    )
    p.add_argument("--out", required=True, help="output COCO json")


def run(args: argparse.Namespace) -> None:
    from defect_detector.core.io import atomic_write_json
    from defect_detector.data import convert

    out = Path(args.out)
    if args.format == "deeppcb":
        split = Path(args.split)
        if not split.is_absolute() and not split.exists():
            split = Path(args.src) / split
        coco = convert.deeppcb_to_coco(args.src, split, templates=args.templates)
    elif args.format == "voc":
        coco = convert.voc_to_coco(args.src, args.images or args.src, args.classes.split(",") if args.classes else None)
    else:
        if not args.classes:
            raise CliError("convert yolo needs --classes name1,name2,...")
        coco = convert.yolo_to_coco(args.src, args.images or args.src, args.classes.split(","))
    if args.references:
        if args.format == "deeppcb":
            raise CliError("convert deeppcb: --references is for voc and yolo (DeepPCB's templates are found by name)")
        missing = convert.attach_references(coco, args.references)
        if missing:
            log.warning(
                "%d of %d images have no reference in %s (first: %s)", len(missing), len(coco["images"]), args.references, missing[0]
            )
    root = Path(coco.setdefault("info", {}).get("images_root", args.src)).resolve()
    coco["info"]["images_root"] = os.path.relpath(root, out.resolve().parent)
    atomic_write_json(out, coco)
    print(f"wrote {out}: {len(coco['images'])} images, {len(coco['annotations'])} annotations")
    if args.val_groups:
        train, val = convert.split_deeppcb_by_group(coco, [g.strip() for g in args.val_groups.split(",")])
        for name, part in (("train", train), ("val", val)):
            path = out.with_name(f"{out.stem}_{name}.json")
            atomic_write_json(path, part)
            print(f"wrote {path}: {len(part['images'])} images, {len(part['annotations'])} annotations")
