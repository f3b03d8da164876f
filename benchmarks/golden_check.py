"""The golden check on DeepPCB: true pairs (a board and its own golden image) against wrong pairs.

    python -m benchmarks.golden_check --root ../shared/datasets/deeppcb --split trainval.txt --out golden_check.json

Each board of the split is paired with its own golden image (``<id>_temp.jpg``) and with wrong ones: the golden
image of a board of another group (another design), of the nearest other board of its own group (the neighbouring
board: another region of the same design; a neighbour whose golden image is the board's own picture, a duplicate in
DeepPCB, is left out), a blank image, the golden image shifted by 80 px (a crop of another place), and the golden
image stretched to 800x600 (the first and last on every 10th board). Each board also comes with large defects
painted in (:func:`paint`: :data:`BLOBS` irregular discs of about :data:`BLOB_PX` px, copper on substrate and
substrate on copper, seeded, centred at least :data:`BLOB_PX` px from the frame's edge, so none touches it):
"painted" checks it against its golden image registered on the clean board (the
golden check alone), "painted, registered" registers it too (registration can be pulled by the blobs); "misregistered
6 px" checks the clean board against its golden image moved :data:`MISREGISTRATION` off its registration. Every pair
goes through ``register`` with the shipped ``RegisterConfig`` (registration, then the golden check of
``align/golden_check.py``), and the table says how many are accepted and the worst (true) or best (wrong) measure
of each kind. The ROC: for a sweep of ``max_spread`` (``max_tracks``, ``max_slivers`` and ``max_missing`` as shipped), the share of
true pairs (painted included) refused and of wrong pairs (that registration itself accepts) let through. The
agreement table: on every pair, the C++ example's correlation check (:func:`correlation`, ZNCC of the board and the
golden image as registration warped it, below the artifact's ``golden_check.min_zncc``: refused) against Python's
refusal (registration, then the golden check), and the pairs only one of them refuses.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from tqdm import tqdm

from defect_detector.align.golden_check import MAX_MISSING, MAX_SLIVERS, covered_area, differing, structure
from defect_detector.align.mapping import Mapping
from defect_detector.align.register import Registration, register
from defect_detector.core.config_register import RegisterConfig
from defect_detector.core.io import atomic_write_json
from defect_detector.export.deploy_model import GOLDEN_CHECK

SWEEP = (0.03, 0.05, 0.07, 0.09, 0.11, 0.13, 0.15, 0.2)
BLOBS = 8
"""Large defects painted into each board of the "painted" sets."""
BLOB_PX = 60
"""Their mean diameter (px); each radius is drawn from 0.6 to 1.3 of half of it."""
OFF = {"max_spread": 1.0, "max_tracks": 1e9, "max_slivers": 1.0, "max_missing": 1e9}
"""The golden check off: registration alone decides, so that the table and the sweep can apply any limits."""
TRUE_KINDS = ("true", "painted", "painted, registered")
MISREGISTRATION = (6.0, -4.0)
"""The golden image of "misregistered 6 px": the clean board's registration, moved by this (x, y) px."""
DUPLICATE = 0.002
"""A neighbour's golden image differing from the board's own golden image in less than this share is the same
picture (DeepPCB holds a few): a true pair, not a wrong one."""


