"""``teach``: bring a new board design in from its golden images (and, with ``good``, its good boards), calibration first.

No annotated defect is needed. Within ``minutes`` (the whole command, set writing included), ``teach``:

1. reads each golden image once and refuses, before any work, one it cannot read or too small to teach
   (``jobs/teach_sets.py``); a large one is taught on crops;
2. writes defect-free line captures of each design and captures with defects painted on it
   (``jobs/teach_sets.py``), and inspects both with the starting weights;
3. **calibrates** each design's operating point on them (``jobs/teach_point.py``: at most 0.1 false calls per
   defect-free board, the weights' own point unless painted recall needs lower);
4. **fine-tunes** only when time is left and a design's point still misses painted defects, with a rehearsal of
   real defects (and, with ``good``, the good boards among its training boards: negatives where nothing is painted),
   and keeps the result only when it paid (``jobs/teach_tune.py``);
5. with ``good`` (:func:`teach` ``good``: :data:`MIN_GOOD <defect_detector.inspect.tolerance.MIN_GOOD>` or more good
   boards of one design as the line captures them), first (their number is fixed, so the sets of step 2 fit into the
   time they leave, under load too; again after a fine-tune that is kept) inspects them as ``predict`` does at
   :data:`GOOD_FLOOR <defect_detector.inspect.tolerance.GOOD_FLOOR>` with the weights kept and learns the design's
   **tolerance map** (``inspect/tolerance.py``): where good boards draw calls, in golden-image pixels, and the score a
   call there must beat; it counts the false calls per good board left at the design's point with the tolerance
   learnt on the other good boards (leave-one-out), and raises the design's point until those held-out good boards
   draw at most 0.1 false calls per board (cross-validated: one board's noise does not set it). Without a golden
   image, ``golden build``'s median of the good boards (``align/golden_build.py``) is the golden image, written as
   ``<out stem>_golden.png`` for ``predict``; a golden image given is first checked against them (``golden verify``),
   and one that may carry a defect stops ``teach`` with its place, before any work;
6. writes ``out``: the weights kept, each design taught listed with its own point (``taught``: name, pixel key,
   ``conf``, its inspection area (``align/inspection_area.py``: ``--area``'s mask, else the board's own area where a
   plain background lies round it), and its tolerance map, its own limits (the capture range its good boards showed,
   ``jobs/teach_limits.py``) and its own drift level (what the drift monitor reads on its good boards,
   ``monitor/design_drift.py``; with the weights kept) when taught from good boards; ``predict`` applies them to that design's frames only),
   after every design the starting weights were taught before (a design taught again replaces its entry), the design
   domain extended by its look, and a drift baseline (the starting weights' own when they are kept; else calibrated
   on the defect-free captures).

A binarized line's design whose look lies within the starting weights' design domain, where they were validated on
real defects, and whose defect-free captures draw at most 0.1 false calls per board at their own point, is taught at
that point with nothing changed (:func:`known_designs`: a DeepPCB golden image with ``deeppcb_ref.pt``; painted defects measure the
painter on such a look, so their recall is shown, not a gate). Any other design whose calibrated point catches fewer
than :data:`MIN_CAUGHT` of its painted defects is not taught (its frames keep their design warning); when no design is
taught nothing is written and :class:`TeachError` says why.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from defect_detector.align.inspection_area import InspectionArea
from defect_detector.core.io import atomic_torch_save
from defect_detector.core.limits import Limits
from defect_detector.data.images import load_image_gray
from defect_detector.data.photo_sets import golden_files
from defect_detector.engine.budget import MIN_BASELINE_FRAMES, Budget
from defect_detector.engine.domain import extend_domain
from defect_detector.engine.trainer import fit
from defect_detector.inspect.run_guard import OutputLock
from defect_detector.inspect.tolerance import Tolerance
from defect_detector.jobs.calibrate import run_calibrate
from defect_detector.jobs.teach_good import GoodBoards, built_golden, learn_good, read_good, verify_golden
from defect_detector.jobs.teach_limits import CaptureRange, capture_limits
from defect_detector.jobs.teach_point import MAX_FALSE_CALLS, DesignPoint, design_point, scores_by_design
from defect_detector.jobs.teach_sets import (
    TeachDesign,
    clean_pairs,
    painted_pairs,
    read_designs,
    rehearsal_pairs,
    set_size,
    spread,
    training_pairs,
    write_set,
)
from defect_detector.jobs.teach_tune import TuneScores, keep_tuned, tune_config, wants_tuning
from defect_detector.jobs.validate import TrainingValidation, validate
from defect_detector.model.checkpoint import PHOTO_REFERENCE_WEIGHTS, attach_baseline, load_checkpoint, strip_checkpoint
from defect_detector.monitor.design_drift import DesignDrift
from defect_detector.monitor.domain import DomainModel

log = logging.getLogger("defect_detector.inspect")

MIN_MINUTES = 1.5
MAX_MINUTES = 7 * 24 * 60.0
"""``--minutes`` above a week is refused: no teach needs it, and a deadline of ``1e308`` minutes overflowed."""
CLEAN_TOTAL = 48
"""Defect-free captures over all designs (6 to 24 per design): at 0.1 false calls per board, 48 boards allow 4."""
SETS_SHARE = 0.3
"""Share of ``minutes`` the clean and painted sets may take to write (a deadline cuts them evenly over designs)."""
TUNE_MIN_MINUTES = 2.0
"""Training time a fine-tune needs at least (after what scoring it afterwards will take)."""
MIN_CAUGHT = 0.5
"""A design is taught only when its calibrated point catches at least this share of its painted defects."""
GOOD_SHARE = 0.35
"""Share of ``--minutes`` after which the good boards' pass paints no more of them (its recall figure; the boards
themselves are all read, whatever the time)."""
MEASURE_SHARE = 0.45
"""Share of the time left after the good boards' pass that the captures ``teach`` writes may take to inspect (the
rest: writing them, the weights and their baseline). A loaded machine inspects slower, so it writes fewer."""
LEAST_CLEAN = 2
"""Fewest defect-free captures per design, however little time is left (with good boards, which set the design's
point held out, the captures only start it)."""
LEAST_HELD = 1
"""Fewest painted captures per design, however little time is left."""
GOOD_RESERVE = 1.5
"""A fine-tune leaves this many times the good boards' first pass for reading them again with the tuned weights."""


