"""Real photographs of boards as a line's day delivers them: false calls on good captures and painted recall (issue 55
item 4).

Each photograph under ``--photos`` (default: ``$DEFECT_DETECTOR_PHOTOS``, else the repository's
``../shared/datasets/photos``; read where it lies, never copied, validation only, never trained on), read as 8-bit
grayscale, enlarged ``--zoom`` times (the line's photographs are 2240-3056 px wide, and a scale's misregistration
grows with the size) and optionally cut to a centred ``--crop``, is a golden image. For each one:

- ``--good`` defect-free captures of it under the capture model (``--capture``: ``line``, ``gentle``, a factor alone
  such as ``scale``, or at a value, ``scale-1.005``; several, comma-separated, share the same painted boards;
  ``core/capture.py``);
- ``--painted`` boards with ``--defects`` defects painted on it (``looks/paint.py``, as ``teach`` paints its golden
  images: their size read from the design's thinnest tracks, or ``--paint-size`` times DeepPCB's; clear of the band
  along the edges a capture can move out of the frame), each then captured, its boxes moved through the capture's
  geometry.

With ``--teach N`` each design is first taught as a line brings it in (``teach --good``, ``jobs/teach.py``): ``N``
further defect-free captures of the photograph (the first ``--capture`` model, their own seed), the photograph as
its golden image, ``--minutes`` each, the designs accumulated in one taught weights file; the held-out captures
above are then inspected with it (the issue 56 target: at most 0.1 false calls per held-out good board, 99% of the
painted defects caught at the design's point).

Every image is inspected as ``predict --reference`` does with the default weights (each design goes to the bundled
weights that cover its look), at the weights' operating point, drift monitoring off (it changes no call), and
counted as an inspector counts (``benchmarks/line_captures.py`` ``count_calls``): false calls per good board; good
boards refused and why; painted recall (a defect on a refused board is missed); calls off any defect and further
calls on a caught defect, per painted board; per photograph and overall, with the range of every number of the
records' ``registration``::

    nice python -m benchmarks.photo_captures --capture line,gentle,scale-1.005 --good 4 --painted 4 --zoom 2.2 --out r.json
    nice python -m benchmarks.photo_captures --capture line --teach 8 --good 8 --painted 4 --out taught.json

Bad input (no photographs, an unknown capture, a zoom outside 0.25-4, a paint size outside 0.25-8) is one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from tqdm import tqdm

from benchmarks.line_captures import count_calls
from defect_detector.core.capture import CAPTURE, CaptureModel, draw_capture, named_model
from defect_detector.core.io import atomic_write_json
from defect_detector.data.images import load_image_gray
from defect_detector.inspect.inspector import Inspector
from defect_detector.inspect.record import registration_json
from defect_detector.inspect.tolerance import MIN_GOOD
from defect_detector.jobs.teach import teach
from defect_detector.looks.paint import paint_defects

PHOTOS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "photos"
"""The repository's ``../shared/datasets/photos``."""
SUFFIXES = (".jpg", ".jpeg", ".png", ".tif", ".tiff", ".bmp")
EDGE_EXTRA = 16
"""Pixels kept free of paint beyond the farthest a capture can move a pixel (the golden view keeps no call within 12
px of the area the moved board does not cover)."""


@dataclass(frozen=True)
class Plan:
    """What to measure (module docstring): ``captures`` (names, :func:`named_model`), boards per photograph, defects
    per painted board, ``zoom``, ``crop`` (side px after the zoom; 0: whole), ``seed``, ``weights`` (None: the
    bundled, chosen per design), ``conf`` (None: the weights' operating point), torch ``threads``, ``paint_size``
    (DeepPCB's defect sizes times this; None: read from each design, as ``teach`` paints), ``teach`` (good captures
    per design taught from first, ``teach --good``; 0: none) and ``minutes`` (``teach --minutes`` per design)."""

    captures: tuple[str, ...] = ("line",)
    good: int = 4
    painted: int = 4
    defects: int = 4
    zoom: float = 1.0
    crop: int = 0
    seed: int = 0
    weights: str | None = None
    conf: float | None = None
    threads: int = 1
    paint_size: float | None = None
    teach: int = 0
    minutes: float = 2.0


def photos_folder(given: Path | None = None) -> Path:
    """``given``, else ``$DEFECT_DETECTOR_PHOTOS``, else :data:`PHOTOS`."""
    if given is not None:
        return given
    return Path(os.environ["DEFECT_DETECTOR_PHOTOS"]) if os.environ.get("DEFECT_DETECTOR_PHOTOS") else PHOTOS


