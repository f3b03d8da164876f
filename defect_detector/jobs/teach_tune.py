"""``teach``'s fine-tune, run only when it may pay, and kept only when it did.

It runs when time is left after calibration and a design's calibrated point still misses painted defects. It
fine-tunes the starting weights (:data:`RECIPE`: the shared trunk kept, the rest at 1/40 of the from-scratch learning
rate) on clean captures of the golden images that training paints defects on, mixed with :data:`REHEARSED
<defect_detector.jobs.teach_sets.REHEARSED>` boards of real DeepPCB defects rendered as photographs (a rehearsal:
a model that learns painted defects alone forgets the real ones). :func:`keep_tuned` then decides, in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from defect_detector.core.config import Config, config_from_dict, without_retired
from defect_detector.jobs.teach_point import DesignPoint

RECIPE: dict[str, dict[str, Any]] = {
    "augment": {
        "crop_size": 320, "crop_focus": 0.8, "hflip": 0.5, "vflip": 0.5, "transpose": 0.5, "rotate_deg": 3.0, "rotate_p": 0.2,
        "scale": 0.15, "translate": 0.0, "affine_p": 0.5, "brightness": 0.1, "contrast": 0.1, "photometric_p": 0.3,
        "blur_p": 0.05, "noise_p": 0.05, "glare_p": 0.0, "invert_negatives": 0.0, "ref_shift": 1.0, "ref_rotate": 0.2,
        "ref_p": 1.0, "render_p": 0.0, "paint_p": 0.8, "paint_max": 4, "paint_scale": None,
    },
    "train": {
        "freeze": ["backbone.stem", "backbone.stage1", "backbone.stage2", "backbone.stage3"], "epochs": 12, "batch_size": 16,
        "lr": 1e-4, "warmup_epochs": 1.0,
        "min_lr_ratio": 0.1, "ema_decay": 0.99, "val_every": 2,
    },
}  # fmt: skip
"""The fine-tune (on top of the starting weights' own config): the augmentation of ``configs/finetune_ref.yaml``
with defects painted on the fly, and its recipe."""

EPOCHS_PER_MINUTE = 2.0
"""Epochs of 256 pairs the schedule spans per minute of training time (at least 3; fewer for more pairs): on 2 CPU
cores such an epoch took 20-25 s, its validation every second epoch 10 s; ``train.max_minutes`` still caps it."""

TARGET_CAUGHT = 0.99
"""A fine-tune is tried while a design's calibrated point catches fewer painted defects than this."""
FALSE_CALL_NOISE = 0.05
"""False calls per defect-free board a kept fine-tune may add at its calibrated points (a few boards' worth)."""
REHEARSAL_NOISE = 0.01
"""mAP@0.5 the rehearsal boards may lose to a kept fine-tune."""


@dataclass(frozen=True)
class TuneScores:
    """One set of weights on ``teach``'s boards: each design's calibrated point, and the rehearsal boards' mAP@0.5."""

    points: list[DesignPoint]
    rehearsal_map: float


def tune_config(weights: Path, start: dict[str, Any], sets: dict[str, Path], work: Path, minutes: float, pairs: int) -> Config:
    """The fine-tune of ``weights`` (its checkpoint ``start``, as ``torch.load`` reads it) on ``sets`` (``train`` of
    ``pairs`` pairs, ``select``) within ``minutes``: the weights' own config with :data:`RECIPE` over it."""
    raw = without_retired(start["config"], str(weights))
    raw["augment"] = RECIPE["augment"]
    raw["train"] = {k: v for k, v in raw.get("train", {}).items() if k in ("amp", "device", "weight_decay")} | RECIPE["train"]
    epochs = max(3, round(minutes * EPOCHS_PER_MINUTE * 256 / pairs))
    raw["train"] |= {"init_weights": str(weights), "max_minutes": float(minutes), "epochs": epochs}
    raw["data"] = raw.get("data", {}) | {
        "train": str(sets["train"]), "val": str(sets["select"]), "train_images": None, "val_images": None,
        "register_train": True, "workers": 1, "max_images": None, "pixel_scale": None,
    }  # fmt: skip
    raw |= {"name": "run", "out_dir": str(work)}
    return config_from_dict(raw)


def wants_tuning(points: list[DesignPoint]) -> bool:
    """Whether a fine-tune may pay: some design's calibrated point misses painted defects (:data:`TARGET_CAUGHT`)."""
    return any(p.caught < TARGET_CAUGHT for p in points)


def keep_tuned(before: TuneScores, after: TuneScores) -> tuple[bool, str]:
    """Keep the fine-tuned weights (``after``) over the calibrated starting ones (``before``) only when, at each one's
    calibrated points, painted recall rose over the designs and neither the false calls on defect-free captures
    (within :data:`FALSE_CALL_NOISE` per board) nor the rehearsal mAP (within :data:`REHEARSAL_NOISE`) got worse.
    Returns ``(keep, the one line that says why)``."""
    caught = [sum(p.caught for p in s.points) / len(s.points) for s in (before, after)]
    false = [max(p.false_calls for p in s.points) for s in (before, after)]
    change = (
        f"painted recall {caught[0]:.1%} -> {caught[1]:.1%}, false calls per clean board {false[0]:.2f} -> {false[1]:.2f}, "
        f"rehearsal mAP@0.5 {before.rehearsal_map:.3f} -> {after.rehearsal_map:.3f}"
    )
    if caught[1] <= caught[0]:
        return False, f"fine-tune not kept: painted recall did not rise ({change})"
    if false[1] > false[0] + FALSE_CALL_NOISE:
        return False, f"fine-tune not kept: more false calls on defect-free captures ({change})"
    if after.rehearsal_map < before.rehearsal_map - REHEARSAL_NOISE:
        return False, f"fine-tune not kept: it forgot real defects ({change})"
    return True, f"fine-tune kept ({change})"
