"""False calls learnt from the operators: ``teach --station DB`` and ``teach --forget-rejections`` (issue 56).

A call a reviewer rejects at the station (verdict ``false_call``) was recorded with its box centre in its golden
image's pixels (``station/records.py`` ``CallRecord.golden``). :func:`apply_rejections` reads them per design
(``station/review.py`` :func:`false_calls_by_design`), merges them into the ``rejected`` places of each taught design's
tolerance (``inspect/tolerance.py``: within :data:`REJECTED_RADIUS` a later call must beat the rejected score by the
margin, and a call at the cap or above is always a call) and writes the weights again. Applying the same database
twice changes nothing: places within the radius merge, keeping the better score. A design the weights were not taught
is listed, not applied (its frames have no entry to hold a tolerance: ``teach`` it first).

:func:`forget_rejections` undoes it: the weights again without any design's rejected places (its good-board map and
point kept).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from defect_detector.core.io import atomic_torch_save
from defect_detector.inspect.tolerance import REJECTED_RADIUS, TOLERANCE_CAP, Tolerance, learn_places
from defect_detector.model.checkpoint import load_checkpoint
from defect_detector.station.db import parse_url
from defect_detector.station.review import false_calls_by_design
from defect_detector.station.store import Store


@dataclass(frozen=True)
class DesignRejections:
    """One taught design: ``name``, ``key``, ``calls`` rejected calls read from the station, ``places`` rejected
    places its entry holds now, ``capped``: how many of those calls scored at the cap or above (always calls)."""

    name: str
    key: str
    calls: int
    places: int
    capped: int


@dataclass(frozen=True)
class RejectionReport:
    """What ``teach --station`` applied: ``designs`` (taught designs with rejections), ``untaught`` (golden-image key ->
    rejected calls of designs the weights were not taught, not applied) and the ``weights`` written."""

    designs: list[DesignRejections]
    untaught: dict[str, int]
    weights: Path


def _with_rejected(entry: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
    """``entry`` (a checked ``taught`` item) with its rejected places set to ``rows`` float ``[R, 3]`` (none: removed)."""
    kept = {k: v for k, v in entry.items() if k not in ("rejected", "rejected_radius")}
    if len(rows) == 0:
        return kept
    tolerance = Tolerance(np.zeros((0, 3)), rejected=rows, rejected_radius=REJECTED_RADIUS)
    return kept | {k: v for k, v in tolerance.to_entry().items() if k.startswith("rejected")}


def apply_rejections(weights: str | Path, url: str, out: str | Path) -> RejectionReport:
    """Write ``out``: the checkpoint ``weights`` with the calls reviewers rejected in the station database ``url``
    added to each taught design's tolerance (module docstring). ``ValueError`` in one line, writing nothing, when the
    database holds no rejected call with a golden-image place, or none of a design the weights were taught."""
    weights, out = Path(weights), Path(out)
    taught = load_checkpoint(weights).taught
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite" and not Path(parsed.database).is_file():
        raise ValueError(f"{url}: no station database there (the file predict --db wrote)")  # opening one would create it
    with Store(url) as store, store.engine.connect() as conn:
        rejected = false_calls_by_design(conn)
    if not rejected:
        raise ValueError(f"{url}: no call rejected as a false call with its place in a golden image (recorded since v0.19) to learn from")
    designs, entries = [], []
    for entry in taught:
        calls = np.asarray(rejected.get(entry["key"], []), np.float64).reshape(-1, 3)
        if len(calls) == 0:
            entries.append(entry)
            continue
        before = np.asarray(entry.get("rejected", []), np.float64).reshape(-1, 3)
        together = np.concatenate([before, calls])
        rows = learn_places([together[:, :2]], [together[:, 2]], REJECTED_RADIUS)
        entries.append(_with_rejected(entry, rows))
        designs.append(DesignRejections(entry["name"], entry["key"], len(calls), len(rows), int((calls[:, 2] >= TOLERANCE_CAP).sum())))
    untaught = {key: len(rows) for key, rows in rejected.items() if key not in {e["key"] for e in taught}}
    if not designs:
        raise ValueError(
            f"{weights}: none of the {len(untaught)} design(s) with rejected calls in {url} is taught in these weights "
            "(teach them first, then apply the station's verdicts to the taught weights)"
        )
    _write(weights, out, entries)
    return RejectionReport(designs, untaught, out)


def forget_rejections(weights: str | Path, out: str | Path) -> list[tuple[str, int]]:
    """Write ``out``: the checkpoint ``weights`` without any design's rejected places; returns ``(design name,
    places removed)`` for each design that had some. ``ValueError`` in one line when none had any."""
    weights, out = Path(weights), Path(out)
    taught = load_checkpoint(weights).taught
    removed = [(e["name"], len(e["rejected"])) for e in taught if e.get("rejected")]
    if not removed:
        raise ValueError(f"{weights}: no design here holds places rejected at the station; nothing to forget")
    _write(weights, out, [_with_rejected(e, np.zeros((0, 3))) for e in taught])
    return removed


def _write(weights: Path, out: Path, entries: list[dict[str, Any]]) -> None:
    """``weights``' checkpoint as it is, with its ``taught`` list replaced by ``entries``, written atomically to ``out``."""
    ckpt = torch.load(weights, map_location="cpu", weights_only=True)
    ckpt["taught"] = entries
    atomic_torch_save(ckpt, out)
    load_checkpoint(out)  # what was written loads, its entries checked


__all__ = ["DesignRejections", "RejectionReport", "apply_rejections", "forget_rejections"]
