"""Error-analysis gallery: the true defects a model scores lowest and the false calls it scores highest.

:func:`write_gallery` matches detections to ground truth as the operating points do
(:func:`~defect_detector.data.evaluate.operating_points`: any class, IoU > 0.33, one-to-one, greedy by descending
score), so a true defect's score is the score at which the inspector's threshold starts to catch it, and a false
call is a detection that the matching leaves without a defect. It writes into ``out_dir``:

- ``misses/NNN.png``: the ``n`` lowest-scored true defects, lowest first (a defect never detected, or scored
  under the operating point ``conf``, is a miss and comes first);
- ``false_calls/NNN.png``: the ``n`` highest-scored detections that match no defect, highest first;
- ``misses.png``, ``false_calls.png``: one sheet per kind, the entries in a grid;
- ``index.html``: both lists with captions (relative image links, no external assets);
- ``gallery.json``: the entries (file, class, score, box and crop window in original-image pixels).

Each entry is a crop of the board around the box with the golden image's same crop beside it (reference models;
a grey panel otherwise), the named box drawn on both (green: the true defect, with the detection that caught it in
orange; red: the false call), and a caption with the class, the score and the image's file name. Crops are
shown at ``TILE`` pixels, scaled with nearest-neighbour interpolation so binarised copper keeps its edges.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import cv2
import numpy as np
import torch
from pycocotools.coco import COCO

from defect_detector.core.io import atomic_write_text
from defect_detector.data.evaluate import Predictions, greedy_matches, ground_truth

TILE = 192
"""Side (px) of each shown crop."""
MIN_CROP = 64
"""Smallest crop side in original pixels (small defects get this much context)."""
CONTEXT = 3.0
"""Crop side as a multiple of the box's longer side."""
CAPTION_H = 44
GAP = 6
SHEET_COLUMNS = 4
TRUE_BGR = (0, 170, 0)
CAUGHT_BGR = (0, 140, 255)
FALSE_BGR = (0, 0, 230)
MATCH_IOU = 0.33

LoadPair = Callable[[int], tuple[np.ndarray, "np.ndarray | None"]]
"""``load_pair(image_id) -> (image uint8 [H, W], golden uint8 [H, W] registered into the image's frame, or None)``."""


@dataclass(frozen=True)
class GalleryEntry:
    """One shown box. ``kind``: ``miss`` (a true defect; ``missed`` when its score is under the operating point
    or it was never detected) or ``false_call``. ``box``: the named box, xyxy float original-image pixels (the
    ground truth of a true defect, the detection of a false call); ``detection``: the detection that caught a true
    defect (None when none did). ``crop``: the shown window ``[x0, y0, x1, y1)`` in integer original pixels.
    ``score``: the catching detection's score (None: never detected) or the false call's. ``path``: the entry's PNG,
    relative to the gallery folder."""

    kind: str
    rank: int
    image_id: int
    file_name: str
    class_name: str
    score: float | None
    missed: bool
    box: tuple[float, float, float, float]
    detection: tuple[float, float, float, float] | None
    detected_as: str | None
    crop: tuple[int, int, int, int]
    path: str


@dataclass(frozen=True)
class _Candidate:
    image_id: int
    label: int
    score: float | None
    box: tuple[float, float, float, float]
    detection: tuple[float, float, float, float] | None
    detected_label: int | None


def _candidates(coco_gt: COCO, predictions: Predictions, cat_id_to_label: Mapping[int, int]) -> tuple[list[_Candidate], list[_Candidate]]:
    """(every true defect with the score that catches it, every unmatched detection) over the images of ``predictions``."""
    defects, false_calls = [], []
    for image_id in sorted(predictions):
        pred = {k: v.detach().cpu() for k, v in predictions[image_id].items()}
        gt = ground_truth(coco_gt, image_id, cat_id_to_label)
        pairs = dict((g, p) for p, g in greedy_matches(pred, gt, MATCH_IOU, same_class=False))
        boxes, scores, labels = pred["boxes"].tolist(), pred["scores"].tolist(), pred["labels"].tolist()
        for g, (box, label) in enumerate(zip(gt["boxes"].tolist(), gt["labels"].tolist())):
            p = pairs.get(g)
            defects.append(
                _Candidate(
                    image_id,
                    int(label),
                    None if p is None else scores[p],
                    tuple(box),
                    None if p is None else tuple(boxes[p]),
                    None if p is None else int(labels[p]),
                )
            )
        matched = set(pairs.values())
        false_calls += [
            _Candidate(image_id, int(labels[p]), scores[p], tuple(boxes[p]), None, None) for p in range(len(boxes)) if p not in matched
        ]
    return defects, false_calls


