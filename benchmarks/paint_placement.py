"""Where painted defects land, how large their boxes are and how visible their paint, on three kinds of golden image.

Kinds (``--n`` images each, ``--defects`` defects painted on each, hand-made ones at a random scale in 0.5-3x DeepPCB's):

- ``hand``: a design drawn with OpenCV as a newcomer would (``cv2.line`` tracks of two widths, ``cv2.circle`` pads;
  dark on bright or bright on dark, antialiased or not); its copper mask is what was drawn;
- ``rendered``: DeepPCB golden layouts at 1-2.5x rendered as photographs (``looks/render.py`` ``render_pair``,
  ``train`` and ``holdout`` looks, as ``synth --render``); the copper mask is the layout's;
- ``deeppcb``: DeepPCB golden images (binarized, copper 0; ``--deeppcb`` folder, else ``data/samples/golden``), scale 1.

A defect is *placed* where it belongs when its paint (pixels changed by over half the copper/substrate contrast, read
against the true copper mask) is: open, on copper and splitting it (more copper components around it); short, on
substrate and joining two; mousebite, on copper and touching substrate; spur, on substrate and touching copper;
copper, on substrate; pin-hole, on copper and clear of substrate. Boxes are checked to hold every changed pixel and
their side against ``MIN_BOX_PX`` times the design's true scale.

    .venv/bin/python -m benchmarks.paint_placement [--n 20] [--defects 4] [--crops docs/img/paint_crops.png]
"""

from __future__ import annotations

import argparse
import glob
from pathlib import Path

import cv2
import numpy as np

from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.looks.paint import DEEPPCB_TRACK_PX, MIN_BOX_PX, paint_defects, read_levels, track_width
from defect_detector.looks.render import render_pair, sample_look

_SIDE = 640


def draw_design(rng: np.random.Generator, scale: float, side: int = _SIDE) -> tuple[np.ndarray, np.ndarray]:
    """A hand-drawn layout at ``scale`` times DeepPCB's: ``(image uint8 [side, side], copper bool [side, side])``.
    Nets are polylines of thin (5-8 px times ``scale``, at least 2) or thick (2-3x) ``cv2.line`` tracks with a
    ``cv2.circle`` pad at each end; dark on bright or bright on dark, antialiased or not."""
    copper = np.zeros((side, side), np.uint8)
    thin = max(2, round(rng.uniform(5.0, 8.0) * scale))
    margin = int(20 * scale) + 8
    for _ in range(int(40 / scale) + 4):
        width = thin if rng.random() < 0.6 else round(thin * rng.uniform(2.0, 3.0))
        points = [rng.integers(margin, side - margin, 2)]
        for _ in range(int(rng.integers(1, 4))):
            step = rng.integers(-int(160 * scale), int(160 * scale) + 1, 2)
            if rng.random() < 0.7:  # along an axis, else at 45 degrees
                step[int(rng.integers(2))] = 0
            else:
                step[1] = abs(step[0]) * (1 if rng.random() < 0.5 else -1)
            points.append(np.clip(points[-1] + step, margin, side - margin))
        for a, b in zip(points, points[1:]):
            cv2.line(copper, (int(a[0]), int(a[1])), (int(b[0]), int(b[1])), 255, int(width))
        radius = max(width, thin) + round(rng.uniform(2.0, 5.0) * scale)
        for end in (points[0], points[-1]):
            cv2.circle(copper, (int(end[0]), int(end[1])), int(radius), 255, -1)
    aa = rng.random() < 0.5
    image = copper.copy()
    if aa:  # draw again, antialiased: the same geometry with soft edges
        image = cv2.GaussianBlur(copper, (0, 0), 0.6)
    fg, bg = float(rng.uniform(0, 70)), float(rng.uniform(180, 250))
    if rng.random() < 0.5:
        fg, bg = bg, fg
    pixels = bg + (fg - bg) * image.astype(np.float32) / 255.0
    return np.clip(np.round(pixels), 0, 255).astype(np.uint8), copper > 127


