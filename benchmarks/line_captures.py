"""Boards as a line's day delivers them, against their golden images: the validation set of issue 42, and its score.

``build`` takes a COCO json of (board, golden image) pairs, a look family kept out of training (``synth --render
data/deeppcb/deeppcb_tpl_val.json --family holdout --paint 3``), and writes each board captured again as a line
delivers it, every factor of the capture model together (``core/capture.py``: moved by up to 25 px and 1.5 degrees,
scaled within 0.5%, perspective, lens distortion, a bowed board, gain and gamma 0.85-1.15, an offset of up to 10
levels, a light gradient of up to 12%, defocus up to sigma 1.2, noise up to sigma 4 and JPEG 85-95; ``--capture``
names another model: ``gentle``, a factor alone, ``scale-1.005``), its boxes moved with it through the capture's
geometry; and a defect-free capture of each golden image, the same way. Every image's ``reference`` is its golden
image as it was (never moved)::

    python -m benchmarks.line_captures build --data data/photo/holdout_val/annotations.json --out data/photo/holdout_line

``score`` inspects every image through the inspector (the weights' operating point, their screens) and counts what
an inspector counts (:func:`count_calls`): defects caught (a call whose box overlaps the defect's), false calls on
defective and on good boards (a call on no defect, and every call beyond the first on one defect), and boards
refused::

    python -m benchmarks.line_captures score --data data/photo/holdout_line/annotations.json --weights W [--out r.json]

Bad input (a missing or malformed json, an unknown capture) is one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from torchvision.ops import box_iou
from tqdm import tqdm

from defect_detector.core.capture import CAPTURE, CaptureModel, draw_capture, named_model
from defect_detector.core.io import atomic_write_json
from defect_detector.data.coco_json import read_json, resolve_images_root
from defect_detector.data.images import load_image_gray
from defect_detector.inspect.inspector import Inspector


def build(data: Path, out: Path, seed: int, model: CaptureModel = CAPTURE) -> Path:
    """Write the captured set (module docstring) to ``out``: images under ``boards/`` and ``good/``, ``annotations.json``."""
    raw = read_json(data)
    root = resolve_images_root(data, raw, None)
    boxes: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for a in raw["annotations"]:
        boxes[a["image_id"]].append(a)
    rng = np.random.default_rng(seed)
    images, annotations = [], []
    for folder in ("boards", "good"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    for entry in tqdm([e for e in raw["images"] if e.get("reference")], desc="line captures"):
        board, golden = load_image_gray(root / entry["file_name"]), load_image_gray(root / entry["reference"])
        reference = str(Path(str(root / entry["reference"])).resolve())
        stem = Path(entry["file_name"]).stem
        capture = draw_capture(board.shape, rng, model)
        cv2.imwrite(str(out / "boards" / f"{stem}.png"), capture.apply(board))
        image_id = len(images) + 1
        size = {"width": board.shape[1], "height": board.shape[0], "reference": reference}
        images.append({"id": image_id, "file_name": f"boards/{stem}.png", **size})
        own = boxes[entry["id"]]
        xywh = np.array([a["bbox"] for a in own], np.float64).reshape(-1, 4)
        moved, keep = capture.geometry.boxes(np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], 1))
        for a, (x0, y0, x1, y1), kept in zip(own, moved, keep):
            if kept:
                box = [round(float(v), 2) for v in (x0, y0, x1 - x0, y1 - y0)]
                annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": a["category_id"],
                                    "bbox": box, "area": box[2] * box[3], "iscrowd": 0})
        cv2.imwrite(str(out / "good" / f"{stem}.png"), draw_capture(golden.shape, rng, model).apply(golden))
        images.append({"id": image_id + 1, "file_name": f"good/{stem}.png", **size})
    path = out / "annotations.json"
    atomic_write_json(path, {"images": images, "annotations": annotations, "categories": raw["categories"],
                             "info": {"description": f"line captures of {data} (benchmarks/line_captures.py, seed {seed})"}})
    return path


def count_calls(calls: torch.Tensor, truth: torch.Tensor) -> tuple[int, int, int]:
    """``(caught, off, further)`` for xyxy ``calls`` ``[K, 4]`` against ``truth`` ``[N, 4]``: a defect is caught by the
    calls that overlap it; ``off``: calls on no defect; ``further``: calls beyond the first on a defect (an inspector
    counts both as false)."""
    if len(truth) == 0 or len(calls) == 0:
        return 0, len(calls), 0
    overlap = box_iou(calls, truth) > 0
    on_defect = overlap.any(dim=1)
    first = torch.zeros(len(truth), dtype=torch.bool)
    further = 0
    for row in overlap[on_defect]:
        hit = row.nonzero().flatten()
        if first[hit].all():
            further += 1
        first[hit] = True
    return int(overlap.any(dim=0).sum()), int((~on_defect).sum()), further


def score(data: Path, weights: str | None, conf: float | None = None) -> dict[str, Any]:
    """The inspector's counts on a built set (module docstring)."""
    raw = read_json(data)
    root = resolve_images_root(data, raw, None)
    truth: dict[int, list[list[float]]] = defaultdict(list)
    for a in raw["annotations"]:
        x, y, w, h = a["bbox"]
        truth[a["image_id"]].append([x, y, x + w, y + h])
    counts: Counter[str] = Counter()
    verdicts: dict[str, Counter[str]] = {"boards": Counter(), "good": Counter()}
    reasons: Counter[str] = Counter()
    first = root / raw["images"][0]["reference"]
    with Inspector.load(weights=weights, reference=first, conf=conf, device="cpu", monitor=False) as inspector:
        for entry in tqdm(raw["images"], desc="score"):
            kind = entry["file_name"].split("/")[0]
            record = inspector.inspect(load_image_gray(root / entry["file_name"]), name=entry["file_name"],
                                       reference=load_image_gray(root / entry["reference"]))
            verdicts[kind][record.verdict] += 1
            boxes = torch.tensor(truth[entry["id"]], dtype=torch.float32).reshape(-1, 4)
            counts[f"{kind}_defects"] += len(boxes)
            if record.detections is None:
                reasons[record.refusal.kind.value if record.refusal is not None else "?"] += 1
                continue
            caught, off, further = count_calls(record.detections.boxes, boxes)
            counts[f"{kind}_caught"] += caught
            counts[f"{kind}_false"] += off + further
            counts[f"{kind}_inspected"] += 1
    boards, good = max(counts["boards_inspected"], 1), max(counts["good_inspected"], 1)
    return {
        "data": str(data),
        "weights": weights,
        "caught": counts["boards_caught"] / max(counts["boards_defects"], 1),
        "defects": counts["boards_defects"],
        "false_calls_per_defective_board": counts["boards_false"] / boards,
        "false_calls_per_good_board": counts["good_false"] / good,
        "refused": {"boards": len([1 for e in raw["images"] if e["file_name"].startswith("boards/")]) - counts["boards_inspected"],
                    "good": len([1 for e in raw["images"] if e["file_name"].startswith("good/")]) - counts["good_inspected"]},
        "refusal_kinds": dict(reasons),
        "verdicts": {k: dict(v) for k, v in verdicts.items()},
        "counts": dict(counts),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("build", help="write the captured set")
    make.add_argument("--data", type=Path, required=True, help="COCO json of boards with reference entries")
    make.add_argument("--out", type=Path, required=True)
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("--capture", default="line", help="the capture model: line (default), gentle, off, a factor alone, factor-value")
    judge = sub.add_parser("score", help="inspect a captured set and count caught defects and false calls")
    judge.add_argument("--data", type=Path, required=True, help="annotations.json written by build")
    judge.add_argument("--weights", default=None, help="golden-template weights (default: the bundled one)")
    judge.add_argument("--conf", type=float, default=None, help="score threshold (default: the weights' operating point)")
    judge.add_argument("--out", type=Path, default=None, help="write the counts here (JSON)")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(f"wrote {build(args.data, args.out, args.seed, named_model(args.capture))}")
            return 0
        report = score(args.data, args.weights, args.conf)
    except (ValueError, FileNotFoundError) as exc:
        print(f"line_captures {args.command}: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: v for k, v in report.items() if k != "counts"}, indent=1))
    if args.out is not None:
        atomic_write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
