"""Tiling benchmark: held-out DeepPCB boards composed into production frames, scored one by one, tiled and letterboxed.

    python -m benchmarks.evaluate_tiles --data data/deeppcb/deeppcb_val.json --threads 1
    python -m benchmarks.evaluate_tiles --weights defect_detector/weights/deeppcb_ref.pt \\
        --data data/deeppcb/deeppcb_tpl_val.json --threads 1

1. Frames: the boards of ``--data`` (640x640, native resolution) in image-id order, six per 2048x1536 frame on a
   3x2 grid with random gaps (seeded, at least :data:`MIN_GAP` px between boards) so that boards do not sit on
   the tile grid; the rest of the frame is bare substrate (``--substrate``, default :data:`SUBSTRATE`: the
   binarized boards' substrate is white, copper black, so a board's edge shows only where copper crosses it).
   A reference model's references (the image entries' ``reference``) are composed the same way; they are
   aligned with their boards already (registration moves them by 0.6 px, median; 95% under 1.6 px, at most
   4.3 px), so nothing is registered unless ``--register-golden`` (an arm: a panel's golden image is one capture). A
   DeepPCB golden image has a dark border band 1-4 px wide that its board lacks: pasted onto substrate, it is a
   difference along the board's edge, which the one-by-one images show only at their own border.
2. Accuracy, all at ``--conf`` 0.001, one model pass, NMS IoU ``--iou``: (a) each board alone (letterboxed to
   640: no-op, as trained); (b) each frame tiled (``Pipeline(tile=True)``); (c) each frame letterboxed
   whole (3.2x smaller: the failure tiling fixes). Frame detections go back to the board they overlap most,
   in its pixels and clipped to it; those overlapping no board are counted (``background_detections``) and not
   scored. All three are scored by ``data/evaluate.py``'s ``evaluate_predictions`` (pycocotools) against the
   same ground truth; a board keeps up to ``--max-det`` detections, as does each tile of a frame (the pipeline's rule).
   ``off_border`` scores the same detections without those within ``--border`` px of their board's edge, for all
   three alike: a DeepPCB board is a crop of a larger board, so pasted onto substrate its cut traces end at its
   edge, which the one-by-one images never show (there the edge is the image's); this separates false calls
   along those pasted edges from the effect of tiling.
3. Model time: the pipeline's ``model`` time of a tiled frame and of one tile (a 640x640 crop of it),
   alternating over ``--repeats`` rounds; ratio = median frame time / (tiles per frame x median tile time).

Targets (issue 35): tiled mAP@0.5 within :data:`TARGET_MAP_GAP` of one by one; tiled false calls per board at 99% and
99.5% caught at most :data:`TARGET_FALSE_CALL_RATIO` x one by one's; time ratio at most :data:`TARGET_TIME_RATIO`.
Results are printed as a table and written to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from torchvision.ops import clip_boxes_to_image

from defect_detector.align.register import register
from defect_detector.core.io import atomic_write_json
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.data.evaluate import Predictions, evaluate_predictions
from defect_detector.data.images import load_image_gray
from defect_detector.data.tiles import crop_tiles
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.runtime import Runtime
from defect_detector.model.checkpoint import DEFAULT_WEIGHTS

logger = logging.getLogger("defect_detector.inspect")

FRAME_H, FRAME_W = 1536, 2048
GRID_COLS, GRID_ROWS = 3, 2
SUBSTRATE = 255
MIN_GAP = 16
TARGET_MAP_GAP = 0.003
TARGET_FALSE_CALL_RATIO = 1.5
TARGET_TIME_RATIO = 1.2
_METRIC_KEYS = ("map50", "map50_95", "f1_iou033", "precision", "recall", "per_class", "operating_points")


@dataclass(frozen=True)
class Board:
    """One held-out board: its COCO ``image_id`` and uint8 ``[h, w]`` image (and reference, for a reference model)."""

    image_id: int
    image: np.ndarray
    reference: np.ndarray | None


@dataclass(frozen=True)
class Frame:
    """A composed frame: uint8 ``[FRAME_H, FRAME_W]`` image (and reference) and ``(image_id, x0, y0, w, h)`` per board placed."""

    image: np.ndarray
    reference: np.ndarray | None
    boards: list[tuple[int, int, int, int, int]]


def load_boards(dataset: CocoDetectionDataset, reference: bool, max_boards: int | None, register_golden: bool = False) -> list[Board]:
    """The dataset's boards in image-id order (at most ``max_boards``), read as uint8 grayscale. ``register_golden``:
    each golden image registered into its board (``align/register.py``; where it has no data, its nearest pixels), as
    a panel's golden image, captured whole, would be; else used as given."""
    boards = []
    for image_id in dataset.image_ids[:max_boards]:
        info = dataset.coco.imgs[image_id]
        image = load_image_gray(dataset.images_root / info["file_name"])
        ref = load_image_gray(dataset.images_root / info["reference"]) if reference else None
        if ref is not None and register_golden:
            _, reg = register(ref, image)
            if reg.ok:
                size = (image.shape[1], image.shape[0])
                ref = cv2.warpAffine(ref, reg.matrix, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
            else:
                logger.warning("board %d: its golden image does not register (%s); used as given", image_id, reg.reason)
        boards.append(Board(image_id, image, ref))
    return boards


def board_origins(cell_w: int, cell_h: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """Random ``(x0, y0)`` of the 3x2 grid's cells, row-major: per axis, margins >= 0 and gaps >= :data:`MIN_GAP`."""
    axes = []
    for count, size, length in ((GRID_COLS, cell_w, FRAME_W), (GRID_ROWS, cell_h, FRAME_H)):
        free = length - count * size - (count - 1) * MIN_GAP
        if free < 0:
            raise ValueError(f"{count} boards of {size} px with {MIN_GAP} px gaps do not fit in {length} px")
        parts = np.floor(rng.dirichlet(np.ones(count + 1)) * free).astype(int)  # margin, gaps..., margin
        starts = parts[0] + np.arange(count) * (size + MIN_GAP) + np.concatenate(([0], np.cumsum(parts[1:count])))
        axes.append([int(s) for s in starts])
    return [(x0, y0) for y0 in axes[1] for x0 in axes[0]]


def compose_frames(boards: Sequence[Board], seed: int, substrate: int = SUBSTRATE) -> list[Frame]:
    """Six boards per frame (the last frame may hold fewer) at :func:`board_origins` on bare substrate of grey level
    ``substrate`` (default :data:`SUBSTRATE`)."""
    cell_w, cell_h = max(b.image.shape[1] for b in boards), max(b.image.shape[0] for b in boards)
    rng = np.random.default_rng(seed)
    per_frame = GRID_COLS * GRID_ROWS
    frames = []
    for first in range(0, len(boards), per_frame):
        image = np.full((FRAME_H, FRAME_W), substrate, np.uint8)
        reference = image.copy() if boards[0].reference is not None else None
        placed = []
        for board, (x0, y0) in zip(boards[first : first + per_frame], board_origins(cell_w, cell_h, rng)):
            h, w = board.image.shape
            image[y0 : y0 + h, x0 : x0 + w] = board.image
            if reference is not None:
                reference[y0 : y0 + h, x0 : x0 + w] = board.reference
            placed.append((board.image_id, x0, y0, w, h))
        frames.append(Frame(image, reference, placed))
    return frames


def to_boards(det: dict[str, torch.Tensor], frame: Frame, max_det: int) -> tuple[Predictions, int]:
    """Split a frame's detections (xyxy frame pixels) among its boards: each box goes to the board it overlaps most,
    in that board's pixels, clipped to it, at most ``max_det`` per board by score. Returns the per-board predictions
    and the number of boxes overlapping no board."""
    boxes = det["boxes"].float()
    rects = torch.tensor([[x0, y0, x0 + w, y0 + h] for _, x0, y0, w, h in frame.boards], dtype=torch.float32)  # [N, 4]
    iw = (torch.minimum(boxes[:, None, 2], rects[None, :, 2]) - torch.maximum(boxes[:, None, 0], rects[None, :, 0])).clamp(min=0)
    ih = (torch.minimum(boxes[:, None, 3], rects[None, :, 3]) - torch.maximum(boxes[:, None, 1], rects[None, :, 1])).clamp(min=0)
    overlap = iw * ih  # [K, N]
    best = overlap.argmax(dim=1) if len(boxes) else torch.zeros(0, dtype=torch.int64)
    on_board = overlap.amax(dim=1) > 0 if len(boxes) else torch.zeros(0, dtype=torch.bool)
    out: Predictions = {}
    for n, (image_id, x0, y0, w, h) in enumerate(frame.boards):
        keep = (on_board & (best == n)).nonzero(as_tuple=True)[0][:max_det]  # detections are sorted by score
        local = boxes[keep] - torch.tensor([x0, y0, x0, y0], dtype=torch.float32)
        local = clip_boxes_to_image(local, (h, w))
        out[image_id] = {"boxes": local, "scores": det["scores"][keep].float(), "labels": det["labels"][keep].long()}
    return out, int((~on_board).sum())


def predict_boards(runtime: Runtime, boards: Sequence[Board], conf: float, iou: float, max_det: int) -> Predictions:
    """(a): each board alone, letterboxed; six boards per ``predict`` call."""
    out: Predictions = {}
    pipeline = Pipeline(runtime, conf=conf, iou=iou, max_det=max_det, tile=False)
    for first in range(0, len(boards), 6):
        chunk = boards[first : first + 6]
        refs = [b.reference for b in chunk] if runtime.channels == 2 else None
        for board, det in zip(chunk, pipeline.detect([b.image for b in chunk], refs)):
            out[board.image_id] = {"boxes": det.boxes, "scores": det.scores, "labels": det.labels}
    return out


def predict_frames(
    runtime: Runtime, frames: Sequence[Frame], tile: bool, conf: float, iou: float, max_det: int
) -> tuple[Predictions, int, float]:
    """(b) tiled / (c) letterboxed frames, mapped back to their boards: ``(predictions, background detections,
    median model ms per frame)``."""
    out: Predictions = {}
    background, model_ms = 0, []
    pipeline = Pipeline(runtime, conf=conf, iou=iou, max_det=max_det, tile=tile)  # max_det per tile (letterboxed: per frame)
    for frame in frames:
        refs = [frame.reference] if frame.reference is not None else None
        (det,) = pipeline.detect([frame.image], refs)
        per_board, outside = to_boards({"boxes": det.boxes, "scores": det.scores, "labels": det.labels}, frame, max_det)
        out.update(per_board)
        background += outside
        model_ms.append(det.timings["model"])
    return out, background, statistics.median(model_ms)


def time_tiles(runtime: Runtime, frame: Frame, repeats: int) -> dict[str, Any]:
    """Model time of the tiled frame vs one tile of it, alternating; medians over ``repeats`` rounds."""
    tiled, whole = Pipeline(runtime, tile=True), Pipeline(runtime, tile=False)
    record = tiled.plan(FRAME_H, FRAME_W)
    assert record is not None
    crop = [crop_tiles(frame.image, record)[1]]  # a tile inside the frame (not at its corner)
    crop_ref = [crop_tiles(frame.reference, record)[1]] if frame.reference is not None else None
    frame_refs = [frame.reference] if frame.reference is not None else None

    def run_frame() -> float:
        return tiled.detect([frame.image], frame_refs)[0].timings["model"]

    def run_tile() -> float:
        return whole.detect(crop, crop_ref)[0].timings["model"]

    run_frame(), run_tile()  # warm-up
    frame_ms, tile_ms = [], []
    for _ in range(repeats):
        frame_ms.append(run_frame())
        tile_ms.append(run_tile())
    frame_med, tile_med = statistics.median(frame_ms), statistics.median(tile_ms)
    return {
        "tiles_per_frame": len(record),
        "tile": record.tile,
        "overlap_min": record.overlap,
        "frame_model_ms": frame_med,
        "tile_model_ms": tile_med,
        "ratio": frame_med / (len(record) * tile_med),
        "repeats": repeats,
    }


def off_border(predictions: Predictions, dataset: CocoDetectionDataset, border: float) -> Predictions:
    """``predictions`` without the boxes within ``border`` px of their board's edge (see the module docstring)."""
    out: Predictions = {}
    for image_id, pred in predictions.items():
        w, h = dataset.coco.imgs[image_id]["width"], dataset.coco.imgs[image_id]["height"]
        b = pred["boxes"]
        keep = (b[:, 0] >= border) & (b[:, 1] >= border) & (b[:, 2] <= w - border) & (b[:, 3] <= h - border)
        out[image_id] = {k: v[keep] for k, v in pred.items()}
    return out


def _scores(
    dataset: CocoDetectionDataset, predictions: Predictions, class_names: Sequence[str], f1_conf: float, border: float
) -> dict[str, Any]:
    metrics = evaluate_predictions(dataset.coco, predictions, dataset.label_to_cat_id, class_names, f1_conf)
    inner = evaluate_predictions(dataset.coco, off_border(predictions, dataset, border), dataset.label_to_cat_id, class_names, f1_conf)
    return {
        **{k: metrics[k] for k in _METRIC_KEYS},
        "off_border": {k: inner[k] for k in ("map50", "map50_95", "f1_iou033", "operating_points")},
    }


def false_call_ratios(one_by_one: Sequence[dict[str, Any]], tiled: Sequence[dict[str, Any]]) -> list[float | None]:
    """Tiled false calls per board / one by one's at each operating point; None where either arm never reaches the
    target recall (no threshold: the false calls are those at the lowest score) or one by one makes none."""
    out: list[float | None] = []
    for a, b in zip(one_by_one, tiled):
        reached = a["conf"] is not None and b["conf"] is not None and a["false_calls_per_image"] > 0
        out.append(b["false_calls_per_image"] / a["false_calls_per_image"] if reached else None)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    weights = Path(args.weights) if args.weights else DEFAULT_WEIGHTS
    runtime = Runtime.load(weights, device="cpu", threads=args.threads)
    reference = runtime.channels == 2
    dataset = CocoDetectionDataset(args.data, args.images, runtime.class_names, runtime.imgsz, reference=reference)
    per_frame = GRID_COLS * GRID_ROWS
    boards = load_boards(dataset, reference, args.max_frames * per_frame if args.max_frames else None, args.register_golden)
    frames = compose_frames(boards, args.seed, args.substrate)
    f1_conf = runtime.operating_point["conf"] if args.f1_conf is None else args.f1_conf
    logger.info("%d boards in %d frames of %dx%d", len(boards), len(frames), FRAME_W, FRAME_H)
    iou = runtime.operating_point["iou"] if args.iou is None else args.iou
    one_by_one = predict_boards(runtime, boards, args.conf, iou, args.max_det)
    tiled, tiled_bg, tiled_ms = predict_frames(runtime, frames, True, args.conf, iou, args.max_det)
    whole, whole_bg, whole_ms = predict_frames(runtime, frames, False, args.conf, iou, args.max_det)
    names, border = runtime.class_names, args.border
    results = {
        "one_by_one": _scores(dataset, one_by_one, names, f1_conf, border),
        "tiled": {**_scores(dataset, tiled, names, f1_conf, border), "background_detections": tiled_bg, "model_ms": tiled_ms},
        "letterboxed": {**_scores(dataset, whole, names, f1_conf, border), "background_detections": whole_bg, "model_ms": whole_ms},
    }
    timing = time_tiles(runtime, frames[0], args.repeats)
    gap = results["one_by_one"]["map50"] - results["tiled"]["map50"]
    gap_off_border = results["one_by_one"]["off_border"]["map50"] - results["tiled"]["off_border"]["map50"]
    ratios = false_call_ratios(results["one_by_one"]["operating_points"], results["tiled"]["operating_points"])
    return {
        "weights": str(weights),
        "data": str(args.data),
        "channels": runtime.channels,
        "threads": torch.get_num_threads(),
        "boards": len(boards),
        "frames": len(frames),
        "frame_size": [FRAME_H, FRAME_W],
        "conf": args.conf,
        "iou": iou,
        "f1_conf": f1_conf,
        "seed": args.seed,
        "results": results,
        "timing": timing,
        "substrate": args.substrate,
        "register_golden": args.register_golden,
        "border": border,
        "map50_gap": gap,
        "map50_gap_off_border": gap_off_border,
        "targets": {
            "false_call_ratio": TARGET_FALSE_CALL_RATIO,
            "false_call_ratios": ratios,
            "false_call_ratio_met": bool(ratios) and all(r is not None and r <= TARGET_FALSE_CALL_RATIO for r in ratios),
            "map50_gap": TARGET_MAP_GAP,
            "map50_gap_met": gap <= TARGET_MAP_GAP,
            "map50_gap_off_border_met": gap_off_border <= TARGET_MAP_GAP,
            "time_ratio": TARGET_TIME_RATIO,
            "time_ratio_met": timing["ratio"] <= TARGET_TIME_RATIO,
        },
    }


def print_table(report: dict[str, Any]) -> None:
    r, t = report["results"], report["timing"]
    where = f"{report['boards']} boards in {report['frames']} frames of {FRAME_W}x{FRAME_H}"
    print(f"{report['weights']}: {where}, {report['threads']} thread(s), conf {report['conf']}, one pass")
    head = ("mAP@0.5", "mAP@.5:.95", "F1", "recall", "bg dets", "model ms", "off-border mAP@0.5")
    print(f"{'':20s}" + "".join(f"{h:>11s}" for h in head[:-1]) + f"{head[-1]:>20s}")
    for name, label in (("one_by_one", "boards one by one"), ("tiled", "frames tiled"), ("letterboxed", "frames letterboxed")):
        m = r[name]
        cells = [f"{m['map50']:.4f}", f"{m['map50_95']:.4f}", f"{m['f1_iou033']:.3f}", f"{m['recall']:.3f}"]
        cells += [str(m.get("background_detections", "")), f"{m['model_ms']:.1f}" if "model_ms" in m else ""]
        print(f"{label:20s}" + "".join(f"{c:>11s}" for c in cells) + f"{m['off_border']['map50']:>20.4f}")
    for name, label in (("one_by_one", "boards one by one"), ("tiled", "frames tiled")):
        for where, m in (("", r[name]), (f", off the {report['border']:g} px border", r[name]["off_border"])):
            points = ", ".join(f"{p['recall']:.1%}: {p['false_calls_per_image']:.2f}" for p in m["operating_points"])
            print(f"{label}{where}: false calls per board at {points} of defects caught")
    print(
        f"model time per tiled frame {t['frame_model_ms']:.1f} ms = {t['ratio']:.2f} x ({t['tiles_per_frame']} tiles x "
        f"{t['tile_model_ms']:.1f} ms) [target <= {TARGET_TIME_RATIO}]; mAP@0.5 one by one - tiled {report['map50_gap']:+.4f} "
        f"(off-border {report['map50_gap_off_border']:+.4f}) [target <= {TARGET_MAP_GAP}]"
    )
    ratios = ", ".join("n/a" if r is None else f"{r:.2f}" for r in report["targets"]["false_call_ratios"])
    print(f"false calls per board, tiled / one by one, at 99.0% and 99.5% caught: {ratios} [target <= {TARGET_FALSE_CALL_RATIO}]")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.evaluate_tiles", description=__doc__.splitlines()[0])
    parser.add_argument("--weights", help="checkpoint or TorchScript artifact (default: the bundled single-image model)")
    parser.add_argument("--data", "--json", dest="data", default="data/deeppcb/deeppcb_val.json", help="COCO json of held-out boards")
    parser.add_argument("--images", help="images folder for --data (default: its info.images_root)")
    parser.add_argument("--max-frames", type=int, help="compose at most this many frames (six boards each; default: all boards)")
    parser.add_argument("--conf", type=float, default=0.001)
    parser.add_argument("--iou", type=float, help="NMS IoU (default: the weights' eval.nms_iou)")
    parser.add_argument("--max-det", type=int, default=100, help="detections kept per board (default 100)")
    parser.add_argument("--f1-conf", type=float, help="score threshold of the F-score (default: the weights' operating point)")
    parser.add_argument("--repeats", type=int, default=10, help="frame/tile timing rounds (default 10)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=0, help="board layout seed")
    parser.add_argument("--substrate", type=int, default=SUBSTRATE, help=f"grey level of the bare substrate (default {SUBSTRATE})")
    parser.add_argument(
        "--register-golden", action="store_true", help="register each golden image into its board before composing (default: as given)"
    )
    parser.add_argument("--border", type=float, default=4.0, help="off-border scores drop boxes this close to a board edge (default 4 px)")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    report = run(args)
    print_table(report)
    if args.out:
        atomic_write_json(Path(args.out), report)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
