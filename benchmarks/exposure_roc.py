"""ROC of the exposure check (``screens/exposure.py``) on DeepPCB boards under simulated light, contrast, occluders and noise.

For each board ``<group>/<n>/<id>_test.jpg`` of the given groups (and its golden image ``<id>_temp.jpg``, aligned as
DeepPCB ships them) every condition is simulated: light 20%-200% (multiply and clip), contrast 25%-75% (about grey
128), a 40% occluder (a flat grey or a textured patch, and flat patches at the copper and substrate levels), Gaussian
noise, defocus (a Gaussian blur) and a frame of pure noise; light and defocus are ``monitor/faults.py``'s. The check's
measures are read against the golden image (``golden``) and against the calibration levels alone (``levels``: dark 0,
bright 255, what the bundled baselines record). For each measure and threshold it prints the share of normal-light
boards refused and of each condition's boards refused, then the refusals of one chosen :class:`ExposureLimits`
(``--min-light`` ... flags)::

    python -m benchmarks.exposure_roc --root /data/deeppcb --groups 50600 92000
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import cv2
import numpy as np

from defect_detector.core.limits import ExposureLimits
from defect_detector.monitor.faults import defocus, lighting_drop
from defect_detector.screens.exposure import contrast_ratio, exposure_reason, histogram, tones

LIGHTS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.1, 1.2, 1.3, 1.5, 1.7, 2.0)
CONTRASTS = (0.25, 0.5, 0.75)
NOISE = (10, 25, 50)
DEFOCUS = (1.0, 2.0, 3.0)
OCCLUDERS = ("flat grey", "textured", "flat copper", "flat substrate")
CALIBRATION = {"dark": 0.0, "bright": 255.0}
SWEEPS = {
    "light": np.round(np.arange(0.3, 1.0, 0.05), 2),
    "contrast": np.round(np.arange(0.3, 1.0, 0.05), 2),
    "highlights": (0.99, 0.995, 0.998, 0.999, 0.9995, 0.9999),
    "midtones": (0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3),
}


def boards(root: Path, groups: Sequence[str], limit: int | None) -> list[tuple[Path, Path]]:
    """``(board, golden image)`` paths of ``groups`` (``group<g>/<g>/<id>_test.jpg``), at most ``limit`` per group."""
    out = []
    for group in groups:
        tests = sorted((root / f"group{group}" / group).glob("*_test.jpg"))[:limit]
        pairs = [(t, t.with_name(t.name.replace("_test", "_temp"))) for t in tests]
        out += [(t, g) for t, g in pairs if g.is_file()]
    if not out:
        raise SystemExit(f"{root}: no <group>/<n>/<id>_test.jpg boards with their _temp.jpg for groups {list(groups)}")
    return out


def _occluded(board: np.ndarray, kind: str, rng: np.random.Generator) -> np.ndarray:
    """``board`` with a patch over 40% of its area (a square-ish rectangle at a random place)."""
    h, w = board.shape
    ph, pw = int(round(h * 0.4**0.5)), int(round(w * 0.4**0.5))
    y, x = int(rng.integers(0, h - ph + 1)), int(rng.integers(0, w - pw + 1))
    if kind == "textured":
        patch = cv2.GaussianBlur(rng.uniform(0, 255, (ph, pw)).astype(np.float32), (0, 0), 3.0)
        patch = cv2.normalize(patch, None, 60, 220, cv2.NORM_MINMAX)
    else:
        patch = np.full((ph, pw), {"flat grey": 160, "flat copper": 0, "flat substrate": 255}[kind], np.float32)
    out = board.astype(np.float32)
    out[y : y + ph, x : x + pw] = patch
    return np.clip(out, 0, 255).astype(np.uint8)


def conditions(board: np.ndarray, rng: np.random.Generator) -> Iterator[tuple[str, np.ndarray]]:
    """``(name, frame)`` of every simulated condition of the uint8 ``board``, ``normal`` first."""
    f = board.astype(np.float32)
    yield "normal", board
    for k in LIGHTS:
        yield f"light {k:.0%}", lighting_drop(board, k)
    for c in CONTRASTS:
        yield f"contrast {c:.0%}", np.clip(128 + (f - 128) * c, 0, 255).round().astype(np.uint8)
    for kind in OCCLUDERS:
        yield f"occluder 40% {kind}", _occluded(board, kind, rng)
    for sigma in NOISE:
        yield f"noise sigma {sigma}", np.clip(f + rng.normal(0, sigma, f.shape), 0, 255).round().astype(np.uint8)
    for sigma in DEFOCUS:
        yield f"defocus sigma {sigma:g}", defocus(board, sigma)
    yield "pure noise", rng.integers(0, 256, board.shape, dtype=np.uint8)


def measures(root: Path, groups: Sequence[str], limit: int | None = None, seed: int = 0) -> dict[str, list[dict[str, float]]]:
    """Per condition, per board: the frame's tones and those of its golden image (``gold_*`` keys)."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[dict[str, float]]] = {}
    for test, temp in boards(root, groups, limit):
        board, golden = cv2.imread(str(test), cv2.IMREAD_GRAYSCALE), cv2.imread(str(temp), cv2.IMREAD_GRAYSCALE)
        gold = tones(histogram(golden))
        for name, frame in conditions(board, rng):
            out.setdefault(name, []).append({**tones(histogram(frame)), **{f"gold_{k}": v for k, v in gold.items()}})
    return out


