"""Tiles through the whole inspection path (issue 46 item 3): every defect that board-by-board inspection calls gets a
call in the tiled production frame too?

    python -m benchmarks.tiles_inspected --weights defect_detector/weights/deeppcb_ref.pt \\
        --data data/deeppcb/deeppcb_tpl_val.json --substrate 128 --register-golden --threads 2

``benchmarks/evaluate_tiles.py`` scores the model on composed frames with the golden images as given; here each
board and each composed 2048x1536 frame (six boards on bare substrate, ``evaluate_tiles.compose_frames``) goes
through ``Inspector.inspect``, as ``predict`` runs it: registration, the golden check, the screens, the golden view,
tiles, merge. Both are scored at ``--conf`` (pycocotools mAP@0.5, ``data/evaluate.py``) on the boards both
inspected, and every ground-truth defect that a board-by-board call catches (IoU > 0.33, any class) but no tiled call
does is listed: the defects tiling loses.

``--register-golden`` composes each golden image registered into its board first, so the golden panel is one
consistent capture as on a line. Without it, DeepPCB's golden images sit 0.6 px (median) to 4.3 px off their boards,
each its own way, which one registration of the whole panel cannot undo while the boards one by one are registered
each alone: an artefact of composing pairs, not of tiling.

``--zoom 2`` enlarges every board, golden image and composed frame twice (linear) before inspection, as a camera
closer to the boards would show them (4096x3072 frames): the bundled weights read the designs' scale and inspect them
at a working scale of 2 (``inspect/design_scale.py``), the frames in 1280 px tiles; calls are scored at 1/zoom in the
boards' own pixels.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np
import torch
from torchvision.ops import box_iou

from benchmarks.evaluate_tiles import compose_frames, load_boards, to_boards
from benchmarks.report import json_command
from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.data.evaluate import evaluate_predictions
from defect_detector.inspect.inspector import Inspector
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS

CAUGHT_IOU = 0.33


def _calls(record: Any, zoom: float = 1.0) -> dict[str, torch.Tensor] | None:
    """The record's calls, boxes divided by ``zoom`` (the pixels of the boards as the json gives them)."""
    d = record.detections
    return None if d is None else {"boxes": d.boxes / zoom, "scores": d.scores, "labels": d.labels}


def _zoomed(image: np.ndarray | None, zoom: float) -> np.ndarray | None:
    """uint8 ``image`` enlarged ``zoom`` times (linear), as given at 1."""
    if image is None or zoom == 1.0:
        return image
    return cv2.resize(image, None, fx=zoom, fy=zoom, interpolation=cv2.INTER_LINEAR)


def _caught(truth: torch.Tensor, calls: dict[str, torch.Tensor]) -> torch.Tensor:
    if len(calls["boxes"]) == 0:
        return torch.zeros(len(truth), dtype=torch.bool)
    return (box_iou(truth, calls["boxes"].float()) > CAUGHT_IOU).any(1)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Inspect the boards one by one and composed into frames; ``{"map50_one_by_one", "map50_tiled", "lost", ...}``."""
    torch.set_num_threads(args.threads)
    weights = args.weights or str(DEFAULT_REFERENCE_WEIGHTS)
    dataset = CocoDetectionDataset(args.data, None, DEEPPCB_CLASSES, 640, None, "skip", reference=True)
    boards = load_boards(dataset, True, args.max_boards, args.register_golden)
    if not boards:
        raise ValueError(f"{args.data}: no boards with golden images to compose")
    frames = compose_frames(boards, args.seed, args.substrate)
    one, tiled, refused, scales, zoom = {}, {}, [], [], float(args.zoom)
    first_golden = dataset.files()[0][2]  # the Inspector wants golden images at load; every frame below gives its own
    with Inspector.load(weights, reference=first_golden, device="cpu", threads=args.threads, conf=args.conf, monitor=False) as inspector:
        for board in boards:
            record = inspector.inspect(_zoomed(board.image, zoom), name=f"{board.image_id}.png", reference=_zoomed(board.reference, zoom))
            one[board.image_id] = _calls(record, zoom)
        for k, frame in enumerate(frames):
            record = inspector.inspect(_zoomed(frame.image, zoom), name=f"frame{k}.png", reference=_zoomed(frame.reference, zoom))
            scales.append(record.working_scale)
            if record.detections is None:
                refused.append(f"frame{k}: {record.refusal.message}")
                continue
            tiled.update(to_boards(_calls(record, zoom), frame, 10_000)[0])
    both = [i for i in one if one[i] is not None and i in tiled]
    lost = []
    for image_id in both:
        anns = dataset.coco.loadAnns(dataset.coco.getAnnIds(imgIds=[image_id]))
        if not anns:
            continue
        truth = torch.tensor([[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3]] for a in anns])
        for i in torch.nonzero(_caught(truth, one[image_id]) & ~_caught(truth, tiled[image_id])).flatten().tolist():
            lost.append({"image_id": image_id, "class": dataset.coco.cats[anns[i]["category_id"]]["name"], "bbox": anns[i]["bbox"]})
    score = lambda preds: evaluate_predictions(dataset.coco, preds, dataset.label_to_cat_id, dataset.class_names, args.conf)["map50"]  # noqa: E731
    return {
        "weights": weights,
        "boards": len(both),
        "frames": len(frames),
        "refused": refused,
        "register_golden": args.register_golden,
        "substrate": args.substrate,
        "zoom": zoom,
        "frame_working_scales": sorted(set(scales)),
        "map50_one_by_one": round(score({i: one[i] for i in both}), 4),
        "map50_tiled": round(score({i: tiled[i] for i in both}), 4),
        "lost": lost,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", help="golden-template weights (default: the bundled deeppcb_ref.pt)")
    parser.add_argument("--data", default="data/deeppcb/deeppcb_tpl_val.json", help="COCO json of held-out boards with golden images")
    parser.add_argument("--max-boards", type=int, help="at most this many boards (default: all)")
    parser.add_argument("--conf", type=float, default=0.001)
    parser.add_argument("--substrate", type=int, default=128, help="grey level of the bare substrate (default 128)")
    parser.add_argument("--register-golden", action="store_true", help="register each golden image into its board before composing")
    parser.add_argument("--seed", type=int, default=0, help="board layout seed")
    parser.add_argument("--zoom", type=float, default=1.0, help="enlarge boards, golden images and frames this many times (default 1)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", help="write the result as JSON here")
    args = parser.parse_args(argv)
    if not 1.0 <= args.zoom <= 4.0:
        parser.error(f"--zoom {args.zoom}: give 1 to 4")
    logging.basicConfig(level=logging.ERROR)
    return json_command(lambda: run(args), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