def load_pairs(root: Path, split: str, max_boards: int | None) -> list[tuple[Path, Path, str]]:
    """``(board, golden image, group)`` of each board of the split, in file order (every ``n``-th for ``max_boards``)."""
    names = sorted({n for n in (root / split).read_text().split() if n.endswith(".jpg")})
    pairs = [(root / n.replace(".jpg", "_test.jpg"), root / n.replace(".jpg", "_temp.jpg"), n.split("/")[0]) for n in names]
    step = max(1, len(pairs) // max_boards) if max_boards else 1
    return pairs[::step][:max_boards] if max_boards else pairs


def _read(path: Path) -> np.ndarray:
    image = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    if image is None:
        raise ValueError(f"{path}: cannot read the image")
    return image


def _shifted(image: np.ndarray, dx: int, dy: int) -> np.ndarray:
    return cv2.warpAffine(image, np.float32([[1, 0, dx], [0, 1, dy]]), image.shape[::-1], borderValue=114)


def _row(reg: Registration) -> dict[str, Any]:
    measures = {"difference": reg.difference, "spread": reg.spread, "tracks": reg.tracks, "regions": reg.regions}
    return {"registered": bool(reg.ok), **measures, "slivers": reg.slivers, "missing": reg.missing, "reason": reg.reason}


def correlation(board: np.ndarray, golden: np.ndarray, check: dict[str, Any] = GOLDEN_CHECK) -> float:
    """The C++ example's correlation check score (``deploy/cpp/common.hpp`` ``golden_zncc``, its arithmetic): the ZNCC
    of uint8 ``board`` and ``golden`` ``[H, W]`` (the golden image registered into the board's pixels), both shrunk to
    ``int(side * check["scale"])`` with INTER_AREA, as float32 blurred by a Gaussian of ``check["blur_sigma"]``;
    sums in float64; 0 when either is flat. The artifact's meta ``golden_check`` (:data:`GOLDEN_CHECK`) holds the
    settings and the threshold ``min_zncc``."""

    def prepare(gray: np.ndarray) -> np.ndarray:
        size = (max(1, int(gray.shape[1] * check["scale"])), max(1, int(gray.shape[0] * check["scale"])))
        small = cv2.resize(gray, size, interpolation=cv2.INTER_AREA).astype(np.float32)
        if check["blur_sigma"] > 0:
            small = cv2.GaussianBlur(small, (0, 0), check["blur_sigma"])
        return (small - np.float32(small.mean(dtype=np.float64))).ravel().astype(np.float64)

    a, b = prepare(board), prepare(golden)
    denom = math.sqrt(float(a @ a) * float(b @ b))
    return float(a @ b) / denom if denom > 1e-6 else 0.0


def _outcome(golden: np.ndarray, image: np.ndarray, cfg: RegisterConfig) -> dict[str, Any]:
    """Registration with the golden check off (:data:`OFF`), so the table and the sweep can apply any limits; and the
    correlation check of the golden image as registration warped it (what a C++ caller is told to pass)."""
    warped, reg = register(golden, image, cfg.model_copy(update=OFF))
    return {**_row(reg), "correlation": correlation(image, warped)}


def paint(board: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """uint8 ``board`` ``[H, W]`` with :data:`BLOBS` large defects: irregular discs (16 vertices) of about
    :data:`BLOB_PX` px at grey 0 where the board under them is mostly bright, else at 255."""
    out = board.copy()
    h, w = board.shape
    margin = BLOB_PX
    for _ in range(BLOBS):
        cx, cy = rng.integers(margin, max(w - margin, margin + 1)), rng.integers(margin, max(h - margin, margin + 1))
        angles, radii = np.sort(rng.uniform(0, 2 * np.pi, 16)), BLOB_PX / 2 * rng.uniform(0.6, 1.3, 16)
        points = np.stack([cx + radii * np.cos(angles), cy + radii * np.sin(angles)], axis=1).astype(np.int32)
        blob = cv2.fillPoly(np.zeros_like(board), [points], 1) > 0
        out[blob] = 0 if board[blob].mean() > 127 else 255
    return out


def _painted(golden: np.ndarray, board: np.ndarray, cfg: RegisterConfig, rng: np.random.Generator) -> dict[str, dict[str, Any]]:
    """The "painted" rows of one board: the golden check against the clean board's registration, and end to end."""
    painted = paint(board, rng)
    warped, reg = register(golden, board, cfg.model_copy(update=OFF))
    rows = {"painted, registered": _outcome(golden, painted, cfg)}
    if reg.ok:
        rows["painted"] = _checked(warped, painted, reg.covered(board.shape))
        move = np.array([[1, 0, MISREGISTRATION[0]], [0, 1, MISREGISTRATION[1]], [0, 0, 1]])
        shifted = Mapping(move @ reg.mapping.homography, golden.shape)
        moved = shifted.golden_into_frame(golden, board.shape, cv2.INTER_LINEAR, 114)
        rows["misregistered 6 px"] = _checked(moved, board, covered_area(shifted, board.shape))
    return rows


def _checked(golden: np.ndarray, board: np.ndarray, covered: np.ndarray) -> dict[str, Any]:
    """The golden check alone of a golden image already in the board's pixels."""
    found = structure(*differing(golden, board, covered))
    measures = {"difference": found.difference, "spread": found.spread, "tracks": found.tracks, "regions": found.regions}
    row = {"registered": True, **measures, "slivers": found.slivers, "missing": found.missing, "reason": ""}
    return {**row, "correlation": correlation(board, golden)}


def wrong_goldens(i: int, pairs: Sequence[tuple[Path, Path, str]], golden: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The wrong golden images of board ``i`` (see the module docstring)."""
    group = pairs[i][2]
    others = [j for j, p in enumerate(pairs) if p[2] != group]
    same = [j for j, p in enumerate(pairs) if p[2] == group and j != i]
    wrong: dict[str, np.ndarray] = {}
    if others:
        wrong["other design"] = _read(pairs[int(rng.choice(others))][1])
    if same:
        neighbour = _read(pairs[min(same, key=lambda j: (abs(j - i), j))][1])
        duplicate = _outcome(neighbour, golden, RegisterConfig())
        if not (duplicate["registered"] and duplicate["difference"] < DUPLICATE):
            wrong["neighbouring board"] = neighbour
    if i % 10 == 0:
        wrong["blank"] = np.full_like(golden, 255)
        wrong["shifted 80 px"] = _shifted(golden, 80, 0)
        wrong["stretched 800x600"] = cv2.resize(golden, (800, 600), interpolation=cv2.INTER_LINEAR)
    return wrong


def run(pairs: Sequence[tuple[Path, Path, str]], progress: bool = True) -> dict[str, Any]:
    cfg = RegisterConfig()
    rng, paint_rng = np.random.default_rng(0), np.random.default_rng(1)
    rows: dict[str, list[dict[str, Any]]] = {kind: [] for kind in TRUE_KINDS}
    for i, (board_path, golden_path, _) in enumerate(tqdm(pairs, desc="pairs", disable=None if progress else True)):
        board, golden = _read(board_path), _read(golden_path)
        rows["true"].append({"board": board_path.name, **_outcome(golden, board, cfg)})
        for kind, row in _painted(golden, board, cfg, paint_rng).items():
            rows.setdefault(kind, []).append({"board": board_path.name, **row})
        for kind, wrong in wrong_goldens(i, pairs, golden, rng).items():
            rows.setdefault(kind, []).append({"board": board_path.name, **_outcome(wrong, board, cfg)})
    limits = {"max_spread": cfg.max_spread, "max_tracks": cfg.max_tracks, "min_zncc": GOLDEN_CHECK["min_zncc"]}
    agreeing = agreement(rows, cfg.max_spread, cfg.max_tracks, GOLDEN_CHECK["min_zncc"])
    measured = {"table": table(rows, cfg.max_spread, cfg.max_tracks), "roc": roc(rows, cfg.max_tracks), "agreement": agreeing}
    return {**limits, **measured, "rows": rows}


def _accepted(x: dict[str, Any], max_spread: float, max_tracks: float) -> bool:
    within = x["spread"] <= max_spread and x["tracks"] <= max_tracks and x["slivers"] <= MAX_SLIVERS and x["missing"] <= MAX_MISSING
    return bool(x["registered"]) and within


def table(rows: dict[str, list[dict[str, Any]]], max_spread: float, max_tracks: float) -> dict[str, dict[str, Any]]:
    """Per kind: pairs, accepted by registration, accepted by registration and the golden check at the limits, and
    the highest (true kinds) or lowest (wrong kinds) spread and tracks among the pairs registration accepts."""
    out: dict[str, dict[str, Any]] = {}
    for kind, r in rows.items():
        registered = [x for x in r if x["registered"]]
        worst = max if kind in TRUE_KINDS else min
        out[kind] = {
            "pairs": len(r),
            "registered": len(registered),
            "accepted": sum(_accepted(x, max_spread, max_tracks) for x in r),
            "spread": worst((x["spread"] for x in registered), default=None),
            "tracks": worst((x["tracks"] for x in registered), default=None),
            "slivers": worst((x["slivers"] for x in registered), default=None),
            "missing": worst((x["missing"] for x in registered), default=None),
        }
    return out


def agreement(rows: dict[str, list[dict[str, Any]]], max_spread: float, max_tracks: float, min_zncc: float) -> dict[str, dict[str, Any]]:
    """Per kind: the pairs Python refuses (registration, then the golden check at the limits) and those the C++
    example's correlation check refuses (:func:`correlation` below ``min_zncc``, the artifact's meta): how many each,
    both, and the boards of the pairs only one of them refuses; the lowest (true kinds) or highest (wrong kinds) ZNCC."""
    out: dict[str, dict[str, Any]] = {}
    for kind, r in rows.items():
        python = [not _accepted(x, max_spread, max_tracks) for x in r]
        cpp = [not x["correlation"] >= min_zncc for x in r]
        worst = min if kind in TRUE_KINDS else max
        out[kind] = {
            "pairs": len(r),
            "python_refused": sum(python),
            "by_registration": sum(not x["registered"] for x in r),
            "cpp_refused": sum(cpp),
            "both_refused": sum(p and c for p, c in zip(python, cpp)),
            "python_only": [x["board"] for x, p, c in zip(r, python, cpp) if p and not c],
            "cpp_only": [x["board"] for x, p, c in zip(r, python, cpp) if c and not p],
            "correlation": worst((x["correlation"] for x in r), default=None),
        }
    return out


def roc(rows: dict[str, list[dict[str, Any]]], max_tracks: float) -> list[dict[str, float]]:
    """For each ``max_spread`` of :data:`SWEEP` (at ``max_tracks``): true pairs (painted included) refused by the check
    and wrong pairs let through, of those registration accepts."""
    true = [x for k in TRUE_KINDS for x in rows.get(k, []) if x["registered"]]
    wrong = [x for k, r in rows.items() if k not in TRUE_KINDS for x in r if x["registered"]]
    return [
        {
            "max_spread": limit,
            "true_refused": sum(not _accepted(x, limit, max_tracks) for x in true) / max(len(true), 1),
            "wrong_accepted": sum(_accepted(x, limit, max_tracks) for x in wrong) / max(len(wrong), 1),
        }
        for limit in SWEEP
    ]


_COLUMNS = (("spread", "{:7.3f}"), ("tracks", "{:7.2f}"), ("slivers", "{:7.3f}"), ("missing", "{:7.2f}"))


def _measure(value: float | None, text: str) -> str:
    return f"{'-':>{len(text)}s}" if value is None else text.format(value)


def print_report(report: dict[str, Any]) -> None:
    print(f"golden check, register.max_spread {report['max_spread']:.3f}, register.max_tracks {report['max_tracks']:g}")
    head = f"{'pair':22s} {'pairs':>6s} {'registered':>11s} {'accepted':>9s} {'spread':>7s} {'tracks':>7s} {'slivers':>7s} {'missing':>7s}"
    print(f"{head}  (worst true / best wrong)")
    for kind, row in report["table"].items():
        measures = " ".join(_measure(row[k], f) for k, f in _COLUMNS)
        print(f"{kind:22s} {row['pairs']:>6d} {row['registered']:>11d} {row['accepted']:>9d} {measures}")
    for kind in TRUE_KINDS:
        for x in report["rows"].get(kind, []):
            if not x["registered"]:
                print(f"  {kind} pair refused by registration: {x['board']}: {x['reason']}")
    print_agreement(report["agreement"], report["min_zncc"])
    print(f"{'max_spread':>14s} {'true refused':>13s} {'wrong accepted':>15s}")
    for point in report["roc"]:
        print(f"{point['max_spread']:>14.3f} {point['true_refused']:>13.4f} {point['wrong_accepted']:>15.4f}")


def print_agreement(agreeing: dict[str, dict[str, Any]], min_zncc: float) -> None:
    print(f"refused by Python (registration + golden check; (reg.): registration) and by the C++ correlation check (ZNCC < {min_zncc:.2f})")
    counts = f"{'Python':>7s} {'(reg.)':>7s} {'C++':>5s} {'both':>5s} {'Python only':>12s} {'C++ only':>9s}"
    head = f"{'pair':22s} {'pairs':>6s} {counts} {'ZNCC':>6s}"
    print(f"{head}  (lowest true / highest wrong)")
    for kind, row in agreeing.items():
        counts = f"{row['python_refused']:>7d} {row['by_registration']:>7d} {row['cpp_refused']:>5d} {row['both_refused']:>5d}"
        zncc = _measure(row["correlation"], "{:6.3f}")
        print(f"{kind:22s} {row['pairs']:>6d} {counts} {len(row['python_only']):>12d} {len(row['cpp_only']):>9d} {zncc}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.golden_check", description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="../shared/datasets/deeppcb", help="DeepPCB root (PCBData)")
    parser.add_argument("--split", default="trainval.txt", help="split file under --root")
    parser.add_argument("--max-boards", type=int, help="use this many boards, spread over the split (default: all)")
    parser.add_argument("--out", help="write the report (with every pair) as JSON here")
    args = parser.parse_args(argv)
    report = run(load_pairs(Path(args.root), args.split, args.max_boards))
    print_report(report)
    if args.out:
        atomic_write_json(Path(args.out), report)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