def _value(row: dict[str, float], measure: str, golden: bool) -> float:
    """One measure of a frame: ``light`` and ``contrast`` against the golden image or the calibration levels, ``midtones``
    beyond the golden image's (or absolute), ``highlights`` as is."""
    ref = {k[5:]: v for k, v in row.items() if k.startswith("gold_")} if golden else {**CALIBRATION, "midtones": 0.0}
    if measure == "light":
        return row["bright"] / max(ref["bright"], 1.0)
    if measure == "contrast":
        return contrast_ratio(row, ref)
    if measure == "midtones":
        return row["midtones"] - ref["midtones"]
    return row[measure]


def sweep(data: dict[str, list[dict[str, float]]], golden: bool) -> dict[str, dict[str, dict[str, float]]]:
    """Per measure and threshold: the share of each condition's boards refused (``light``/``contrast`` below it,
    ``highlights``/``midtones`` above it)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for measure, thresholds in SWEEPS.items():
        low = measure in ("light", "contrast")
        for t in thresholds:
            refused = {}
            for name, rows in data.items():
                values = np.array([_value(r, measure, golden) for r in rows])
                refused[name] = float(np.mean(values < t if low else values > t))
            out.setdefault(measure, {})[f"{t:g}"] = refused
    return out


def chosen(data: dict[str, list[dict[str, float]]], limits: ExposureLimits, golden: bool) -> dict[str, float]:
    """Per condition: the share of boards :func:`exposure_reason` refuses with ``limits``."""
    out = {}
    for name, rows in data.items():
        refused = 0
        for row in rows:
            ref = {k[5:]: v for k, v in row.items() if k.startswith("gold_")} if golden else dict(CALIBRATION)
            frame = {k: v for k, v in row.items() if not k.startswith("gold_")}
            refused += exposure_reason(frame, ref, limits, "reference") is not None
        out[name] = refused / len(rows)
    return out


def _print_table(title: str, table: dict[str, float]) -> None:
    print(title)
    for name, share in table.items():
        print(f"  {name:28s} refused {share:6.1%}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True, help="DeepPCB root (group<g>/<g>/<id>_test.jpg and _temp.jpg)")
    p.add_argument("--groups", nargs="+", default=["50600", "92000"], help="groups to read (default: the held-out 50600 92000)")
    p.add_argument("--limit", type=int, help="boards per group (default: all)")
    defaults = ExposureLimits()
    p.add_argument("--min-light", type=float, default=defaults.min_light)
    p.add_argument("--min-contrast", type=float, default=defaults.min_contrast)
    p.add_argument("--max-clipped", type=float, default=defaults.max_clipped)
    p.add_argument("--max-highlights", type=float, default=defaults.max_highlights)
    p.add_argument("--max-midtones", type=float, default=defaults.max_midtones)
    p.add_argument("--out", help="also write the sweeps and the chosen range's refusals here (JSON)")
    args = p.parse_args(argv)
    data = measures(Path(args.root), args.groups, args.limit)
    limits = ExposureLimits(
        min_light=args.min_light, min_contrast=args.min_contrast, max_clipped=args.max_clipped,
        max_highlights=args.max_highlights, max_midtones=args.max_midtones,
    )  # fmt: skip
    report: dict[str, object] = {"boards": len(data["normal"]), "range": limits.model_dump()}
    for golden in (True, False):
        mode = "golden" if golden else "levels"
        sweeps = sweep(data, golden)
        for measure, rows in sweeps.items():
            print(f"[{mode}] {measure}: threshold -> normal refused, then each condition's refused")
            for t, refused in rows.items():
                bad = ", ".join(f"{n} {s:.0%}" for n, s in refused.items() if n != "normal" and s > 0)
                print(f"  {t:>7s}  normal {refused['normal']:.1%}  | {bad}")
        table = chosen(data, limits, golden)
        _print_table(f"[{mode}] chosen range {limits}: {len(data['normal'])} boards", table)
        report[mode] = {"sweeps": sweeps, "chosen": table}
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
