"""ROC of the hidden-area screen (``screens/hidden.py``): glare, a hand and a shadow over a defect, motion blur, against
boards and defect-free captures that must be inspected.

For each board of a COCO json with golden images (``reference`` entries; DeepPCB's held-out groups, or a rendered set
such as ``synth --render ... --family holdout``), every condition is drawn over one of its defects, at 1-40% of the
frame: ``glare`` (a saturated spot with a soft edge), ``hand`` (a dark, flat, elongated blob at grey 30-80),
``shadow`` (the board darkened by up to 55% under a soft disk), and ``motion blur`` (the whole frame, 9-15 px).
``board`` is the board as it is and ``good`` its golden image captured again (``--capture``: as a line's day delivers
it, every factor of ``core/capture.py`` together; ``--capture NAME``: another capture model, ``gentle``, a factor
alone, ``scale-1.005``); neither may be refused for hidden area. Each frame goes through
the inspector with the hidden-area refusal off, so the model's own calls and the largest hidden region are read
apart; for each limit (``eval.hidden_max_area``) it prints the share of faulted frames whose covered defect escapes
(inspected, and no call on it) and the share of board and good frames refused for hidden area::

    python -m benchmarks.hidden_roc --data data/deeppcb/deeppcb_tpl_val.json --max-images 40 --out out/hidden_roc.json

A covered defect escapes when no screen refuses the frame and no call touches its box: glare is refused at any size,
any other region above the limit.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from tqdm import tqdm

from defect_detector.core.capture import CaptureModel, draw_capture, named_model
from defect_detector.core.io import atomic_write_json
from defect_detector.data.coco_json import read_json, resolve_images_root
from defect_detector.data.dataset import evenly_spaced
from defect_detector.data.images import load_image_gray
from defect_detector.inspect.inspector import Inspector
from defect_detector.inspect.runtime import Runtime
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS
from defect_detector.screens.hidden import HiddenArea

SIZES = (0.01, 0.03, 0.1, 0.25, 0.4)
FAULTS = ("glare", "hand", "shadow")
LIMITS = (0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 1.0)


def _disk(shape: tuple[int, int], centre: tuple[float, float], area: float, aspect: float, angle: float, soft: float) -> np.ndarray:
    """float32 ``[H, W]`` weight of an ellipse of ``area`` share of the frame (axes ratio ``aspect``), edge blurred."""
    h, w = shape
    minor = np.sqrt(area * h * w / (np.pi * aspect))
    weight = np.zeros(shape, np.float32)
    axes = (max(1, int(minor * aspect)), max(1, int(minor)))
    cv2.ellipse(weight, (int(centre[0]), int(centre[1])), axes, angle, 0, 360, 1.0, -1)
    return cv2.GaussianBlur(weight, (0, 0), max(0.5, soft * minor)) if soft > 0 else weight


def faulted(board: np.ndarray, fault: str, area: float, centre: tuple[float, float], rng: np.random.Generator) -> np.ndarray:
    """uint8 ``board`` ``[H, W]`` with ``fault`` over ``area`` of it, centred on ``centre`` (x, y)."""
    x = board.astype(np.float32)
    if fault == "glare":
        weight = np.clip(1.4 * _disk(board.shape, centre, area, 1.0, 0.0, 0.15), 0, 1)
        out = x + weight * (255.0 - x)
    elif fault == "hand":
        weight = _disk(board.shape, centre, area, rng.uniform(1.5, 3.0), rng.uniform(0, 180), 0.03)
        level = rng.uniform(30, 80) + rng.normal(0, 3, board.shape).astype(np.float32)
        out = x * (1 - weight) + level * weight
    elif fault == "shadow":
        out = x * (1 - 0.55 * _disk(board.shape, centre, area, 1.0, 0.0, 0.4))
    else:
        length = int(rng.integers(9, 16))
        kernel = np.zeros((length, length), np.float32)
        kernel[length // 2] = 1.0 / length
        out = cv2.filter2D(
            x, -1, cv2.warpAffine(kernel, cv2.getRotationMatrix2D((length / 2, length / 2), rng.uniform(0, 180), 1), (length, length))
        )
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)


def _row(inspector: Inspector, image: np.ndarray, golden: np.ndarray, name: str, target: list[float] | None = None) -> dict[str, Any]:
    """One frame's outcome: refused by another screen, calls (on ``target``, COCO xywh, when given), hidden region."""
    single = inspector.runtime.channels == 1
    record = inspector.inspect(image, name=name, reference=None if single else golden)
    hidden, calls = record.hidden, None
    if record.detections is not None:
        calls = len(record.detections)
        if target is not None:
            x, y, w, h = target
            b = record.detections.boxes
            calls = int(((b[:, 0] < x + w) & (b[:, 2] > x) & (b[:, 1] < y + h) & (b[:, 3] > y)).sum())
    return {
        "name": name,
        "refused": record.verdict == "not_inspected",
        "reason": record.reason,
        "calls": calls,
        "hidden_kind": hidden.kind if hidden is not None else None,
        "hidden_share": hidden.share if hidden is not None else 0.0,
        "hidden_cells": hidden.cells if hidden is not None else 0,
    }