class TeachError(ValueError):
    """``teach`` could not teach any design (nothing is written); the message says what it measured."""


@dataclass(frozen=True)
class DesignOutcome:
    """One design: ``before`` at the starting weights' own point, ``after`` at its calibrated point with the weights
    kept; ``taught`` when ``after`` catches at least :data:`MIN_CAUGHT` of the painted defects, or when ``known``:
    a binarized line's design whose look lies within the starting weights' design domain (where they were validated on real defects) and its
    defect-free captures draw at most 0.1 false calls per board at their own point, with the weights unchanged
    (nothing needed changing; its painted recall is shown, not a gate)."""

    name: str
    key: str
    before: DesignPoint
    after: DesignPoint
    taught: bool
    known: bool = False


@dataclass(frozen=True)
class TeachReport:
    """What ``teach`` did: per design its :class:`DesignOutcome`; ``tuning`` (the fine-tune line: kept, not kept and
    why, or not run and why); ``rehearsal`` (mAP@0.5 before and after on the rehearsal boards, None when not scored:
    the weights are unchanged); ``baseline`` (its line); ``boards`` (``clean`` / ``held``: the defect-free and painted
    captures written, ``clean_refused`` / ``held_refused``: how many of them the prepare stage refused, not inspected,
    so left out of every figure);
    ``minutes`` spent; ``weights`` written; ``work`` (the boards and the run); ``good``: what the good boards taught
    (:class:`GoodBoards`; None without ``good``); ``areas``: the inspection area stored per design key (``(share of
    its golden image, "mask" or "board")``; a design without one is inspected over its whole golden image)."""

    designs: list[DesignOutcome]
    tuning: str
    rehearsal: tuple[float, float] | None
    baseline: str
    boards: dict[str, int]
    minutes: float
    weights: Path
    work: Path
    good: GoodBoards | None = None
    areas: dict[str, tuple[float, str]] = field(default_factory=dict)


