"""The int8 export's own accuracy check: the int8 model against the float32 model on held-back images.

``export --int8`` holds back :data:`CHECK_FRAMES` images of ``--data`` that the calibration does not use (spread
over the rest of the json, ``export/calibration_data.py``), runs the float32 and the int8 ONNX models on them, and
checks two things:

- **Agreement** (refuses): both post-processed at the weights' operating point (``meta["operating_point"]``: score
  threshold, NMS IoU, cross-class demotion), their calls matched one to one (same class, IoU >= :data:`MATCH_IOU`).
  The int8 model is written only when the F-score of that match is at least :data:`MIN_AGREEMENT`; else the export
  refuses with one line and writes nothing. Why 0.9: both bundled models' int8 exports agree with float32 at F 1.0
  on their held-back DeepPCB images, and the collapse this exists for (uint8 x int8 products saturating in ONNX
  Runtime's int16 kernels on CPUs without VNNI, ``export/int8.py``) kept at most 35 of the 60 calls, F at most 0.74.
- **Accuracy** (refuses unless accepted): both scored on the held-back images' ground truth (:class:`Accuracy`): mAP@0.5 and
  mAP@0.5:0.95 (pycocotools) and the defects found at the operating point. Agreement alone cannot see a loss that
  keeps every call: the single-image model's int8 export agreed at F 1.000 while it lost 0.035 mAP@0.5:0.95
  (0.6976 -> 0.6622) and missed 121 of the 892 held-out defects where float32 misses 109. A loss over
  :data:`MAX_MAP_LOSS` (either mAP) or :data:`MAX_FOUND_LOSS` (of the defects) refuses the model with one line and
  writes nothing, unless ``export --accept-loss`` (the deployer's call, after ``val`` on their own held-out set: 16
  images measure the loss only roughly): then it is logged as a WARNING, printed by ``export`` and kept in
  ``meta.json`` (``int8.check.accuracy``, ``within_tolerance``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from defect_detector.core.config import EvalConfig
from defect_detector.core.types import LetterboxMeta
from defect_detector.data.evaluate import coco_map, greedy_matches, truth_index
from defect_detector.export.calibration_data import HeldBack
from defect_detector.model.postprocess import postprocess

CHECK_FRAMES = 16
"""Calibration frames held back for the accuracy check (spread over ``--data``)."""
MIN_AGREEMENT = 0.9
"""The lowest F-score of int8 calls against float32 calls that the export accepts (see the module docstring)."""
MATCH_IOU = 0.5
"""IoU at which an int8 call matches a float32 call of the same class."""
MIN_CALLS = 5
"""Fewer float32 calls than this on the held-back frames make the check too weak to refuse on: the export says so."""
MAX_MAP_LOSS = 0.01
"""The most mAP@0.5 or mAP@0.5:0.95 (pycocotools, on the held-back images' ground truth) int8 may lose against
float32 before the export refuses it (see :class:`Accuracy`)."""
MAX_FOUND_LOSS = 0.01
"""The most of the held-back defects int8 may find fewer than float32 at the operating point (a share) before the
export refuses it."""
FOUND_IOU = 0.33
"""A defect is found by a call of any class with IoU above this (DeepPCB's protocol, as ``val`` counts missed defects)."""


@dataclass(frozen=True)
class Agreement:
    """int8 calls against float32 calls on ``frames`` held-back frames, at the operating point."""

    frames: int
    float_calls: int
    int8_calls: int
    matched: int

    @property
    def f1(self) -> float:
        """F-score of the match (1.0 when neither model calls anything)."""
        total = self.float_calls + self.int8_calls
        return 1.0 if total == 0 else 2 * self.matched / total

    @property
    def conclusive(self) -> bool:
        """Whether the float32 model made enough calls (:data:`MIN_CALLS`) for the check to refuse on."""
        return self.float_calls >= MIN_CALLS

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "f1": round(self.f1, 4), "min_agreement": MIN_AGREEMENT, "match_iou": MATCH_IOU}


@dataclass(frozen=True)
class Accuracy:
    """float32 and int8 scored on the ground truth of ``frames`` held-back images (``defects`` boxes): mAP@0.5 and
    mAP@0.5:0.95 (pycocotools, every call down to ``eval.conf``) and the defects each finds at the operating point (a
    call of any class, IoU above :data:`FOUND_IOU`). What the agreement F cannot see: int8 may keep every float32
    call (F 1.0) while its boxes sit looser (mAP@0.5:0.95 down) and its scores lower (defects lost under the point)."""

    frames: int
    defects: int
    float_map50: float
    int8_map50: float
    float_map50_95: float
    int8_map50_95: float
    float_found: int
    int8_found: int

    def losses(self) -> list[str]:
        """The losses over the tolerances (:data:`MAX_MAP_LOSS`, :data:`MAX_FOUND_LOSS`), in words; empty: within them."""
        out = []
        maps = (("mAP@0.5", self.float_map50, self.int8_map50), ("mAP@0.5:0.95", self.float_map50_95, self.int8_map50_95))
        for name, before, after in maps:
            if before - after > MAX_MAP_LOSS:
                out.append(f"{name} {before:.4f} -> {after:.4f} ({after - before:+.4f}, tolerance {MAX_MAP_LOSS})")
        if self.defects and (self.float_found - self.int8_found) / self.defects > MAX_FOUND_LOSS:
            out.append(
                f"defects found {self.float_found} -> {self.int8_found} of {self.defects} "
                f"({self.float_found - self.int8_found} more missed, tolerance {MAX_FOUND_LOSS:.0%} of the defects)"
            )
        return out

    def line(self) -> str:
        """float32 against int8 in one line."""
        return (
            f"on {self.frames} held-back images ({self.defects} defects), float32 -> int8: mAP@0.5 {self.float_map50:.4f} -> "
            f"{self.int8_map50:.4f}, mAP@0.5:0.95 {self.float_map50_95:.4f} -> {self.int8_map50_95:.4f}, defects found at the "
            f"operating point {self.float_found} -> {self.int8_found} "
            f"(missed {self.defects - self.float_found} -> {self.defects - self.int8_found})"
        )

    def to_dict(self) -> dict[str, Any]:
        losses = self.losses()
        tolerance = {"max_map_loss": MAX_MAP_LOSS, "max_found_loss": MAX_FOUND_LOSS, "found_iou": FOUND_IOU}
        rounded = {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}
        return {**rounded, **tolerance, "within_tolerance": not losses, "losses": losses}


def _calls(
    decoded: np.ndarray, point: dict[str, Any], metas: Sequence[LetterboxMeta | None] | None = None, conf: float | None = None
) -> list[dict[str, torch.Tensor]]:
    """Calls of ``decoded`` at ``point`` (score ``conf`` when given: the ranking mAP needs), in letterboxed pixels, or
    in each image's own with ``metas``."""
    return postprocess(
        torch.from_numpy(decoded),
        list(metas) if metas is not None else [None] * len(decoded),
        conf=float(point["conf"]) if conf is None else conf,
        iou=float(point["iou"]),
        cross_class_iou=point.get("cross_class_iou"),
        cross_class_factor=float(point.get("cross_class_factor") or 0.0),
        merge=None if point.get("merge_ios") is None else (float(point["merge_ios"]), float(point["conf"])),
    )


def _matched(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> int:
    """One-to-one matches of calls ``a`` with ``b`` (same class, IoU >= :data:`MATCH_IOU`), greedy by ``a``'s
    descending score, as ``val`` matches (``data/evaluate.py`` :func:`greedy_matches`)."""
    return len(greedy_matches(a, b, float(np.nextafter(MATCH_IOU, 0.0)), same_class=True))


def _predict(path: Path, frames: np.ndarray) -> np.ndarray:
    """Decoded predictions ``[N, A, 4 + C]`` (letterboxed pixels, probabilities) of the ONNX model at ``path``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # the same sums on every machine load
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(["pred"], {name: f[None].astype(np.float32) / 255.0})[0] for f in frames])


def call_agreement(float_path: Path, int8_path: Path, frames: np.ndarray, point: dict[str, Any] | None) -> Agreement:
    """Run both ONNX models on uint8 ``frames`` ``[N, C, S, S]`` and match their calls at ``point`` (the meta's
    operating point; None: score 0.25, NMS IoU 0.5)."""
    if not len(frames):
        return Agreement(frames=0, float_calls=0, int8_calls=0, matched=0)  # too few frames to hold any back
    return agreement_of(_predict(float_path, frames), _predict(int8_path, frames), point)


def agreement_of(float_pred: np.ndarray, int8_pred: np.ndarray, point: dict[str, Any] | None) -> Agreement:
    """:func:`call_agreement` of the two models' decoded predictions ``[N, A, 4 + C]``."""
    point = point or {"conf": 0.25, "iou": 0.5}
    float_calls, int8_calls = _calls(float_pred, point), _calls(int8_pred, point)
    return Agreement(
        frames=len(float_pred),
        float_calls=sum(len(c["scores"]) for c in float_calls),
        int8_calls=sum(len(c["scores"]) for c in int8_calls),
        matched=sum(_matched(a, b) for a, b in zip(float_calls, int8_calls)),
    )


def held_back_check(
    float_path: Path, int8_path: Path, held: HeldBack, class_names: Sequence[str], point: dict[str, Any] | None
) -> tuple[Agreement, Accuracy | None]:
    """Both models on the held-back images: their :class:`Agreement` at ``point`` and their :class:`Accuracy` on the
    images' ground truth (None without held-back images or without any ground-truth box)."""
    if not len(held.frames):
        return Agreement(frames=0, float_calls=0, int8_calls=0, matched=0), None
    float_pred, int8_pred = _predict(float_path, held.frames), _predict(int8_path, held.frames)
    agreement = agreement_of(float_pred, int8_pred, point)
    return agreement, (accuracy(float_pred, int8_pred, held, class_names, point) if held.defects else None)


def accuracy(
    float_pred: np.ndarray, int8_pred: np.ndarray, held: HeldBack, class_names: Sequence[str], point: dict[str, Any] | None
) -> Accuracy:
    """:class:`Accuracy` of the two models' decoded predictions ``[N, A, 4 + C]`` (letterboxed pixels, probabilities) of
    ``held``'s frames against its ground truth; a box whose category is not in ``class_names`` is left out."""
    point = point or {"conf": 0.25, "iou": 0.5}
    truth = []
    for boxes, names in zip(held.boxes, held.names):
        known = [n in class_names for n in names]
        labels = torch.tensor([class_names.index(n) for n in names if n in class_names], dtype=torch.int64)
        truth.append({"boxes": torch.from_numpy(boxes[known]), "labels": labels})
    scores = {}
    for kind, pred in (("float", float_pred), ("int8", int8_pred)):
        ranked = _calls(pred, point, held.metas, conf=EvalConfig().conf)
        at_point = _calls(pred, point, held.metas)
        found = sum(len(greedy_matches(c, t, FOUND_IOU, same_class=False)) for c, t in zip(at_point, truth))
        scores[kind] = (*_coco_map(ranked, truth, class_names), found)
    (f50, f5095, f_found), (i50, i5095, i_found) = scores["float"], scores["int8"]
    return Accuracy(len(held.frames), sum(len(t["boxes"]) for t in truth), f50, i50, f5095, i5095, f_found, i_found)


def _coco_map(
    calls: list[dict[str, torch.Tensor]], truth: list[dict[str, torch.Tensor]], class_names: Sequence[str]
) -> tuple[float, float]:
    """``(mAP@0.5, mAP@0.5:0.95)`` of ``calls`` against ``truth`` (one dict per image, xyxy boxes), as ``val`` scores
    (``data/evaluate.py``: pycocotools)."""
    index, label_to_cat_id = truth_index(truth, class_names)
    scored = coco_map(index, dict(enumerate(calls)), label_to_cat_id, class_names)
    return scored["map50"], scored["map50_95"]


def refusal(agreement: Agreement, out_path: Path) -> str | None:
    """The one-line reason to refuse the int8 model, or None when it may be written."""
    if not agreement.conclusive or agreement.f1 >= MIN_AGREEMENT:
        return None
    return (
        f"{out_path}: not written: the int8 model keeps {agreement.matched} of the float32 model's {agreement.float_calls} calls "
        f"and adds {agreement.int8_calls - agreement.matched} on {agreement.frames} held-back calibration frames "
        f"(agreement F {agreement.f1:.2f}, needs {MIN_AGREEMENT}); deploy the float32 ONNX or .pt2 export instead, "
        "or calibrate on frames that look like the line's (--data, --calib-images)"
    )