def _hidden(row: dict[str, Any], limit: float) -> bool:
    return HiddenArea(row["hidden_kind"] or "", row["hidden_share"], 0, 0, row["hidden_cells"]).refused(limit)


def passes(row: dict[str, Any], limit: float) -> bool:
    """Whether the covered defect escapes at ``limit``: the frame inspected, no call on the defect, and no glare nor a
    region above ``limit``."""
    if row["refused"] or row["calls"]:
        return False
    return not _hidden(row, limit)


def refused(row: dict[str, Any], limit: float) -> bool:
    """Whether a frame is refused for hidden area at ``limit`` (other refusals are other screens')."""
    return _hidden(row, limit)


def measure(data: Path, weights: str | None, max_images: int, capture: CaptureModel | None, seed: int) -> dict[str, list[dict[str, Any]]]:
    """``{condition: [row per frame]}`` (module docstring); ``capture``: the model the good frames are captured with
    (None: the golden image as it is)."""
    raw = read_json(data)
    root = resolve_images_root(data, raw, None)
    images = [e for e in raw["images"] if e.get("reference")]
    boxes = defaultdict(list)
    for a in raw["annotations"]:
        boxes[a["image_id"]].append(a["bbox"])
    images = [images[i] for i in evenly_spaced(len(images), max_images) if boxes[images[i]["id"]]]
    rng, rows = np.random.default_rng(seed), defaultdict(list)
    captures = np.random.default_rng(seed + 1)
    weights = weights or str(DEFAULT_REFERENCE_WEIGHTS)
    single = Runtime.load(weights, device="cpu").channels == 1
    first = None if single else root / images[0]["reference"]  # the golden image until each frame gives its own
    with Inspector.load(weights=weights, reference=first, device="cpu", monitor=False) as inspector:
        inspector.prepare.screen_hidden = False
        for entry in tqdm(images, desc="hidden ROC"):
            board, golden = load_image_gray(root / entry["file_name"]), load_image_gray(root / entry["reference"])
            if board.shape != golden.shape:
                continue
            rows["board"].append(_row(inspector, board, golden, entry["file_name"]))
            good = draw_capture(golden.shape, captures, capture).apply(golden) if capture is not None else golden
            rows["good"].append(_row(inspector, good, golden, entry["reference"]))
            target = boxes[entry["id"]][int(rng.integers(len(boxes[entry["id"]])))]
            x, y, w, h = target
            for fault in FAULTS:
                for size in SIZES:
                    image = faulted(board, fault, size, (x + w / 2, y + h / 2), rng)
                    rows[f"{fault} {size:.0%}"].append(_row(inspector, image, golden, entry["file_name"], target))
            blurred = faulted(board, "blur", 0.0, (0, 0), rng)
            rows["motion blur"].append(_row(inspector, blurred, golden, entry["file_name"], target))
    return dict(rows)


def roc(rows: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """``{condition: {limit: share}}``: passes for faults, refusals for ``board`` and ``good``."""
    out = {}
    for condition, items in rows.items():
        judge = refused if condition in ("board", "good") else passes
        out[condition] = {f"{limit:g}": float(np.mean([judge(r, limit) for r in items])) for limit in LIMITS}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="COCO json of boards with reference entries")
    parser.add_argument(
        "--weights", default=None, help="weights (default: the bundled golden-template model; a single-image model reads no golden image)"
    )
    parser.add_argument("--max-images", type=int, default=40)
    parser.add_argument("--capture", nargs="?", const="line", default=None,
                        help="capture the good frames again, as a line's day (or NAME: gentle, a factor, scale-1.005)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the rows and the ROC here (JSON)")
    args = parser.parse_args(argv)
    try:
        capture = named_model(args.capture) if args.capture is not None else None
    except ValueError as exc:
        parser.error(str(exc))
    rows = measure(args.data, args.weights, args.max_images, capture, args.seed)
    table = roc(rows)
    print("share of covered defects escaping (faults) or of frames refused for hidden area (board, good), by eval.hidden_max_area:")
    print(f"{'condition':<14}" + "".join(f"{limit:>8g}" for limit in LIMITS))
    for condition, shares in table.items():
        print(f"{condition:<14}" + "".join(f"{shares[f'{limit:g}']:>8.2f}" for limit in LIMITS) + f"   (n={len(rows[condition])})")
    if args.out is not None:
        atomic_write_json(args.out, {"data": str(args.data), "weights": args.weights, "roc": table, "rows": rows})


if __name__ == "__main__":
    main()