def crop_window(box: Sequence[float], height: int, width: int) -> tuple[int, int, int, int]:
    """A square window ``[x0, y0, x1, y1)`` (integer pixels) centred on xyxy ``box`` of side
    ``max(MIN_CROP, CONTEXT * longer side)``, moved (not shrunk) to lie inside a ``height x width`` image when it
    fits, and clipped to it otherwise. The box lies inside the window unless it is larger than the image."""
    x1, y1, x2, y2 = (float(v) for v in box)
    side = int(np.ceil(max(MIN_CROP, CONTEXT * max(x2 - x1, y2 - y1))))
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2

    def place(centre: float, limit: int) -> tuple[int, int]:
        start = int(np.floor(centre - side / 2))
        start = min(max(start, 0), max(limit - side, 0))
        return start, min(start + side, limit)

    (x0, xe), (y0, ye) = place(cx, width), place(cy, height)
    return x0, y0, xe, ye


def _panel(image: np.ndarray | None, window: tuple[int, int, int, int], boxes: Sequence[tuple[Sequence[float], tuple]]) -> np.ndarray:
    """The window of a uint8 ``[H, W]`` image scaled to ``TILE x TILE`` (BGR), with ``(xyxy, colour)`` boxes drawn in
    window coordinates; ``image`` None gives a grey panel marked "no golden image"."""
    x0, y0, x1, y1 = window
    if image is None:
        panel = np.full((TILE, TILE, 3), 90, np.uint8)
        cv2.putText(panel, "no golden image", (8, TILE // 2), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (230, 230, 230), 1, cv2.LINE_AA)
        return panel
    crop = image[y0:y1, x0:x1]
    scale = TILE / max(x1 - x0, y1 - y0)
    size = (max(1, round((x1 - x0) * scale)), max(1, round((y1 - y0) * scale)))
    panel = np.full((TILE, TILE, 3), 114, np.uint8)
    panel[: size[1], : size[0]] = cv2.cvtColor(cv2.resize(crop, size, interpolation=cv2.INTER_NEAREST), cv2.COLOR_GRAY2BGR)
    for box, colour in boxes:
        bx = [(float(box[0]) - x0) * scale, (float(box[1]) - y0) * scale, (float(box[2]) - x0) * scale, (float(box[3]) - y0) * scale]
        p1 = (int(np.floor(bx[0])), int(np.floor(bx[1])))
        p2 = (int(np.ceil(bx[2])) - 1, int(np.ceil(bx[3])) - 1)
        cv2.rectangle(panel, p1, p2, colour, 1)
    return panel


def _caption(lines: Sequence[str], width: int) -> np.ndarray:
    strip = np.full((CAPTION_H, width, 3), 255, np.uint8)
    for i, text in enumerate(lines[:2]):
        cv2.putText(strip, text, (4, 17 + 20 * i), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
    return strip


def _entry_image(board: np.ndarray, golden: np.ndarray | None, entry: GalleryEntry) -> np.ndarray:
    """BGR uint8 ``[TILE + CAPTION_H, 2 * TILE + GAP, 3]``: board crop | golden crop, caption below."""
    colour = TRUE_BGR if entry.kind == "miss" else FALSE_BGR
    boxes: list[tuple[Sequence[float], tuple]] = [(entry.box, colour)]
    if entry.detection is not None:
        boxes.insert(0, (entry.detection, CAUGHT_BGR))
    row = np.full((TILE, 2 * TILE + GAP, 3), 200, np.uint8)
    row[:, :TILE] = _panel(board, entry.crop, boxes)
    row[:, TILE + GAP :] = _panel(golden, entry.crop, boxes)
    return np.vstack((row, _caption(_caption_lines(entry), row.shape[1])))


def _caption_lines(entry: GalleryEntry) -> list[str]:
    score = "not detected" if entry.score is None else f"score {entry.score:.3f}"
    if entry.kind == "miss":
        head = f"#{entry.rank} {entry.class_name}: {score}{' MISS' if entry.missed else ''}"
        if entry.detected_as is not None and entry.detected_as != entry.class_name:
            head += f" (as {entry.detected_as})"
    else:
        head = f"#{entry.rank} false {entry.class_name}: {score}"
    name = entry.file_name if len(entry.file_name) <= 44 else "..." + entry.file_name[-41:]
    return [head, name]


def _sheet(images: Sequence[np.ndarray]) -> np.ndarray:
    """Entry images in a grid of ``SHEET_COLUMNS`` columns (white background)."""
    if not images:
        return np.full((CAPTION_H, 2 * TILE + GAP, 3), 255, np.uint8)
    h, w = images[0].shape[:2]
    rows = -(-len(images) // SHEET_COLUMNS)
    cols = min(SHEET_COLUMNS, len(images))
    sheet = np.full((rows * (h + GAP), cols * (w + GAP), 3), 255, np.uint8)
    for i, image in enumerate(images):
        r, c = divmod(i, SHEET_COLUMNS)
        sheet[r * (h + GAP) : r * (h + GAP) + h, c * (w + GAP) : c * (w + GAP) + w] = image
    return sheet


def _write_png(path: Path, image: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), image):
        raise OSError(f"{path}: could not write PNG")


def _index_html(entries: Mapping[str, Sequence[GalleryEntry]], conf: float) -> str:
    """A self-contained page: one section per kind, each entry's image with its caption."""
    titles = {
        "miss": (f"Lowest-scored true defects (MISS: under the operating point {conf:g}, or never detected)", "misses.png"),
        "false_call": ("Highest-scored false calls", "false_calls.png"),
    }
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>defect_detector gallery</title>",
        "<style>body{font-family:sans-serif;margin:16px}figure{display:inline-block;margin:6px;vertical-align:top}"
        "figcaption{font-size:12px;max-width:390px;word-break:break-all}</style></head><body>",
        "<h1>Error-analysis gallery</h1><p>Each entry: the board (left) and its golden image (right) around the box. "
        "Green: the true defect; orange: the detection that caught it; red: a false call. Matching as the operating "
        "points: any class, IoU &gt; 0.33.</p>",
    ]
    for kind, items in entries.items():
        title, sheet = titles[kind]
        parts.append(f"<h2>{html.escape(title)}</h2><p><a href='{sheet}'>sheet ({len(items)} entries)</a></p>")
        for e in items:
            caption = html.escape(" / ".join(_caption_lines(e)))
            parts.append(f"<figure><a href='{e.path}'><img src='{e.path}' alt='{caption}'></a><figcaption>{caption}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_gallery(
    out_dir: str | Path,
    coco_gt: COCO,
    predictions: Predictions,
    label_to_cat_id: Mapping[int, int],
    class_names: Sequence[str],
    conf: float,
    load_pair: LoadPair,
    n: int = 32,
) -> dict[str, list[GalleryEntry]]:
    """Write the gallery (module docstring) of ``predictions`` (``{image_id: {"boxes" float32 [K, 4] xyxy original
    pixels, "scores" [K], "labels" int64 [K]}}``, as ``data.evaluate.predict_dataset`` returns) against ``coco_gt``.

    ``label_to_cat_id`` maps model labels to the json's category ids (classes without one are left out);
    ``class_names`` names the labels; ``conf`` is the operating point that marks a true defect as missed;
    ``load_pair(image_id)`` gives the image and its golden image in the same pixels (see :data:`LoadPair`), called
    once per shown image. Returns ``{"miss": [...], "false_call": [...]}``, at most ``n`` entries each.
    """
    out = Path(out_dir)
    cat_id_to_label = {c: label for label, c in label_to_cat_id.items()}
    allowed = set(label_to_cat_id)
    predictions = {
        i: {k: v[torch.isin(p["labels"].cpu(), torch.tensor(sorted(allowed)))] for k, v in p.items()} for i, p in predictions.items()
    }
    defects, false_calls = _candidates(coco_gt, predictions, cat_id_to_label)
    defects.sort(key=lambda c: -1.0 if c.score is None else c.score)
    false_calls.sort(key=lambda c: -(c.score or 0.0))
    chosen = {"miss": defects[:n], "false_call": false_calls[:n]}
    pairs: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
    entries: dict[str, list[GalleryEntry]] = {}
    for kind, candidates in chosen.items():
        folder = "misses" if kind == "miss" else "false_calls"
        entries[kind], images = [], []
        for rank, cand in enumerate(candidates):
            if cand.image_id not in pairs:
                pairs[cand.image_id] = load_pair(cand.image_id)
            board, golden = pairs[cand.image_id]
            entry = GalleryEntry(
                kind=kind,
                rank=rank,
                image_id=cand.image_id,
                file_name=str(coco_gt.imgs[cand.image_id]["file_name"]),
                class_name=class_names[cand.label],
                score=cand.score,
                missed=kind == "miss" and (cand.score is None or cand.score < conf),
                box=tuple(float(v) for v in cand.box),
                detection=cand.detection,
                detected_as=None if cand.detected_label is None else class_names[cand.detected_label],
                crop=crop_window(cand.box, *board.shape[:2]),
                path=f"{folder}/{rank:03d}.png",
            )
            images.append(_entry_image(board, golden, entry))
            _write_png(out / entry.path, images[-1])
            entries[kind].append(entry)
        _write_png(out / f"{folder}.png", _sheet(images))
    atomic_write_text(out / "index.html", _index_html(entries, conf))
    atomic_write_text(out / "gallery.json", json.dumps({k: [asdict(e) for e in v] for k, v in entries.items()}, indent=1))
    return entries
