"""Frames whose calls and verdicts must not change when the code is reshaped (issue 57: "measured behaviour unchanged").

:func:`records` inspects a fixed set of frames with the bundled weights through the public ``Inspector`` API: the
DeepPCB samples against their golden images, line captures of them (``core/capture.py`` ``CAPTURE``, fixed seeds), a
glare spot and a dark occluder over a capture, a board against another design's golden image, a blank frame, and the
single-image model on the samples and the synthetic frames. ``python tests/inspect/behaviour_cases.py OUT.json`` writes
what a commit makes of them; ``tests/inspect/data/behaviour_kept.json`` holds what the commit before the change made.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from defect_detector.core.capture import CAPTURE, draw_capture
from defect_detector.inspect.inspector import Inspector
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, DEFAULT_WEIGHTS

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def _read(path: Path) -> np.ndarray:
    return cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)


def _spot(image: np.ndarray, level: float, seed: int) -> np.ndarray:
    """``image`` with a soft ellipse of ``level`` (255: glare; dark: a hand's edge) of 70 x 45 px at a seeded place."""
    rng = np.random.default_rng(seed)
    h, w = image.shape
    weight = np.zeros((h, w), np.float32)
    centre = (int(rng.uniform(0.25, 0.75) * w), int(rng.uniform(0.25, 0.75) * h))
    cv2.ellipse(weight, centre, (70, 45), float(rng.uniform(0, 180)), 0, 360, 1.0, -1)
    weight = cv2.GaussianBlur(weight, (0, 0), 3.0)
    return np.clip(image * (1 - weight) + level * weight, 0, 255).astype(np.uint8)


def _reference_frames() -> list[tuple[str, np.ndarray, np.ndarray]]:
    """``(name, frame, golden image)``: each sample as scanned, then as a line captures it, then the local faults."""
    names = sorted(p.name for p in (SAMPLES / "deeppcb").glob("*_test.jpg"))
    pairs = [(n, _read(SAMPLES / "deeppcb" / n), _read(SAMPLES / "golden" / n)) for n in names]
    frames = [(f"scan/{n}", board, golden) for n, board, golden in pairs]
    for i, (n, board, golden) in enumerate(pairs):
        capture = draw_capture(board.shape, np.random.default_rng(1000 + i), CAPTURE)
        frames.append((f"line/{n}", capture.apply(board), golden))
    frames.append(("glare", _spot(frames[10][1], 255.0, 1), pairs[2][2]))
    frames.append(("hand", _spot(frames[11][1], 20.0, 2), pairs[3][2]))
    frames.append(("another design", pairs[0][1], pairs[5][2]))
    frames.append(("blank", np.zeros_like(pairs[0][1]), pairs[0][2]))
    return frames


def _kept(record: Any) -> dict[str, Any]:
    found = record.to_json()
    registration = found.get("registration") or {}
    return {
        "verdict": found["verdict"],
        "reason": found["reason"],
        "drift": found["drift"],
        "shift": registration.get("shift"),
        "calls": [{"class": c["category_name"], "bbox": c["bbox"], "score": c["score"]} for c in found["calls"]],
    }


def records() -> dict[str, dict[str, Any]]:
    """What the bundled weights make of every frame: ``{name: {verdict, reason, drift, shift, calls}}``."""
    out = {}
    with Inspector.load(DEFAULT_REFERENCE_WEIGHTS, reference=SAMPLES / "golden", device="cpu", threads=1) as inspector:
        for name, frame, golden in _reference_frames():
            out[f"reference/{name}"] = _kept(inspector.inspect(frame, name, reference=golden))
    single = [*sorted((SAMPLES / "deeppcb").glob("*_test.jpg")), *sorted((SAMPLES / "frames").glob("*.png"))]
    with Inspector.load(DEFAULT_WEIGHTS, device="cpu", threads=1) as inspector:
        for path in single:
            out[f"single/{path.name}"] = _kept(inspector.inspect(_read(path), path.name))
    return out


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(records(), indent=1) + "\n", encoding="utf-8")
