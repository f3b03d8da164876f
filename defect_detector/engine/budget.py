"""``train.max_minutes`` over the whole run: the epochs, their validation and the drift baseline after them.

Times are ``time.perf_counter()`` seconds. Before each epoch the run checks that the epoch, a validation and the time
kept for the drift baseline still fit before the deadline, from the longest epoch and validation measured so far; the
epoch after which none fits is validated (even off ``train.val_every``) and is the last one. The baseline keeps the
time of its smallest useful size (:data:`MIN_BASELINE_FRAMES` frames, :data:`MIN_FAULT_FRAMES` of them under simulated
faults) when that is at most :data:`BASELINE_SHARE` of the cap, and takes more frames when more time is left."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

MIN_BASELINE_FRAMES = 30
"""A drift baseline from fewer frames is too rough to alert on: ``train`` does not embed it (monitor/baseline.py)."""

MIN_FAULT_FRAMES = 8
"""The fewest frames a capped run simulates the camera faults on (``calibrate`` uses up to ``FAULT_FRAMES``, 64)."""

FAULT_PASSES = 13
"""Model passes per fault frame in a calibration: the clean frame and 4 simulated faults at 3 strengths each
(monitor/faults.py ``CALIBRATION_STRENGTHS``)."""

BASELINE_SHARE = 0.25
"""The largest share of ``train.max_minutes`` kept for the drift baseline; a machine on which the smallest baseline
needs more gives the cap to training, and the run says how to add a baseline later."""


@torch.no_grad()
def pass_seconds(model: torch.nn.Module, channels: int, imgsz: int, device: torch.device, batch: int = 4) -> float:
    """Seconds per image of one inference pass of ``model`` on a ``[batch, channels, imgsz, imgsz]`` float32 batch (the
    second of two timed passes: the first allocates)."""
    was_training = model.training
    model.eval()
    x = torch.zeros(batch, channels, imgsz, imgsz, device=device)
    model(x)
    start = time.perf_counter()
    model(x)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    model.train(was_training)
    return (time.perf_counter() - start) / batch


@dataclass
class Budget:
    """The run's deadline (None: no ``train.max_minutes``), its length, and the costs measured so far: the longest
    epoch and validation, the seconds per model pass and per frame read (validation time per image less one pass)."""

    deadline: float | None
    seconds: float = math.inf
    baseline_frames: int = 0
    golden: bool = False
    epoch_seconds: float = 0.0
    val_seconds: float | None = None
    read_seconds: float = 0.0
    pass_seconds: float = 0.0

    @classmethod
    def start(cls, max_minutes: float | None, started: float | None, baseline_frames: int, golden: bool) -> Budget:
        """A budget of ``max_minutes`` from ``started`` (a ``perf_counter`` value; None: now), keeping time for a drift
        baseline of up to ``baseline_frames`` frames (0: none) of a golden-template model (``golden``) or not."""
        begin = time.perf_counter() if started is None else started
        if max_minutes is None:
            return cls(None, math.inf, baseline_frames, golden)
        return cls(begin + 60.0 * max_minutes, 60.0 * max_minutes, baseline_frames, golden)

    def left(self) -> float:
        """Seconds to the deadline (inf without one)."""
        return math.inf if self.deadline is None else self.deadline - time.perf_counter()

    def measured_validation(self, seconds: float, images: int) -> None:
        """Record a validation that took ``seconds`` over ``images`` images: the rest of its time per image after one
        model pass (``pass_seconds``) is what reading a baseline frame costs."""
        self.val_seconds = max(self.val_seconds or 0.0, seconds)
        self.read_seconds = max(0.0, seconds / max(1, images) - self.pass_seconds)

    def baseline_seconds(self, frames: int, fault_frames: int) -> float:
        """Estimated seconds to calibrate on ``frames`` frames, ``fault_frames`` of them also under the simulated faults:
        each read (and registered), its statistics pass (and its golden image's), ``FAULT_PASSES`` per fault frame."""
        passes = frames * (2 if self.golden else 1) + FAULT_PASSES * fault_frames
        return frames * self.read_seconds + passes * self.pass_seconds

    def reserve(self) -> float:
        """Seconds kept for the drift baseline: its smallest useful size, when that is at most :data:`BASELINE_SHARE`
        of the cap (else 0: the baseline gets only what training leaves)."""
        if self.baseline_frames < MIN_BASELINE_FRAMES:
            return 0.0
        smallest = self.baseline_seconds(MIN_BASELINE_FRAMES, MIN_FAULT_FRAMES)
        return smallest if smallest <= BASELINE_SHARE * self.seconds else 0.0

    def baseline_plan(self, frames: int, fault_frames: int = 64) -> tuple[int, int]:
        """``(frames, fault frames)`` of a baseline that fits in the time left: all ``frames`` (up to ``fault_frames``
        under faults) without a deadline or a measured pass; else the most frames that fit with up to ``fault_frames``
        under faults, down to :data:`MIN_BASELINE_FRAMES` with down to :data:`MIN_FAULT_FRAMES`; ``(0, 0)`` if none."""
        if self.deadline is None or self.pass_seconds <= 0:
            return frames, min(frames, fault_frames)
        left = self.left()
        for n in range(frames, MIN_BASELINE_FRAMES - 1, -1):
            if self.baseline_seconds(n, min(n, fault_frames)) <= left:
                return n, min(n, fault_frames)
        n = min(frames, MIN_BASELINE_FRAMES)
        for f in range(min(n, fault_frames), MIN_FAULT_FRAMES - 1, -1):
            if self.baseline_seconds(n, f) <= left:
                return n, f
        return 0, 0

    def next_epoch_fits(self, validating_now: bool, val_estimate: float) -> bool:
        """Whether, after this epoch's validation (``validating_now``), another epoch with its validation and the
        baseline's reserve fit before the deadline. ``val_estimate``: a validation's seconds before one was measured."""
        val = self.val_seconds if self.val_seconds is not None else val_estimate
        return self.left() - (val if validating_now else 0.0) >= self.epoch_seconds + val + self.reserve()

    def cut(self) -> str:
        """What did not fit, for the log line of a run stopped by ``train.max_minutes``."""
        val = self.val_seconds or 0.0
        return (
            f"another epoch (~{self.epoch_seconds:.0f} s) with its validation (~{val:.0f} s) and the drift baseline's "
            f"reserve (~{self.reserve():.0f} s) would pass the cap ({self.left():.0f} s left)"
        )