def list_photos(folder: Path) -> list[Path]:
    """The image files of ``folder``, sorted; ``FileNotFoundError`` in one line when there are none."""
    found = sorted(p for p in folder.glob("*") if p.suffix.lower() in SUFFIXES) if folder.is_dir() else []
    if not found:
        raise FileNotFoundError(f"{folder}: no photographs ({', '.join(SUFFIXES)}); give --photos or set DEFECT_DETECTOR_PHOTOS")
    return found


def golden_of(path: Path, zoom: float, crop: int) -> np.ndarray:
    """The photograph at ``path`` as a golden image: uint8 gray, enlarged ``zoom`` times (bicubic), then its centred
    ``crop`` px square (0: whole)."""
    image = load_image_gray(path)
    if zoom != 1.0:
        size = (round(image.shape[1] * zoom), round(image.shape[0] * zoom))
        image = cv2.resize(image, size, interpolation=cv2.INTER_CUBIC)
    if crop:
        h, w = image.shape
        y, x = max(0, (h - crop) // 2), max(0, (w - crop) // 2)
        image = np.ascontiguousarray(image[y : y + crop, x : x + crop])
    return image


def edge_band(shape: tuple[int, int], model: CaptureModel) -> int:
    """Px along each edge a capture of ``model`` (or of a line's day, whichever moves more) can move a pixel across,
    plus :data:`EDGE_EXTRA`: a bound from the models' largest factors."""
    h, w = shape
    half = math.hypot(h, w) / 2
    reach = 0.0
    for m in (CAPTURE, model):
        turn = math.sin(math.radians(max(map(abs, m.degrees)))) + max(abs(s - 1) for s in m.scale) + abs(m.perspective[1]) * 2
        reach = max(reach, math.hypot(*[max(map(abs, m.shift))] * 2) + (turn + max(map(abs, m.k1))) * half + m.bow[1])
    return int(math.ceil(reach)) + EDGE_EXTRA


def painted_boards(golden: np.ndarray, plan: Plan, rng: np.random.Generator, edge: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``plan.painted`` boards: ``(board uint8 [H, W], boxes float32 [N, 4] xyxy px)``, ``plan.defects`` defects
    painted on ``golden`` (fewer where it has no room), none within ``edge`` px of an edge."""
    h, w = golden.shape
    strips = np.array([[0, 0, edge, h], [w - edge, 0, w, h], [0, 0, w, edge], [0, h - edge, w, h]], np.float32)
    boards = []
    for _ in range(plan.painted):
        board, boxes, _ = paint_defects(golden, plan.defects, rng, avoid=strips, size=plan.paint_size)
        boards.append((board, boxes))
    return boards


def frames(
    golden: np.ndarray, painted: list[tuple[np.ndarray, np.ndarray]], good: int, model: CaptureModel, rng: np.random.Generator
) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """``(kind, captured uint8 [H, W], defect boxes float64 [N, 4] xyxy in the captured frame)``: ``good`` defect-free
    captures of ``golden``, then each painted board captured, its boxes moved (those mostly out of frame dropped)."""
    for _ in range(good):
        yield "good", draw_capture(golden.shape, rng, model).apply(golden), np.zeros((0, 4))
    for board, boxes in painted:
        capture = draw_capture(board.shape, rng, model)
        moved, keep = capture.geometry.boxes(boxes)
        yield "painted", capture.apply(board), moved[keep]


def _numbers(values: dict[str, Any] | None, prefix: str = "") -> dict[str, float]:
    """The numbers of a nested record dict, keyed ``a.b``; booleans and text left out."""
    out: dict[str, float] = {}
    for key, value in (values or {}).items():
        if isinstance(value, dict):
            out |= _numbers(value, f"{prefix}{key}.")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"{prefix}{key}"] = float(value)
    return out


def inspect_frame(inspector: Inspector, image: np.ndarray, golden: np.ndarray, name: str, truth: np.ndarray) -> dict[str, Any]:
    """One frame's row: its verdict, the refusal's kind and words, the weights, calls counted against ``truth``
    (``caught``, ``off``, ``further``) and the registration's numbers."""
    record = inspector.inspect(image, name=name, reference=golden)
    refused = record.verdict == "not_inspected" or record.detections is None
    row: dict[str, Any] = {"name": name, "verdict": str(record.verdict), "weights": record.weights, "defects": len(truth),
                           "registration": _numbers(registration_json(record.registration))}  # fmt: skip
    if refused:
        kind = record.refusal.kind.value if record.refusal is not None else "unknown"
        return row | {"refused": kind, "reason": record.reason, "calls": 0, "caught": 0, "off": 0, "further": 0, "tolerated": 0}
    caught, off, further = count_calls(record.detections.boxes, torch.as_tensor(truth, dtype=torch.float32).reshape(-1, 4))
    counted = {"calls": len(record.detections), "caught": caught, "off": off, "further": further, "tolerated": record.detections.tolerated}
    return row | {"refused": None, "reason": record.reason} | counted


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What an inspector counts over ``rows`` (module docstring)."""
    out: dict[str, Any] = {}
    for kind in ("good", "painted"):
        mine = [r for r in rows if r["kind"] == kind]
        inspected = [r for r in mine if r["refused"] is None]
        n = max(len(inspected), 1)
        part = {"boards": len(mine), "inspected": len(inspected), "refused": len(mine) - len(inspected),
                "refusals": dict(Counter(r["refused"] for r in mine if r["refused"] is not None)),
                "reasons": sorted({r["reason"] for r in mine if r["refused"] is not None})[:5],
                "verdicts": dict(Counter(r["verdict"] for r in mine)), "weights": dict(Counter(r["weights"] for r in mine)),
                "tolerated_per_board": sum(r["tolerated"] for r in inspected) / n}  # fmt: skip
        if kind == "good":
            part["false_calls_per_board"] = sum(r["off"] + r["further"] for r in inspected) / n
        else:
            defects = sum(r["defects"] for r in mine)
            part |= {"defects": defects, "caught": sum(r["caught"] for r in mine),
                     "recall": sum(r["caught"] for r in mine) / max(defects, 1),
                     "off_calls_per_board": sum(r["off"] for r in inspected) / n,
                     "further_calls_per_board": sum(r["further"] for r in inspected) / n,
                     "false_calls_per_board": sum(r["off"] + r["further"] for r in inspected) / n}  # fmt: skip
        out[kind] = part
    ranges: dict[str, list[float]] = {}
    for r in rows:
        for key, value in r["registration"].items():
            low, high = ranges.get(key, [value, value])
            ranges[key] = [round(min(low, value), 4), round(max(high, value), 4)]
    return out | {"registration": ranges}


def taught_weights(photos: list[Path], plan: Plan, work: Path) -> tuple[str, list[dict[str, Any]]]:
    """The weights every design of ``photos`` is taught into (``teach --good``, module docstring), one after the other
    from ``plan.weights`` (None: ``teach``'s default), in ``work``; and per design what ``teach`` reported."""
    weights, taught = plan.weights, []
    model = named_model(plan.captures[0])
    for index, path in enumerate(photos):
        golden = golden_of(path, plan.zoom, plan.crop)
        folder = work / path.stem
        (folder / "good").mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(folder / "golden.png"), golden)
        rng = np.random.default_rng([plan.seed, index, 2])
        for n in range(plan.teach):
            cv2.imwrite(str(folder / "good" / f"good{n:02d}.png"), draw_capture(golden.shape, rng, model).apply(golden))
        out = work / f"taught{index}.pt"
        report = teach(folder / "golden.png", out, weights, plan.minutes, seed=plan.seed, threads=plan.threads, good=folder / "good")
        good, outcome = report.good, report.designs[0]
        taught.append({"photo": path.stem, "minutes": round(report.minutes, 2), "conf": round(good.conf, 4), "tuning": report.tuning,
                       "inspected": len(good.inspected), "refused": [why for _, why in good.refused],
                       "false_calls_held_out": round(good.per_board(good.conf, True), 3),
                       "painted_on_good": list(good.painted_caught(good.conf)), "painted_on_captures": round(outcome.after.caught, 4),
                       "places": len(good.tolerance.places)})  # fmt: skip
        weights = str(out)
    return weights, taught


def measure(photos: list[Path], plan: Plan) -> dict[str, Any]:
    """Every capture of ``plan`` over ``photos`` (module docstring): ``{"plan", "captures": {name: {"overall",
    "photos": {photo: summary}, "rows"}}, "taught"}``; with ``plan.teach`` also ``"before"``: the same boards inspected
    with the weights taught from (``captures``: with the taught ones)."""
    models = {name: named_model(name) for name in plan.captures}
    torch.set_num_threads(plan.threads)
    if not plan.teach:
        return _measure(photos, plan, models, plan.weights) | {"taught": []}
    with tempfile.TemporaryDirectory(prefix="photo_teach_") as work:
        weights, taught = taught_weights(photos, plan, Path(work))
        before = {name: {"overall": c["overall"]} for name, c in _measure(photos, plan, models, plan.weights)["captures"].items()}
        return _measure(photos, plan, models, weights) | {"taught": taught, "before": before}


def _measure(photos: list[Path], plan: Plan, models: dict[str, CaptureModel], weights: str | None) -> dict[str, Any]:
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    total = len(photos) * len(models) * (plan.good + plan.painted)
    with Inspector.load(weights, reference=photos[0], device="cpu", threads=plan.threads, conf=plan.conf, monitor=False) as inspector:
        progress = tqdm(total=total, desc="photo captures")
        for index, path in enumerate(photos):
            golden = golden_of(path, plan.zoom, plan.crop)
            edge = max(edge_band(golden.shape, m) for m in models.values())
            painted = painted_boards(golden, plan, np.random.default_rng([plan.seed, index, 0]), edge)
            for name, model in models.items():
                made = frames(golden, painted, plan.good, model, np.random.default_rng([plan.seed, index, 1]))
                for n, (kind, image, truth) in enumerate(made):
                    row = inspect_frame(inspector, image, golden, f"{path.stem}/{kind}{n:02d}", truth)
                    rows[name].append(row | {"kind": kind})
                    progress.update()
        progress.close()
    captures = {}
    for name, mine in rows.items():
        by_photo = {p.stem: summary([r for r in mine if r["name"].startswith(f"{p.stem}/")]) for p in photos}
        captures[name] = {"overall": summary(mine), "photos": by_photo, "rows": mine}
    return {"plan": asdict(plan), "photos": [p.name for p in photos], "captures": captures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", type=Path, default=None, help="default: $DEFECT_DETECTOR_PHOTOS, ../shared/datasets/photos")
    parser.add_argument("--only", default=None, help="only the photographs whose file name contains this")
    parser.add_argument("--capture", default="line", help="capture models, comma-separated: line, gentle, off, scale, scale-1.005, ...")
    parser.add_argument("--good", type=int, default=4, help="defect-free captures per photograph")
    parser.add_argument("--painted", type=int, default=4, help="painted boards per photograph")
    parser.add_argument("--defects", type=int, default=4, help="defects painted per board")
    parser.add_argument("--paint-size", type=float, default=None, help="DeepPCB's defect sizes times this (default: read from the design)")
    parser.add_argument("--zoom", type=float, default=1.0, help="enlarge each photograph this many times (2.2: the line's 2800 px)")
    parser.add_argument("--crop", type=int, default=0, help="a centred square of this side, px after the zoom (0: whole)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--weights", default=None, help="weights (default: the bundled ones, chosen per design by its look)")
    parser.add_argument("--conf", type=float, default=None, help="score threshold (default: the weights' operating point)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--teach", type=int, default=0, help="teach each design from this many further good captures first (0: no)")
    parser.add_argument("--minutes", type=float, default=2.0, help="teach --minutes per design (with --teach)")
    parser.add_argument("--out", type=Path, default=None, help="write the report and every frame's row here (JSON)")
    args = parser.parse_args(argv)
    plan = Plan(tuple(args.capture.split(",")), args.good, args.painted, args.defects, args.zoom, args.crop, args.seed, args.weights,
                args.conf, args.threads, args.paint_size, args.teach, args.minutes)  # fmt: skip
    try:
        if not 0.25 <= plan.zoom <= 4:
            raise ValueError(f"--zoom {plan.zoom}: give 0.25 to 4")
        if plan.teach and plan.teach < MIN_GOOD:
            raise ValueError(f"--teach {plan.teach}: teach --good needs {MIN_GOOD} or more good boards")
        if plan.paint_size is not None and not 0.25 <= plan.paint_size <= 8:
            raise ValueError(f"--paint-size {plan.paint_size}: give 0.25 to 8")
        for name in plan.captures:
            named_model(name)
        photos = [p for p in list_photos(photos_folder(args.photos)) if args.only is None or args.only in p.name]
        if not photos:
            raise FileNotFoundError(f"no photograph's name contains {args.only!r}")
        report = measure(photos, plan)
    except (ValueError, FileNotFoundError) as exc:
        print(f"photo_captures: error: {exc}", file=sys.stderr)
        return 2
    printed = {name: {"overall": c["overall"], "photos": c["photos"]} for name, c in report["captures"].items()}
    print(json.dumps({"plan": report["plan"], "taught": report["taught"], "before": report.get("before"), "captures": printed}, indent=1))
    if args.out is not None:
        atomic_write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