def _measure(
    weights: Path, sets: dict[str, Path], designs: list[TeachDesign]
) -> tuple[list[DesignPoint], list[DesignPoint], dict[str, int]]:
    """``weights`` on the ``clean`` and ``held`` sets: each design at the weights' own point, and at its calibrated
    point (``jobs/teach_point.py``), over the captures inspected; and how many of each set were refused
    (``{"clean_refused": n, "held_refused": m}``: not inspected, so in no figure)."""
    clean, held = validate(weights, sets["clean"], progress=False), validate(weights, sets["held"], progress=False)
    refused = {"clean_refused": len(clean.not_inspected), "held_refused": len(held.not_inspected)}
    own = clean.runtime.operating_point["conf"]
    inverse = {v: k for k, v in held.dataset.label_to_cat_id.items()}
    scores = scores_by_design((clean.dataset.coco, clean.predictions), (held.dataset.coco, held.predictions), inverse, len(designs))
    at_own = [DesignPoint(own, s.caught(own), s.false_calls(own, d.area_factor), s, d.area_factor) for s, d in zip(scores, designs)]
    return at_own, [design_point(s, own, d.area_factor) for s, d in zip(scores, designs)], refused


def _rehearsal_map(weights: Path, data: Path) -> float:
    return float(validate(weights, data, progress=False).metrics["map50"])


def _tune_sets(
    designs: list[TeachDesign], sets: dict[str, Path], work: Path, seed: int, good: Sequence[tuple[str, np.ndarray]] = ()
) -> tuple[dict[str, Path], int]:
    """The fine-tune's ``train`` (clean captures, the ``good`` boards of a single design as the line captured them,
    and the rehearsal boards), ``select`` and ``rehearsal`` sets; and the number of training pairs. Training paints
    defects on the clean captures and the good boards alike, so the good boards are negatives where nothing is painted
    (a good board of another size than its golden image, or a design taught on crops, is left out)."""
    rng, n, captures = np.random.default_rng([seed, 1]), len(designs), np.random.default_rng([seed, 2])
    train = list(training_pairs(designs, spread(128, n, 8, 64) * n, rng)) + list(rehearsal_pairs(work, "train", seed))
    if n == 1 and len(designs[0].views) == 1:
        none = (np.zeros((0, 4), np.float32), np.zeros(0, np.int64))
        golden = designs[0].image
        train += [(f"d00_good{i:03d}", board, golden, *none) for i, (_, board) in enumerate(good) if board.shape == golden.shape]
    select = painted_pairs(designs, spread(24, n, 2, 4), captures, "select")
    never = math.inf
    return sets | {
        "train": write_set(work / "train", train, never, len(train), "teach train: clean captures and rehearsal boards"),
        "select": write_set(work / "select", select, never, 0, "teach select: painted captures"),
        "rehearsal": write_set(work / "rehearsal", rehearsal_pairs(work, "score", seed + 1), never, 0, "teach rehearsal: real defects"),
    }, len(train)


def _tune(  # noqa: PLR0913 - the fine-tune's inputs, each named
    weights: Path,
    start: dict[str, Any],
    designs: list[TeachDesign],
    sets: dict[str, Path],
    calibrated: list[DesignPoint],
    clock: tuple[float, float],
    seed: int,
    threads: int | None,
    good: Sequence[tuple[str, np.ndarray]] = (),
) -> tuple[Path | None, list[DesignPoint], str, tuple[float, float] | None]:
    """Fine-tune within the ``clock``'s deadline and judge it against the ``calibrated`` starting weights (``clock``:
    the deadline, and the seconds scoring the clean and held sets took; ``jobs/teach_tune.py``): ``(tuned weights
    when kept else None, the points of the weights kept, the line, rehearsal mAP before and after)``."""
    deadline, scoring = clock
    work = sets["clean"].parent.parent
    started = time.perf_counter()
    early = (deadline - started - 2 * scoring) / 60  # training time left if the sets and the rehearsal cost nothing
    if early < TUNE_MIN_MINUTES:
        return None, calibrated, f"fine-tune not run: {_short_of(early)}", None
    sets, pairs = _tune_sets(designs, sets, work, seed, good)
    scored = time.perf_counter()
    before_map = _rehearsal_map(weights, sets["rehearsal"])
    rehearsal = time.perf_counter() - scored
    reserve = 2.3 * scoring + 1.2 * rehearsal + 10  # scoring the tuned weights again, and a drift baseline if kept
    minutes = (deadline - time.perf_counter() - reserve) / 60
    if minutes < TUNE_MIN_MINUTES:
        return None, calibrated, f"fine-tune not run: {_short_of(minutes)}", None
    cfg = tune_config(weights, start, sets, work, minutes, pairs)
    run_dir = fit(cfg, threads=threads, budget=Budget.start(minutes, time.perf_counter(), 30, True), validator=TrainingValidation())
    tuned = work / "tuned.pt"
    atomic_torch_save(strip_checkpoint(torch.load(run_dir / "weights" / "best.pt", map_location="cpu", weights_only=True)), tuned)
    points = _measure(tuned, sets, designs)[1]
    after_map = _rehearsal_map(tuned, sets["rehearsal"])
    keep, line = keep_tuned(TuneScores(calibrated, before_map), TuneScores(points, after_map))
    log.info("teach: fine-tune took %.1f min in all", (time.perf_counter() - started) / 60)
    return (tuned if keep else None), (points if keep else calibrated), line, (before_map, after_map)


