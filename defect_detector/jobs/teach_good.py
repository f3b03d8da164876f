"""What a design's good boards teach (``teach --good``, issue 56): its golden image, checked or built from them, its
tolerance map, its point held out, and painted defects on the boards themselves.

- :func:`read_good`: :data:`MIN_GOOD <defect_detector.inspect.tolerance.MIN_GOOD>` or more good boards as the line
  captures them; :func:`built_golden`: without a golden image, ``golden build``'s median of them;
  :func:`verify_golden`: a golden image given is checked against them first (``golden verify``).
- :func:`learn_good`: each good board is inspected as ``predict`` does (``Inspector``) at
  :data:`GOOD_FLOOR <defect_detector.inspect.tolerance.GOOD_FLOOR>`; its calls' centres in golden-image pixels make
  the tolerance map (``inspect/tolerance.py``), and the design's point is raised until boards held out from the map
  draw at most 0.1 false calls per board (``jobs/teach_point.py`` ``held_out_point``).
- The boards are read at the design's own limits when they ask for wider ones (``jobs/teach_limits.py``: the range
  of capture they show).
- The design's own drift level (``monitor/design_drift.py``): the mean of what the drift detector scores over the
  inspected boards, so a design that does not cancel out against the weights' baseline raises no alert on its own
  good boards.
- Painted defects on the real boards (:data:`PAINTED_PER_BOARD` each, ``looks/paint.py``), inspected the same way:
  the recall figure at the design's point, each board's defects read against the map learnt on the other boards
  (a defect at a tolerated place must beat it, as on the line).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import torch
from torchvision.ops import box_iou

from defect_detector.align.golden_build import build_golden, golden_disagreements, places_words
from defect_detector.core.io import atomic_write_bytes
from defect_detector.core.limits import Limits
from defect_detector.data.images import load_image_gray
from defect_detector.data.photo_sets import golden_files
from defect_detector.inspect.drift_inputs import golden_of
from defect_detector.inspect.inspector import Inspector
from defect_detector.inspect.record import Inspection
from defect_detector.inspect.tolerance import (
    GOOD_FLOOR,
    MIN_GOOD,
    TOLERANCE_MARGIN,
    TOLERANCE_RADIUS,
    Tolerance,
    held_out,
    in_golden,
    learn_places,
    left_out_scores,
    tolerated,
)
from defect_detector.jobs.teach_limits import CaptureRange
from defect_detector.jobs.teach_point import held_out_point
from defect_detector.looks.paint import paint_defects
from defect_detector.model.checkpoint import load_checkpoint, weights_digest
from defect_detector.monitor.baseline import Baseline
from defect_detector.monitor.design_drift import DesignDrift

PAINTED_PER_BOARD = 3
"""Defects painted on each good board for the recall figure (fewer where the design has no room)."""
LEAST_PAINTED = 4
"""Good boards painted for the recall figure however little time is left."""
MATCH_IOU = 0.33
"""A call catches a painted defect when their boxes overlap by this IoU (``data/evaluate.py``'s matching)."""


@dataclass(frozen=True)
class GoodBoards:
    """What the good boards taught (``teach --good``): ``inspected`` (their names), ``refused`` (``(name, why)``: not
    inspected, so left out), ``tolerance`` (the map learnt on all of them), ``captures`` (the design's point from the
    line captures), ``conf`` (the design's point: ``captures`` raised until held-out good boards draw at most 0.1 false
    calls per board, ``jobs/teach_point.py`` :func:`held_out_point`), ``scores`` per inspected board: float64 the
    scores of its calls (from :data:`GOOD_FLOOR`), ``left_out`` per inspected board: those the tolerance learnt on the
    other good boards keeps (leave-one-out); ``golden``: the golden image built from them (None: one was given);
    ``centres`` per inspected board: float64 ``[K, 2]`` its calls' centres in golden-image pixels; ``painted`` per
    inspected board, per defect painted on it: float64 ``[K, 3]`` the calls that caught it (``score,
    x, y``: box centre in golden-image pixels), empty when none did. ``capture``: the range of capture they showed and
    the design's limits from it, which its frames were read at (``jobs/teach_limits.py``; None: not read). ``drift``:
    the design's own drift level read over the inspected boards (``monitor/design_drift.py``; None: the weights carry
    no drift baseline)."""

    inspected: list[str]
    refused: list[tuple[str, str]]
    tolerance: Tolerance
    captures: float
    conf: float
    scores: list[np.ndarray]
    left_out: list[np.ndarray]
    golden: Path | None = None
    centres: list[np.ndarray] = field(default_factory=list, repr=False)
    painted: list[list[np.ndarray]] = field(default_factory=list, repr=False)
    capture: CaptureRange | None = None
    drift: DesignDrift | None = None

    def at(self, conf: float) -> GoodBoards:
        """These boards at the design's point from the line captures ``conf`` (``captures``), raised until the good
        boards held out from the map draw at most 0.1 false calls per board (``conf``: ``jobs/teach_point.py``
        :func:`held_out_point`)."""
        return dataclasses.replace(self, captures=conf, conf=held_out_point(self.left_out, conf))

    def per_board(self, conf: float, tolerance: bool) -> float:
        """False calls per inspected good board at ``conf``: without the map, or held out from it (leave-one-out)."""
        calls = self.left_out if tolerance else self.scores
        return sum(int((s >= conf).sum()) for s in calls) / len(calls)

    def painted_caught(self, conf: float) -> tuple[int, int]:
        """``(caught, painted)``: the defects painted on the good boards that a call scoring ``conf`` or more catches
        and the tolerance learnt on the OTHER boards keeps (leave-one-out, as a held-out board meets it on the line)."""
        caught = total = 0
        held = held_out(self.centres, self.scores, self.tolerance.radius, self.tolerance.margin)
        for defects, tolerance in zip(self.painted, held):
            for calls in defects:
                total += 1
                strong = calls[calls[:, 0] >= conf]
                caught += bool(len(strong)) and not tolerated(strong[:, 1:], strong[:, 0], tolerance).all()
        return caught, total


def read_good(good: str | Path) -> list[tuple[str, np.ndarray]]:
    """``(file name, gray uint8 [H, W])`` of each good board in the folder (or the image) ``good``, by name;
    ``ValueError`` in one line for a file that cannot be read or fewer than :data:`MIN_GOOD` boards."""
    boards = []
    for path in golden_files(good):
        try:
            boards.append((path.name, load_image_gray(path)))
        except ValueError as exc:
            raise ValueError(f"{path}: cannot read this good board: {exc}") from exc
    if len(boards) < MIN_GOOD:
        raise ValueError(
            f"{good}: {len(boards)} good board(s); --good needs {MIN_GOOD} or more good boards of the design, as the line captures them"
        )
    return boards


def built_golden(boards: list[tuple[str, np.ndarray]], out: Path, weights: Path) -> Path:
    """The golden image of good ``boards`` (``golden build``: their median in the first board's pixels,
    ``align/golden_build.py``, registered as ``weights``' config says), written losslessly as ``<out stem>_golden.png``
    (``predict --reference`` takes it; its pixels are the design's key). ``ValueError`` when too few boards register."""
    golden, _ = build_golden(boards, load_checkpoint(weights).config.register)
    ok, encoded = cv2.imencode(".png", golden)
    if not ok:
        raise ValueError(f"{out}: cannot encode the golden image built from the good boards as PNG")
    path = out.with_name(out.stem + "_golden.png")
    atomic_write_bytes(path, encoded.tobytes())
    return path


def verify_golden(path: Path, golden: np.ndarray, boards: list[tuple[str, np.ndarray]], weights: Path) -> None:
    """``golden verify`` of the given golden image (uint8 ``[H, W]``, read from ``path``) against the good ``boards``
    (``align/golden_build.py``): ``ValueError`` in one line naming where it differs from what they agree on (it may
    carry a defect of the board it was taken from, and every board would pass there) or when too few register."""
    found, aligned = golden_disagreements(golden, boards, load_checkpoint(weights).config.register)
    if found:
        where = places_words(found, 3)
        raise ValueError(
            f"{path}: the golden image differs from what {len(aligned.names)} good boards agree on in {len(found)} place(s) "
            f"({where}): it may carry a defect; leave --golden out to build one from the good boards"
        )


def learn_good(  # noqa: PLR0913 - the good boards' pass, each input named
    weights: Path,
    golden: Path,
    boards: list[tuple[str, np.ndarray]],
    conf: float,
    threads: int | None,
    seed: int = 0,
    limits: Limits | None = None,
    painted_until: float = math.inf,
) -> GoodBoards:
    """Inspect the good ``boards`` against ``golden`` with ``weights`` as ``predict`` does (``Inspector``: the same
    prepare stage, registration and refusals) at :data:`GOOD_FLOOR`, map each call's box centre into golden-image
    pixels through the board's registration, and learn the design's tolerance map from them
    (``inspect/tolerance.py``); the design's point ``conf`` (from the line captures) is raised until the good boards,
    each held out from the map's fit, draw at most 0.1 false calls per board. :data:`PAINTED_PER_BOARD` defects are
    painted on each inspected board (``seed``) and inspected the same way, for the recall figure. ``limits``: the
    design's own limits, its frames read at them (None: the weights'). ``painted_until``: the ``time.perf_counter()``
    after which no more boards are painted once :data:`LEAST_PAINTED` were (the recall figure counts those painted)."""
    centres, scores, inspected, refused, painted, read = [], [], [], [], [], []
    rng = np.random.default_rng(seed)
    with Inspector.load(weights, reference=golden, threads=threads, conf=GOOD_FLOOR, monitor=False) as inspector:
        if limits is not None:
            inspector.prepare.own_limits(inspector.references.key(Path(golden).name), limits)  # the key predict reads
        for name, image in boards:
            record = inspector.inspect(image, name=name)
            if record.detections is None or record.registration is None:
                refused.append((name, record.reason or "not inspected"))
                continue
            inspected.append(name)
            read.append(record)
            centres.append(in_golden(record.detections.boxes, record.registration.mapping))
            scores.append(record.detections.scores.double().numpy())
            paint = len(painted) < LEAST_PAINTED or time.perf_counter() < painted_until
            painted.append(_painted_calls(inspector, name, image, rng) if paint else [])
        drift = _drift_level(inspector, read, weights)
    if len(inspected) < MIN_GOOD:
        why = "; ".join(f"{name}: {reason}" for name, reason in refused[:2])
        raise ValueError(
            f"{len(inspected)} of {len(boards)} good boards inspected, {MIN_GOOD} or more needed to learn a tolerance map (refused: {why})"
        )
    tolerance = Tolerance(learn_places(centres, scores, TOLERANCE_RADIUS), TOLERANCE_RADIUS, TOLERANCE_MARGIN)
    left_out = left_out_scores(centres, scores, TOLERANCE_RADIUS, TOLERANCE_MARGIN)
    found = GoodBoards(inspected, refused, tolerance, conf, conf, scores, left_out, centres=centres, painted=painted, drift=drift)
    return found.at(conf)


def _drift_level(inspector: Inspector, records: list[Inspection], weights: Path) -> DesignDrift | None:
    """The design's own drift level over the good boards' ``records`` (``monitor/design_drift.py``), read with the
    baseline ``weights`` carry and stamped with their digest; None when they carry none, or no board was read."""
    raw = inspector.runtime.meta.get("baseline")
    if raw is None or not records:
        return None
    baseline = Baseline.from_dict(raw, where=f"{weights}: baseline")
    goldens = golden_of(inspector.pipeline, records) if baseline.relative else [None] * len(records)
    frames = [r.detections.stats.double().numpy() for r in records]
    level = DesignDrift.learn(baseline, frames, [g.stats if g is not None else None for g in goldens])
    return dataclasses.replace(level, weights=weights_digest(load_checkpoint(weights).model))


def _painted_calls(inspector: Inspector, name: str, image: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Per defect painted on a copy of the good board ``image`` (``looks/paint.py``, in its own pixels), the calls on
    it that catch it (IoU :data:`MATCH_IOU`): float64 ``[K, 3]`` ``(score, x, y)``, centres in golden-image pixels;
    none for a painted board the prepare stage refused."""
    board, boxes, _ = paint_defects(image, PAINTED_PER_BOARD, rng)
    record = inspector.inspect(board, name=f"{name} (painted)")
    if record.detections is None or record.registration is None:
        return []
    found = record.detections
    if len(found) == 0 or len(boxes) == 0:
        return [np.zeros((0, 3)) for _ in boxes]
    overlap = box_iou(torch.as_tensor(boxes, dtype=found.boxes.dtype), found.boxes).numpy() >= MATCH_IOU  # [N, K]
    calls = np.concatenate([found.scores.double().numpy()[:, None], in_golden(found.boxes, record.registration.mapping)], axis=1)
    return [calls[hit] for hit in overlap]


__all__ = ["GoodBoards", "built_golden", "learn_good", "read_good", "verify_golden"]
