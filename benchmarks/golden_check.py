"""The golden check on DeepPCB: true pairs (a board and its own golden image) against wrong pairs.

    python -m benchmarks.golden_check --root ../shared/datasets/deeppcb --split trainval.txt --out golden_check.json

Each board of the split is paired with its own golden image (``<id>_temp.jpg``) and with wrong ones: the golden
image of a board of another group (another design), of the nearest other board of its own group (the neighbouring
board: another region of the same design; a neighbour whose golden image is the board's own picture, a duplicate in
DeepPCB, is left out), a blank image, the golden image shifted by 80 px (a crop of another place), and the golden
image stretched to 800x600 (the first and last on every 10th board). Every pair goes through ``register`` with the
shipped ``RegisterConfig`` (registration, then the golden check of ``data/golden_check.py``), and the table says how
many are accepted. The ROC: for a sweep of ``max_difference``, the share of true pairs refused and of wrong pairs
(that registration itself accepts) let through.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from tqdm import tqdm

from defect_detector.core.io import atomic_write_json
from defect_detector.data.register import RegisterConfig, register

SWEEP = (0.008, 0.010, 0.012, 0.014, 0.016, 0.018, 0.020, 0.025, 0.03)
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


def _outcome(golden: np.ndarray, image: np.ndarray, cfg: RegisterConfig) -> dict[str, Any]:
    """Registration with the golden check off (``max_difference`` 1), so the sweep can apply any threshold."""
    _, reg = register(golden, image, cfg.model_copy(update={"max_difference": 1.0}))
    return {"registered": bool(reg.ok), "difference": float(reg.difference), "reason": reg.reason}


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
    rng = np.random.default_rng(0)
    rows: dict[str, list[dict[str, Any]]] = {"true": []}
    for i, (board_path, golden_path, _) in enumerate(tqdm(pairs, desc="pairs", disable=None if progress else True)):
        board, golden = _read(board_path), _read(golden_path)
        rows["true"].append({"board": board_path.name, **_outcome(golden, board, cfg)})
        for kind, wrong in wrong_goldens(i, pairs, golden, rng).items():
            rows.setdefault(kind, []).append({"board": board_path.name, **_outcome(wrong, board, cfg)})
    return {"max_difference": cfg.max_difference, "table": table(rows, cfg.max_difference), "roc": roc(rows), "rows": rows}


def table(rows: dict[str, list[dict[str, Any]]], limit: float) -> dict[str, dict[str, int]]:
    """Per kind: pairs, accepted by registration, accepted by registration and the golden check at ``limit``."""
    return {
        kind: {
            "pairs": len(r),
            "registered": sum(x["registered"] for x in r),
            "accepted": sum(x["registered"] and x["difference"] <= limit for x in r),
        }
        for kind, r in rows.items()
    }


def roc(rows: dict[str, list[dict[str, Any]]]) -> list[dict[str, float]]:
    """For each ``max_difference`` of :data:`SWEEP`: true pairs refused by the check, wrong pairs let through (of those
    registration accepts), and the largest true / smallest wrong difference."""
    true = [x["difference"] for x in rows["true"] if x["registered"]]
    wrong = [x["difference"] for k, r in rows.items() if k != "true" for x in r if x["registered"]]
    return [
        {
            "max_difference": limit,
            "true_refused": sum(d > limit for d in true) / max(len(true), 1),
            "wrong_accepted": sum(d <= limit for d in wrong) / max(len(wrong), 1),
            "true_max": max(true, default=0.0),
            "wrong_min": min(wrong, default=1.0),
        }
        for limit in SWEEP
    ]


def print_report(report: dict[str, Any]) -> None:
    print(f"golden check, register.max_difference {report['max_difference']:.3f}")
    print(f"{'pair':22s} {'pairs':>6s} {'registered':>11s} {'accepted':>9s}")
    for kind, row in report["table"].items():
        print(f"{kind:22s} {row['pairs']:>6d} {row['registered']:>11d} {row['accepted']:>9d}")
    refused = [x for x in report["rows"]["true"] if not x["registered"]]
    for x in refused:
        print(f"  true pair refused by registration: {x['board']}: {x['reason']}")
    print(f"{'max_difference':>14s} {'true refused':>13s} {'wrong accepted':>15s}")
    for point in report["roc"]:
        print(f"{point['max_difference']:>14.3f} {point['true_refused']:>13.4f} {point['wrong_accepted']:>15.4f}")
    if report["roc"]:
        print(f"largest true difference {report['roc'][0]['true_max']:.4f}, smallest wrong {report['roc'][0]['wrong_min']:.4f}")


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