def _short_of(minutes: float) -> str:
    return f"{max(minutes, 0):.1f} min of training would be left (needs {TUNE_MIN_MINUTES:g}; give teach more --minutes)"


def _baseline(out: Path, start: dict[str, Any], tuned: bool, clean: Path) -> str:
    """The drift baseline ``out`` carries: the starting weights' own when they are kept, else one calibrated on the
    defect-free captures ``clean`` (when there are :data:`MIN_BASELINE_FRAMES` of them)."""
    if not tuned and start.get("baseline") is not None:
        return "drift baseline: the starting weights' own (the weights are unchanged; it reads frames against their golden image)"
    frames = set_size(clean)
    if frames < MIN_BASELINE_FRAMES:
        return f"drift baseline: not embedded: {frames} defect-free captures fitted in the time, fewer than {MIN_BASELINE_FRAMES}"
    baseline = run_calibrate(out, clean, None, out.with_name(out.stem + "_baseline.json"), progress=False, fault_frames=8)
    attach_baseline(out, baseline.to_dict())
    return f"drift baseline: calibrated on {baseline.count} defect-free captures"


def _write(  # noqa: PLR0913 - what the weights written hold, each named
    out: Path,
    source: dict[str, Any],
    start: dict[str, Any],
    outcomes: list[DesignOutcome],
    designs: list[TeachDesign],
    tolerances: dict[str, Tolerance],
    areas: dict[str, InspectionArea],
    limits: dict[str, dict[str, Any]] | None = None,
    drifts: dict[str, DesignDrift] | None = None,
) -> None:
    """Write ``source`` (inference form) to ``out`` with the taught designs (name, key, ``conf``, the tolerance map
    of a design in ``tolerances``, the inspection area of one in ``areas``, the limits one sets over the weights'
    in ``limits`` and its own drift level in ``drifts``, by key) after those the starting
    checkpoint ``start`` was taught before (a design taught again replaces its entry), and the domain extended by
    their looks."""
    ckpt = strip_checkpoint(source)
    entries = [
        {"name": o.name, "key": o.key, "conf": float(o.after.conf)}
        | (tolerances[o.key].to_entry() if o.key in tolerances else {})
        | (areas[o.key].to_entry() if o.key in areas else {})
        | ({"limits": (limits or {})[o.key]} if o.key in (limits or {}) else {})
        | ((drifts or {})[o.key].to_entry() if o.key in (drifts or {}) else {})
        for o in outcomes
        if o.taught
    ]
    known = {e["key"] for e in entries}
    ckpt["taught"] = [d for d in start.get("taught", []) if d["key"] not in known] + entries
    domain = extend_domain(start.get("domain"), [d.image for d, o in zip(designs, outcomes) if o.taught])
    if domain is not None:
        ckpt["domain"] = domain
    atomic_torch_save(ckpt, out)


def read_area(path: str | Path, golden: np.ndarray) -> InspectionArea:
    """The inspection area a user's mask image at ``path`` marks (non-zero: the board) over uint8 ``golden`` ``[H, W]``;
    ``ValueError`` in one line for a mask that cannot be read, of another size, or marking no board."""
    try:
        mask = load_image_gray(path)
    except ValueError as exc:
        raise ValueError(f"{path}: cannot read this area mask: {exc}") from exc
    if mask.shape != golden.shape:
        raise ValueError(
            f"{path}: the area mask is {mask.shape[1]}x{mask.shape[0]} px, its golden image {golden.shape[1]}x{golden.shape[0]}: "
            "draw it over the golden image, non-zero on the board"
        )
    return InspectionArea.from_mask(mask, str(path))


