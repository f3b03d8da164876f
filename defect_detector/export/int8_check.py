"""The int8 export's own accuracy check: the int8 model's calls against the float32 model's on held-back frames.

``export --int8`` holds back :data:`CHECK_FRAMES` images of ``--data`` that the calibration does not use (spread
over the rest of the json, ``export/calibration_data.py``), runs the float32 and the int8 ONNX models on them,
post-processes both at the weights' operating point (``meta["operating_point"]``: score threshold, NMS IoU,
cross-class demotion) and matches the calls one to one (same class, IoU >= :data:`MATCH_IOU`). The int8 model is
written only when the F-score of that match, int8 calls against float32 calls, is at least :data:`MIN_AGREEMENT`;
else the export refuses with one line and writes nothing.

Why the bound is 0.9: both bundled models' int8 exports agree with float32 at F 1.0 on their held-back DeepPCB
images (63 of 63 calls kept, none added; held-out mAP@0.5 -0.0013 and -0.0001), and the collapse this check exists for (uint8 x int8
products saturating in ONNX Runtime's int16 kernels on CPUs without VNNI, ``export/int8.py``) kept at most 35 of the
60 calls, F at most 0.74. A threshold between the two refuses the broken model and keeps the good one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchvision.ops import box_iou

from defect_detector.model.postprocess import postprocess

CHECK_FRAMES = 16
"""Calibration frames held back for the accuracy check (spread over ``--data``)."""
MIN_AGREEMENT = 0.9
"""The lowest F-score of int8 calls against float32 calls that the export accepts (see the module docstring)."""
MATCH_IOU = 0.5
"""IoU at which an int8 call matches a float32 call of the same class."""
MIN_CALLS = 5
"""Fewer float32 calls than this on the held-back frames make the check too weak to refuse on: the export says so."""


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


def _calls(decoded: np.ndarray, point: dict[str, Any]) -> list[dict[str, torch.Tensor]]:
    return postprocess(
        torch.from_numpy(decoded),
        [None] * len(decoded),
        conf=float(point["conf"]),
        iou=float(point["iou"]),
        cross_class_iou=point.get("cross_class_iou"),
        cross_class_factor=float(point.get("cross_class_factor") or 0.0),
        merge=None if point.get("merge_ios") is None else (float(point["merge_ios"]), float(point["conf"])),
    )


def _matched(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> int:
    """Greedy one-to-one matches of calls ``a`` and ``b`` (same class, IoU >= :data:`MATCH_IOU`), best IoU first."""
    if not len(a["boxes"]) or not len(b["boxes"]):
        return 0
    iou = box_iou(a["boxes"], b["boxes"]) * (a["labels"][:, None] == b["labels"][None, :])
    pairs = (iou >= MATCH_IOU).nonzero().tolist()
    pairs.sort(key=lambda ij: -float(iou[ij[0], ij[1]]))
    used_a, used_b = set(), set()
    for i, j in pairs:
        if i not in used_a and j not in used_b:
            used_a.add(i)
            used_b.add(j)
    return len(used_a)


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
    point = point or {"conf": 0.25, "iou": 0.5}
    float_calls = _calls(_predict(float_path, frames), point)
    int8_calls = _calls(_predict(int8_path, frames), point)
    return Agreement(
        frames=len(frames),
        float_calls=sum(len(c["scores"]) for c in float_calls),
        int8_calls=sum(len(c["scores"]) for c in int8_calls),
        matched=sum(_matched(a, b) for a, b in zip(float_calls, int8_calls)),
    )


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