def _components(mask: np.ndarray) -> int:
    return cv2.connectedComponents(mask.astype(np.uint8), connectivity=8)[0] - 1


def placed(label: int, paint: np.ndarray, copper: np.ndarray) -> bool:
    """Whether bool ``paint`` (the pixels a defect of ``label`` changed, a window of the image) lies where that kind
    belongs against the true bool ``copper`` of the same window (module docstring)."""
    if not paint.any():
        return False
    on_copper = float(copper[paint].mean())
    grown = cv2.dilate(paint.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
    touches_substrate, touches_copper = bool((grown & ~copper).any()), bool((grown & copper & ~paint).any())
    before = _components(copper)
    if label == 0:
        return on_copper >= 0.8 and _components(copper & ~paint) > before
    if label == 1:
        return on_copper <= 0.5 and _components(copper | paint) < before
    if label == 2:
        return on_copper >= 0.8 and touches_substrate and _components(copper & ~paint) <= before
    if label == 3:
        return on_copper <= 0.2 and touches_copper
    if label == 4:
        return on_copper <= 0.1
    return on_copper >= 0.9 and not touches_substrate


def measure(golden: np.ndarray, copper: np.ndarray, scale: float, defects: int, rng: np.random.Generator) -> dict:
    """Paint ``defects`` on ``golden`` at the design's ``scale`` (as a caller that knows it does) and measure each
    against the true ``copper`` mask."""
    board, boxes, labels = paint_defects(golden, defects, rng, size=scale)
    contrast = abs(float(np.median(golden[copper])) - float(np.median(golden[~copper])))
    diff = np.abs(board.astype(np.float32) - golden.astype(np.float32))
    inside = np.zeros(golden.shape, bool)
    rows = []
    for (x0, y0, x1, y1), label in zip(boxes, labels):
        ix0, iy0, ix1, iy1 = int(x0), int(y0), int(np.ceil(x1)), int(np.ceil(y1))
        inside[iy0:iy1, ix0:ix1] = True
        window = diff[iy0:iy1, ix0:ix1]
        core = window > 0.5 * contrast
        rows.append({
            "label": int(label),
            "placed": placed(int(label), core, copper[iy0:iy1, ix0:ix1]),
            "side": float(min(x1 - x0, y1 - y0)),
            "side_ok": min(x1 - x0, y1 - y0) >= MIN_BOX_PX * scale * 0.8 - 1e-3,
            "share": float((window > 0.25 * contrast).mean()),
            "contrast": float(np.percentile(window, 95) / max(contrast, 1.0)),
        })
    outside = int((diff[~inside] >= 1.0).sum())
    return {"rows": rows, "outside": outside, "wanted": defects, "board": board, "boxes": boxes, "labels": labels}


def _goldens(kind: str, n: int, deeppcb: str, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """``n`` ``(golden uint8, copper bool, scale)`` of ``kind``."""
    out = []
    if kind in ("deeppcb", "rendered"):
        files = sorted(glob.glob(f"{deeppcb}/**/*_temp.jpg", recursive=True)) or sorted(glob.glob("data/samples/golden/*"))
        step = max(1, len(files) // n)
        for k, path in enumerate(files[step // 2 if kind == "rendered" else 0 :: step][:n]):
            layout = cv2.imread(path, cv2.IMREAD_GRAYSCALE)
            scale = 1.0 if kind == "deeppcb" else float(rng.uniform(1.0, 2.5))
            if scale != 1.0:
                big = cv2.resize(layout, None, fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR)
                layout = np.where(big < 128, 0, 255).astype(np.uint8)
                layout = layout[: 2 * _SIDE, : 2 * _SIDE]
            image = layout
            if kind == "rendered":
                image = render_pair(layout, layout, sample_look(rng, "train" if k % 2 else "holdout"), rng, scale=scale)[1]
            out.append((image, layout < 128, scale))
        return out
    for _ in range(n):
        scale = float(np.exp(rng.uniform(np.log(0.5), np.log(3.0))))
        out.append((*draw_design(rng, scale), scale))
    return out


def _crop(board: np.ndarray, golden: np.ndarray, box: np.ndarray, side: int = 72) -> np.ndarray:
    """A ``side`` px square of golden | board around ``box`` (drawn in red on the board), BGR uint8."""
    x0, y0, x1, y1 = box
    half = max(x1 - x0, y1 - y0) * 0.75 + 4
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    h, w = golden.shape
    a, b = int(max(0, cx - half)), int(max(0, cy - half))
    c, d = int(min(w, cx + half)), int(min(h, cy + half))
    tiles = []
    for image, draw in ((golden, False), (board, True)):
        tile = cv2.cvtColor(image[b:d, a:c], cv2.COLOR_GRAY2BGR)
        if draw:
            cv2.rectangle(tile, (int(x0) - a, int(y0) - b), (int(x1) - a - 1, int(y1) - b - 1), (0, 0, 255), 1)
        tiles.append(cv2.resize(tile, (side, side), interpolation=cv2.INTER_AREA if c - a > side else cv2.INTER_NEAREST))
    return np.hstack([tiles[0], np.full((side, 2, 3), 255, np.uint8), tiles[1]])


def _crop_row(kind: str, samples: list[tuple[np.ndarray, dict]]) -> np.ndarray:
    """One crop per class (the first painted) of ``samples`` ``(golden, measured)``, labelled with ``kind``."""
    crops = []
    for label in range(len(DEEPPCB_CLASSES)):
        found = [(g, m, i) for g, m in samples for i, lab in enumerate(m["labels"]) if lab == label]
        if found:
            golden, m, i = found[0]
            crops.append(_crop(m["board"], golden, m["boxes"][i]))
    row = np.hstack([np.pad(c, ((0, 0), (0, 6), (0, 0)), constant_values=255) for c in crops])
    head = np.full((16, row.shape[1], 3), 255, np.uint8)
    cv2.putText(head, kind, (2, 12), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 1, cv2.LINE_AA)
    return np.vstack([head, row])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--defects", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--deeppcb", default="/work/shared/datasets/deeppcb")
    parser.add_argument("--crops", default="")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print("kind | placed | boxes/asked | box side min / median (px, over MIN_BOX_PX x scale: min) | changed share of box median | "
          "contrast p95/contrast median | pixels changed outside boxes | scale read / true (median, min-max)")
    rows_out = []
    for kind in ("hand", "rendered", "deeppcb"):
        samples, rows, outside, asked, ratios = [], [], 0, 0, []
        for golden, copper, scale in _goldens(kind, args.n, args.deeppcb, rng):
            m = measure(golden, copper, scale, args.defects, rng)
            samples.append((golden, m))
            rows += m["rows"]
            outside += m["outside"]
            asked += m["wanted"]
            ratios.append(track_width(read_levels(golden).copper_mask) / DEEPPCB_TRACK_PX / scale)  # a diagnostic, not a size
            for r in m["rows"]:
                r["rel"] = r["side"] / (MIN_BOX_PX * scale)
        kinds = sorted({r["label"] for r in rows})
        per = {DEEPPCB_CLASSES[c]: f"{np.mean([r['placed'] for r in rows if r['label'] == c]):.0%}" for c in kinds}
        sides = np.array([r["side"] for r in rows])
        print(f"{kind} | {np.mean([r['placed'] for r in rows]):.1%} {per} | {len(rows)}/{asked} | "
              f"{sides.min():.0f} / {np.median(sides):.0f} "
              f"({min(r['rel'] for r in rows):.2f}) | {np.median([r['share'] for r in rows]):.1%} | "
              f"{np.median([r['contrast'] for r in rows]):.2f} | {outside} | {np.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
        rows_out.append(_crop_row(kind, samples))
    if args.crops:
        width = max(r.shape[1] for r in rows_out)
        page = np.vstack([np.pad(r, ((0, 4), (0, width - r.shape[1]), (0, 0)), constant_values=255) for r in rows_out])
        Path(args.crops).parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(args.crops, page, [cv2.IMWRITE_PNG_COMPRESSION, 9])
        print(f"crops: {args.crops} ({Path(args.crops).stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
