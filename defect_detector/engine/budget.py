"""``train.max_minutes`` over the whole run: the epochs, their validation and the drift baseline after them.

Times are ``time.perf_counter()`` seconds. Before each epoch the run checks that the epoch, a validation and the time
kept for the drift baseline still fit before the deadline, from the longest epoch and validation measured so far; the
epoch after which none fits is validated (even off ``train.val_every``) and is the last one."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

MIN_BASELINE_FRAMES = 30
"""A drift baseline from fewer frames is too rough to alert on: ``train`` does not embed it (monitor/baseline.py)."""

FAULT_PASSES = 13
"""Model passes per fault frame in a calibration: the clean frame and 4 simulated faults at 3 strengths each
(monitor/faults.py ``CALIBRATION_STRENGTHS``)."""


def baseline_seconds(frames: int, read_seconds: float, pass_seconds: float, golden: bool) -> float:
    """Estimated time to calibrate a drift baseline on ``frames`` frames: reading (and registering) each at
    ``read_seconds``, then at ``pass_seconds`` per model pass the statistics pass (and the golden images' for a
    golden-template model) and ``FAULT_PASSES`` passes on each of up to ``FAULT_FRAMES`` (64) of them."""
    return frames * read_seconds + pass_seconds * (frames * (2 if golden else 1) + FAULT_PASSES * min(frames, 64))


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
    """The run's deadline (None: no ``train.max_minutes``) and the longest epoch and validation seen so far."""

    deadline: float | None
    baseline_frames: int = 0
    golden: bool = False
    epoch_seconds: float = 0.0
    val_seconds: float | None = None
    read_seconds: float = 0.0
    pass_seconds: float = 0.0

    @classmethod
    def start(cls, max_minutes: float | None, started: float | None, baseline_frames: int, golden: bool) -> Budget:
        """A budget of ``max_minutes`` from ``started`` (a ``perf_counter`` value; None: now)."""
        begin = time.perf_counter() if started is None else started
        return cls(None if max_minutes is None else begin + 60.0 * max_minutes, baseline_frames, golden)

    def left(self) -> float:
        """Seconds to the deadline (inf without one)."""
        return math.inf if self.deadline is None else self.deadline - time.perf_counter()

    def measured_validation(self, seconds: float, images: int, one_pass: float) -> None:
        """Record a validation that took ``seconds`` over ``images`` images, at ``one_pass`` seconds per model pass
        (:func:`pass_seconds`): the rest of its time per image is what reading a baseline frame costs."""
        self.val_seconds = max(self.val_seconds or 0.0, seconds)
        self.pass_seconds = one_pass
        self.read_seconds = max(0.0, seconds / max(1, images) - one_pass)

    def baseline_seconds(self, frames: int) -> float:
        """:func:`baseline_seconds` at the costs measured so far (0 before a validation)."""
        return baseline_seconds(frames, self.read_seconds, self.pass_seconds, self.golden)

    def baseline_frames_left(self, frames: int) -> int:
        """How many of ``frames`` baseline frames fit in the time left (all without a deadline or a measurement)."""
        if self.deadline is None or self.pass_seconds <= 0:
            return frames
        left = self.left()
        return max((n for n in range(frames + 1) if self.baseline_seconds(n) <= left), default=0)

    def reserve(self) -> float:
        """Seconds kept for the drift baseline: :data:`MIN_BASELINE_FRAMES` frames (it may use more if time is left)."""
        return self.baseline_seconds(min(self.baseline_frames, MIN_BASELINE_FRAMES))

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
