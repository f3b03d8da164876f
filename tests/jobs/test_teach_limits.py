"""jobs/teach_limits.py: the range of capture a design's good boards show, kept as the design's own limits."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from golden_pairs import textured

from defect_detector.align.photometric import fit_photometric, photometric_reason
from defect_detector.align.register import register
from defect_detector.core.limits import Limits, PhotometricLimits
from defect_detector.jobs.teach_limits import CAPS, MARGIN, capture_limits
from defect_detector.model.checkpoint import load_checkpoint

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def _speckled(golden: np.ndarray, count: int, seed: int) -> np.ndarray:
    """``golden`` with ``count`` 7x7 px squares flipped at random places: thin differences spread over the board, as
    solder and placement leave on a real good board against its golden board."""
    rng, board = np.random.default_rng(seed), golden.copy()
    for _ in range(count):
        x, y = (int(v) for v in rng.integers(0, 630, 2))
        board[y : y + 7, x : x + 7] = 255 - board[y + 3, x + 3]
    return board


def test_good_boards_beyond_the_golden_checks_slivers_raise_the_designs_limit_within_its_cap() -> None:
    """Good boards with slivers in 18-27% of the cells (the default allows 20%: two of them refused as another
    design) raise the design's ``register.max_slivers`` to 1.25x their largest reading; a board at 41%, beyond the
    cap, stays refused and is named; the other limits stay the weights'."""
    golden = cv2.imread(str(SAMPLES / "golden" / "92000000_test.jpg"), cv2.IMREAD_GRAYSCALE)
    boards = [(f"good{i}.png", _speckled(golden, count, i)) for i, count in enumerate((60, 70, 80, 90))]
    boards.append(("scratched.png", _speckled(golden, 160, 9)))
    weights = Limits()
    assert sum(not register(golden, b)[1].ok for _, b in boards[:4]) >= 1  # the weights' check refuses some good boards
    found = capture_limits(golden, boards, weights)
    largest = found.readings["register.max_slivers"]
    assert weights.register.max_slivers < largest <= CAPS["max_slivers"]
    assert found.own == {"register": {"max_slivers": round(MARGIN * largest, 4)}}
    assert found.raised() == {"register.max_slivers": (weights.register.max_slivers, round(MARGIN * largest, 4))}
    assert [name for name, _ in found.beyond] == ["scratched.png"]
    assert all(register(golden, b, found.limits.register)[1].ok for _, b in boards[:4])
    assert not register(golden, boards[4][1], found.limits.register)[1].ok


def test_good_boards_within_the_weights_limits_set_nothing() -> None:
    golden = cv2.imread(str(SAMPLES / "golden" / "92000000_test.jpg"), cv2.IMREAD_GRAYSCALE)
    found = capture_limits(golden, [(f"good{i}.png", _speckled(golden, 20, i)) for i in range(5)], Limits())
    assert found.own == {} and found.raised() == {} and found.limits == Limits() and found.photometric == pytest.approx(1.0)


def test_a_line_lit_brighter_than_the_weights_range_widens_the_designs_photometric_range() -> None:
    """A photographed design whose line runs at 1.65-1.75x the golden image's gain (beyond the weights' range: gain and
    gamma 1.25x, 20 levels): its photometric range is widened by the least factor that holds every good board."""
    golden = textured((480, 640), 4)
    boards = [(f"bright{i}.png", np.clip(golden.astype(np.float64) * g, 0, 255).astype(np.uint8)) for i, g in enumerate((1.65, 1.75))]
    weights = Limits()
    for _, board in boards:
        warped, reg = register(golden, board)
        assert photometric_reason(fit_photometric(warped, board, reg.covered(board.shape)), weights.photometric) != ""
    found = capture_limits(golden, boards, weights)
    assert 1.0 < found.photometric <= 2.0 and set(found.own) == {"photometric"}
    for _, board in boards:
        warped, reg = register(golden, board)
        assert photometric_reason(fit_photometric(warped, board, reg.covered(board.shape)), found.limits.photometric) == ""
    narrower = PhotometricLimits(**{k: v * (found.photometric - 0.05) for k, v in weights.photometric.model_dump().items()})
    fits = [fit_photometric(w, b, r.covered(b.shape)) for (w, r), (_, b) in zip((register(golden, b) for _, b in boards), boards)]
    assert any(photometric_reason(fit, narrower) for fit in fits)  # the least factor that holds them all


def test_the_good_boards_are_read_at_the_designs_own_limits(tmp_path: Path) -> None:
    """Six good boards whose slivers the weights' golden check refuses in most of them: without the design's own
    limits too few are inspected to learn from; at the limits their capture range asks for, every one is, as
    ``predict`` will inspect the design's frames from its taught entry."""
    from defect_detector.jobs.teach_good import learn_good
    from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS

    golden_path = SAMPLES / "golden" / "92000000_test.jpg"
    golden = cv2.imread(str(golden_path), cv2.IMREAD_GRAYSCALE)
    boards = [(f"good{i}.png", _speckled(golden, count, i)) for i, count in enumerate((80, 85, 90, 95, 100, 105))]
    assert sum(not register(golden, b)[1].ok for _, b in boards) >= 2
    with pytest.raises(ValueError, match=r"good boards inspected, 5 or more needed"):
        learn_good(DEFAULT_REFERENCE_WEIGHTS, golden_path, boards, 0.4, threads=1)
    found = capture_limits(golden, boards, Limits.of_config(load_checkpoint(DEFAULT_REFERENCE_WEIGHTS).config))
    learnt = learn_good(DEFAULT_REFERENCE_WEIGHTS, golden_path, boards, 0.4, threads=1, limits=found.limits)
    assert learnt.inspected == [name for name, _ in boards] and learnt.refused == []