def _areas(designs: list[TeachDesign], given: InspectionArea | None) -> dict[str, InspectionArea]:
    """Each design's inspection area, by key: the one the user ``given`` (one design), else the board's own area in
    its golden image where a plain background lies round it (``align/inspection_area.py``; none: the whole image)."""
    if given is not None:
        return {designs[0].key: given}
    found = {d.key: InspectionArea.of_board(d.image) for d in designs}
    return {key: area for key, area in found.items() if area is not None}


def known_designs(start: dict[str, Any], designs: list[TeachDesign], at_own: list[DesignPoint]) -> list[bool]:
    """Per design, whether the starting checkpoint ``start`` already inspects it: a binarized line's design
    (``TeachDesign.binarized``) whose look lies within the weights' design domain (``monitor/domain.py``: the looks
    they were trained and validated on with real defects, DeepPCB's for ``deeppcb_ref.pt``) and whose defect-free
    captures drew at most :data:`MAX_FALSE_CALLS` per board at their own point (``at_own``). Painted defects measure
    the painter there, not the weights: their sizes follow the track width, which a binarized board's wide pours
    mislead (DeepPCB group 92000 is read 4x DeepPCB's scale). A photographed look keeps the painted-recall gate."""
    raw = start.get("domain")
    if raw is None:
        return [False] * len(designs)
    domain = DomainModel.from_dict(raw, where="the starting weights' domain")
    return [d.binarized and not domain.is_unlike(d.look) and p.false_calls <= MAX_FALSE_CALLS for d, p in zip(designs, at_own)]


