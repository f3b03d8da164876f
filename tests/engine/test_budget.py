"""train.max_minutes over the whole run: which epoch is the last, and what the drift baseline gets."""

from __future__ import annotations

import math
import time

import pytest

from defect_detector.engine.budget import MIN_BASELINE_FRAMES, MIN_FAULT_FRAMES, Budget


def _budget(left: float, cap: float = 600.0, **costs: float) -> Budget:
    return Budget(deadline=time.perf_counter() + left, seconds=cap, baseline_frames=300, **costs)


def test_no_cap_never_stops_and_calibrates_everything() -> None:
    budget = Budget.start(None, None, 300, golden=True)
    assert budget.deadline is None and budget.left() == math.inf
    assert budget.next_epoch_fits(True, 1e9)
    assert budget.baseline_plan(300) == (300, 64)


def test_an_epoch_starts_only_when_it_its_validation_and_the_reserve_fit() -> None:
    # 80 s left; an epoch 40 s, a validation 20 s; reserve: 30 frames read at 0.1 s + (30 + 13 * 8) passes at 0.05 s = 9.7 s
    budget = _budget(80.0, epoch_seconds=40.0, val_seconds=20.0, read_seconds=0.1, pass_seconds=0.05)
    assert budget.reserve() == pytest.approx(30 * 0.1 + (30 + 13 * MIN_FAULT_FRAMES) * 0.05)
    assert budget.next_epoch_fits(validating_now=False, val_estimate=0.0)  # 80 >= 40 + 20 + 9.7
    assert not budget.next_epoch_fits(validating_now=True, val_estimate=0.0)  # 80 - 20 < 69.7
    unmeasured = _budget(100.0, epoch_seconds=40.0)
    assert unmeasured.next_epoch_fits(False, 50.0) and not unmeasured.next_epoch_fits(False, 70.0)  # the estimate stands in
    assert "would pass the cap" in budget.cut()


def test_the_baseline_reserve_is_at_most_a_quarter_of_the_cap() -> None:
    slow = _budget(600.0, pass_seconds=1.5)  # (30 + 13 * 8) * 1.5 = 201 s > 150 s: training gets the time
    assert slow.reserve() == 0.0
    golden = Budget(time.perf_counter() + 600.0, 600.0, 300, golden=True, pass_seconds=0.5)
    assert golden.reserve() == pytest.approx((2 * 30 + 13 * 8) * 0.5)  # the golden image's pass too
    assert Budget(time.perf_counter() + 600.0, 600.0, 0, pass_seconds=0.5).reserve() == 0.0  # --no-baseline


def test_the_baseline_plan_shrinks_to_the_time_left() -> None:
    # per frame: read 0.1 s + one pass 0.01 s; per fault frame 13 passes = 0.13 s
    def plan(left: float, frames: int = 300) -> tuple[int, int]:
        return _budget(left, read_seconds=0.1, pass_seconds=0.01).baseline_plan(frames)

    assert plan(1000.0) == (300, 64)  # 300 * 0.11 + 64 * 0.13 = 41.3 s
    n, f = plan(20.0)
    assert MIN_BASELINE_FRAMES <= n < 300 and f == 64 and n * 0.11 + f * 0.13 <= 20.0 < (n + 1) * 0.11 + f * 0.13
    n, f = plan(4.5)  # 30 frames (3.3 s) leave room for 9 fault frames
    assert (n, f) == (MIN_BASELINE_FRAMES, 9)
    assert plan(3.0) == (0, 0)  # not even 30 frames with 8 under faults
    assert plan(1000.0, frames=12) == (12, 12)  # fewer frames than the minimum: the caller refuses them