def _sets(
    designs: list[TeachDesign], work: Path, held: int, captures: np.random.Generator, clock: tuple[float, float], each: float | None
) -> dict[str, Path]:
    """The ``clean`` and ``held`` sets under ``work``, written within :data:`SETS_SHARE` of the time left (``clock``:
    now and the deadline); with ``each`` (seconds one inspection took, the good boards' pass) no more captures than
    the time left can inspect (:func:`fitted`)."""
    now, deadline = clock
    n, cut = len(designs), now + SETS_SHARE * (deadline - now)
    per_clean, per_held = spread(CLEAN_TOTAL, n, 6, 24), held
    if each is not None:
        per_clean, per_held = fitted(per_clean, per_held, int(MEASURE_SHARE * (deadline - now) / max(each, 1e-3)) // n)
    clean = clean_pairs(designs, per_clean, captures)
    sets = {"clean": write_set(work / "clean", clean, cut, 2 * n, "teach clean: defect-free line captures")}
    sets["held"] = write_set(work / "held", painted_pairs(designs, per_held, captures, "held"), cut, n, "teach held: painted line captures")
    return sets


def fitted(clean: int, held: int, most: int) -> tuple[int, int]:
    """``(clean, held)`` captures per design cut in proportion to at most ``most`` in all, never below
    :data:`LEAST_CLEAN` and :data:`LEAST_HELD`; as they are when they fit."""
    if clean + held <= most:
        return clean, held
    share = max(most, 0) / (clean + held)
    return max(LEAST_CLEAN, math.floor(clean * share)), max(LEAST_HELD, math.floor(held * share))


def _good_pass(
    weights: Path, golden: Path, boards: list[tuple[str, np.ndarray]], threads: int | None, seed: int, painted_until: float = math.inf
) -> tuple[CaptureRange, GoodBoards]:
    """The good boards read by ``weights``: the range of capture they show and the design's own limits from it
    (``jobs/teach_limits.py``), then each inspected at those limits (``jobs/teach_good.py`` :func:`learn_good`; its
    point set later, :meth:`GoodBoards.at`). Fixed work, whatever ``--minutes``: ``teach`` does it first and fits the
    sets into the time left; only the painted copies of the boards (a recall figure) stop at ``painted_until``."""
    capture = capture_limits(load_image_gray(golden), boards, Limits.of_config(load_checkpoint(weights).config))
    own = capture.limits if capture.own else None
    return capture, learn_good(weights, golden, boards, 0.0, threads, seed, own, painted_until)


def _held_out(outcome: DesignOutcome, conf: float, out: Path) -> DesignOutcome:
    """``outcome`` at the point its held-out good boards set (``conf``, never below its own); :class:`TeachError`
    when its painted defects are no longer caught well enough there to teach it."""
    after = outcome.after.at(max(conf, outcome.after.conf))
    if after.caught < MIN_CAUGHT and not outcome.known:
        raise TeachError(
            f"no design taught: its good boards, held out in turn, need score >= {after.conf:.3f} for at most 0.1 false calls "
            f"per board, where the weights catch {after.caught:.0%} of the painted defects (needs {MIN_CAUGHT:.0%}); {out} not written"
        )
    return dataclasses.replace(outcome, after=after)


def check_minutes(minutes: float) -> None:
    """``ValueError`` in one line unless ``minutes`` is a finite number from :data:`MIN_MINUTES` to :data:`MAX_MINUTES`."""
    if not isinstance(minutes, (int, float)) or not math.isfinite(minutes) or not MIN_MINUTES <= minutes <= MAX_MINUTES:
        limits = f"from {MIN_MINUTES:g} (sets, scoring, calibration) to {MAX_MINUTES:g} (a week)"
        raise ValueError(f"--minutes must be a finite number {limits}, got {minutes}")


def teach(  # noqa: PLR0913 - the Python twin of the teach command's flags
    golden: str | Path | None,
    out: str | Path,
    weights: str | Path | None = None,
    minutes: float = 10.0,
    held: int = 8,
    seed: int = 0,
    threads: int | None = None,
    good: str | Path | None = None,
    area: str | Path | None = None,
    started: float | None = None,
) -> TeachReport:
    """Teach the design(s) of ``golden`` (a folder of golden images or one image) to ``weights`` (None: the bundled
    ``photo_ref.pt``) within ``minutes``, writing ``out`` (module docstring); ``held`` painted boards per design are
    scored. ``good``: a folder of good boards of one design (:data:`MIN_GOOD` or more) its tolerance map is learnt from;
    ``golden`` None builds the golden image from them. ``area``: a mask image of the (one) golden image's size, non-zero
    on the board: the design's inspection area (None: the board's own area, found in its golden image). Raises
    ``ValueError`` naming the problem before any work (no or unreadable golden image, one too small, too few good
    boards, good boards with several golden images, a golden image the good boards disagree with, a bad area mask, a
    single-image model, bad minutes, ``out`` taken by another teach), :class:`TeachError` when no design is taught.
    ``started``: the ``time.perf_counter()`` the ``minutes`` count from (the command's start, its imports included:
    ``cli/__init__.py`` ``STARTED``; None: now)."""
    started = time.perf_counter() if started is None else started
    check_minutes(minutes)
    deadline = started + 60 * minutes
    weights, out = Path(weights) if weights else PHOTO_REFERENCE_WEIGHTS, Path(out)
    if golden is None and good is None:
        raise ValueError("teach needs the design's golden image (--golden), its good boards (--good DIR), or both")
    boards = read_good(good) if good is not None else []
    goldens = golden_files(golden) if golden is not None else []
    if boards and len(goldens) > 1:
        raise ValueError(f"{golden}: --good teaches one design: give --golden its one golden image, not {len(goldens)}")
    designs = read_designs(goldens) if goldens else []
    if load_checkpoint(weights).config.model.in_channels != 2:  # also checks the weights load into their model
        raise ValueError(f"{weights}: teach needs a golden-template model (model.in_channels 2); this one inspects single images")
    if area is not None and len(goldens) > 1:
        raise ValueError(f"{area}: --area is one design's mask: give --golden its one golden image, not {len(goldens)}")
    if boards and goldens:
        verify_golden(goldens[0], designs[0].image, boards, weights)
    given = read_area(area, designs[0].image) if area is not None and designs else None
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = OutputLock(out.with_name(f".{out.name}.lock"), out, "it", command="teach")
    try:
        if threads:
            torch.set_num_threads(threads)
        built = None
        if not goldens:
            built = built_golden(boards, out, weights)
            goldens, designs = [built], read_designs([built])
            given = read_area(area, designs[0].image) if area is not None else None
        return _teach(designs, out, weights, held, seed, threads, (started, deadline), (boards, goldens[0], built), given)
    finally:
        lock.release()


def _teach(  # noqa: PLR0913 - teach()'s checked inputs
    designs: list[TeachDesign],
    out: Path,
    weights: Path,
    held: int,
    seed: int,
    threads: int | None,
    clock: tuple[float, float],
    good: tuple[list[tuple[str, np.ndarray]], Path, Path | None],
    area: InspectionArea | None = None,
) -> TeachReport:
    started, deadline = clock
    boards, golden, built = good
    work = out.with_name(out.stem + "_teach")
    shutil.rmtree(work, ignore_errors=True)
    passing = time.perf_counter()
    painted_until = passing + GOOD_SHARE * (deadline - passing)
    first = _good_pass(weights, golden, boards, threads, seed, painted_until) if boards else None  # before the sets
    now = time.perf_counter()
    good_seconds = now - passing
    each = good_seconds / (2 * len(boards)) if boards else None  # each good board inspected, then again painted
    sets = _sets(designs, work, held, np.random.default_rng(seed), (now, deadline), each)
    measuring = time.perf_counter()
    at_own, calibrated, refused = _measure(weights, sets, designs)
    scoring = time.perf_counter() - measuring
    log.info("teach: good boards %.0f s, sets %.0f s, scoring %.0f s", good_seconds, measuring - now, scoring)
    start = torch.load(weights, map_location="cpu", weights_only=True)
    known = known_designs(start, designs, at_own)
    tuning = "fine-tune not needed: every design's point catches 99% of its painted defects"
    tuned, points, rehearsal = None, [a if k else c for a, c, k in zip(at_own, calibrated, known)], None
    if all(known):
        tuning = (
            "fine-tune not needed, nothing needed changing: every design's look lies within the weights' training domain, "
            "where they were validated on real defects, and draws at most 0.1 false calls per defect-free capture at their own point"
        )
    elif wants_tuning([c for c, k in zip(calibrated, known) if not k]):
        reserve = GOOD_RESERVE * good_seconds  # the good boards, inspected again with the fine-tuned weights
        clock = (deadline - reserve, scoring)
        tuned, points, tuning, rehearsal = _tune(weights, start, designs, sets, calibrated, clock, seed, threads, boards)
    kept = [k and tuned is None for k in known]  # validated on their domain: true of the starting weights only
    outcomes = [DesignOutcome(d.name, d.key, b, a, a.caught >= MIN_CAUGHT or k, k) for d, b, a, k in zip(designs, at_own, points, kept)]
    boards_written = {"clean": set_size(sets["clean"]), "held": set_size(sets["held"]), **refused}
    if not any(o.taught for o in outcomes):
        raise TeachError(
            f"no design taught: at the calibrated points the weights catch {', '.join(f'{o.after.caught:.0%}' for o in outcomes)} of the "
            f"painted defects (needs {MIN_CAUGHT:.0%}; {boards_written['held']} painted boards, {boards_written['held_refused']} of them "
            f"refused, {tuning}); {out} not written"
        )
    learnt = None
    if boards:
        capture, found = first if tuned is None else _good_pass(tuned, golden, boards, threads, seed)
        level = found.drift if tuned is None else None  # a fine-tune calibrates a drift baseline of its own
        learnt = dataclasses.replace(found.at(outcomes[0].after.conf), golden=built, capture=capture, drift=level)
        outcomes[0] = _held_out(outcomes[0], learnt.conf, out)
    source = torch.load(tuned, map_location="cpu", weights_only=True) if tuned else start
    tolerances, areas = {outcomes[0].key: learnt.tolerance} if learnt is not None else {}, _areas(designs, area)
    own = {outcomes[0].key: learnt.capture.own} if learnt is not None and learnt.capture.own else {}
    drifts = {outcomes[0].key: learnt.drift} if learnt is not None and learnt.drift is not None else {}
    _write(out, source, start, outcomes, designs, tolerances, areas, own, drifts)
    baseline = _baseline(out, start, tuned is not None, sets["clean"])
    minutes = (time.perf_counter() - started) / 60
    stored = {key: (a.share, "mask" if area is not None else "board") for key, a in areas.items()}
    return TeachReport(outcomes, tuning, rehearsal, baseline, boards_written, minutes, out, work, learnt, stored)


__all__ = ["TeachError", "TeachReport", "check_minutes", "known_designs", "read_area", "teach"]
