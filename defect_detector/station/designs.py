"""Design runs: the frames of one source inspected against one golden image in a row, folded into one line.

A golden-template line logs a ``changeover`` event whenever the golden image changes; on a line whose boards each have
their own golden image that is one event per board, which would bury a drift alert in the alert history. The station
shows one line per run instead ("design golden_a.png: frames 0-19 (20 boards)"), and drift alerts apart from them.

A frame's design is the name of its golden image (the recorded ``reference``, else the ``reference`` of the changeover
event it raised, its base name). A frame with another design than the open run of its source starts a new run; a frame
without one (not inspected, so not registered) belongs to the open run, if any; frames of a model without golden images
make no runs. :class:`DesignRuns` keeps the open run per source for one recorder (a new recorder starts new runs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection, Row

from defect_detector.station.db import iso
from defect_detector.station.schema import design_runs

RECENT = 20
"""Design runs on the live page."""
MAX_RUNS = 500
"""Most design runs one report lists (the newest)."""
_INSERT = design_runs.insert().returning(design_runs.c.id, sort_by_parameter_order=True)
_UPDATE = (
    design_runs.update()
    .where(design_runs.c.id == bindparam("run_id"))
    .values(
        last_frame=bindparam("last"),
        frames=bindparam("n"),
        not_inspected=bindparam("refused"),
        ended=bindparam("end"),
        design_warning=bindparam("warning"),
        design_taught=bindparam("taught"),
    )
)


@dataclass
class _Run:
    id: int | None
    source: str
    design: str
    first_frame: int
    last_frame: int
    inspection_id: int | None
    started: datetime
    ended: datetime
    frames: int = 0
    not_inspected: int = 0
    warning: str | None = None
    taught: bool | None = None


@dataclass(frozen=True)
class FrameDesign:
    """What a run needs of one recorded frame: its inspection id, source, frame index, time (naive UTC), design name
    (None: none of its own), whether it was inspected, its design warning (``inspect/design_check.py``; None: none) and
    whether the weights were taught its design (None: not known, a record of an older inspector)."""

    inspection_id: int
    source: str
    frame: int
    time: datetime
    design: str | None
    inspected: bool
    warning: str | None = None
    taught: bool | None = None


def design_of(reference: str | None, events: Iterable[dict[str, Any]]) -> str | None:
    """A frame's design: its golden image's name, else the base name of the golden image its changeover names."""
    if reference:
        return reference
    for event in events:
        if event.get("event") == "changeover" and event.get("reference"):
            return str(event["reference"]).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or None
    return None


class DesignRuns:
    """The open design run of each source, extended batch by batch in the recorder's transaction: :meth:`add` inside it,
    :meth:`commit` after it commits, :meth:`reset` when it fails (the next frame of each source starts a new run)."""

    def __init__(self) -> None:
        self._open: dict[str, _Run] = {}
        self._pending: dict[str, _Run] | None = None

    def add(self, conn: Connection, frames: list[FrameDesign]) -> None:
        """Fold ``frames`` (in recording order) into the runs and write the new and changed ones on ``conn``."""
        state = {k: dataclasses.replace(v) for k, v in self._open.items()}
        touched: dict[int, _Run] = {}
        for f in frames:
            run = state.get(f.source)
            if f.design is not None and (run is None or run.design != f.design):
                run = _Run(None, f.source, f.design, f.frame, f.frame, f.inspection_id, f.time, f.time)
                state[f.source] = run
            if run is None:
                continue
            run.last_frame, run.ended = f.frame, f.time
            run.frames += 1
            run.not_inspected += not f.inspected
            run.warning = run.warning or f.warning
            run.taught = run.taught if f.taught is None else bool(run.taught) or f.taught
            touched[id(run)] = run
        new = [r for r in touched.values() if r.id is None]
        if new:
            rows = [
                {"source": r.source, "design": r.design, "first_frame": r.first_frame, "last_frame": r.last_frame, "frames": r.frames}
                | {"not_inspected": r.not_inspected, "inspection_id": r.inspection_id, "started": r.started, "ended": r.ended}
                | {"design_warning": r.warning, "design_taught": r.taught}
                for r in new
            ]
            for run, run_id in zip(new, conn.execute(_INSERT, rows).scalars().all()):
                run.id = int(run_id)
        fresh = {id(r) for r in new}
        changed = [r for r in touched.values() if id(r) not in fresh]
        if changed:
            rows = [
                {"run_id": r.id, "last": r.last_frame, "n": r.frames, "refused": r.not_inspected, "end": r.ended}
                | {"warning": r.warning, "taught": r.taught}
                for r in changed
            ]
            conn.execute(_UPDATE, rows)
        self._pending = state

    def commit(self) -> None:
        if self._pending is not None:
            self._open, self._pending = self._pending, None

    def reset(self) -> None:
        self._open, self._pending = {}, None


@dataclass
class Stretch:
    """What the pages list of a source's design runs: one run (``designs`` 1), a run with brief interruptions folded
    in (``others``: the frames of other designs inside ``first_frame``-``last_frame``), or a mixed stretch of designs
    none of which held :data:`MIN_RUN` frames in a row (``designs`` > 1, ``design`` None). ``frames`` counts the
    frames of ``design`` (of every design in a mixed stretch); ``id`` is the newest ``design_runs`` row in it."""

    id: int
    source: str
    design: str | None
    first_frame: int
    last_frame: int
    frames: int
    not_inspected: int
    inspection_id: int | None
    started: datetime
    ended: datetime
    design_warning: str | None
    design_taught: bool | None
    designs: int = 1
    others: int = 0

    @classmethod
    def of(cls, row: Row[Any]) -> Stretch:
        fields = ("id", "source", "design", "first_frame", "last_frame", "frames", "not_inspected", "inspection_id", "started", "ended")
        return cls(*(getattr(row, f) for f in fields), getattr(row, "design_warning", None), getattr(row, "design_taught", None))

    @property
    def span(self) -> int:
        """Frames from its first to its last, other designs' included."""
        return self.frames + self.others

    def absorb(self, later: Stretch, between: int = 0) -> None:
        """Extend with ``later`` (``between``: frames of other designs before it, counted in ``others``)."""
        self.id, self.last_frame, self.ended = later.id, later.last_frame, later.ended
        self.frames += later.frames
        self.not_inspected += later.not_inspected
        self.others += later.others + between
        self.design_warning = self.design_warning or later.design_warning
        if later.design_taught is not None:
            self.design_taught = bool(self.design_taught) or later.design_taught


MIN_RUN = 3
"""Frames in a row a design needs to be listed as a run of its own. A design on fewer (a board of another design, a
line alternating designs) is folded: into the run around it when the same design follows within fewer than
:data:`MIN_RUN` frames, else with its neighbours into one mixed line."""


def fold(rows: list[Row[Any]], min_run: int = MIN_RUN) -> list[Stretch]:
    """The ``design_runs`` ``rows`` (any order, any sources) as the pages list them, oldest first: per source, a run
    interrupted by fewer than ``min_run`` frames of other designs continues (the frames between are its ``others``),
    and neighbouring runs shorter than ``min_run`` frames fold into one mixed stretch."""
    out: list[Stretch] = []
    by_source: dict[str, list[Row[Any]]] = {}
    for row in sorted(rows, key=lambda r: r.id):
        by_source.setdefault(row.source, []).append(row)
    for source_rows in by_source.values():
        out += _mix(_bridge([Stretch.of(r) for r in source_rows], min_run), min_run)
    return sorted(out, key=lambda s: s.id)


def _bridge(runs: list[Stretch], min_run: int) -> list[Stretch]:
    """Runs of one source, oldest first, with a run that resumes after fewer than ``min_run`` other frames merged back."""
    out: list[Stretch] = []
    for run in runs:
        k, between = len(out) - 1, 0
        while k >= 0 and out[k].span < min_run and between < min_run:
            between += out[k].span
            k -= 1
        if 0 <= k < len(out) - 1 and out[k].design == run.design and between < min_run:
            out[k].absorb(run, between)
            del out[k + 1 :]
        elif out and out[-1].design == run.design:
            out[-1].absorb(run)
        else:
            out.append(run)
    return out


def _mix(runs: list[Stretch], min_run: int) -> list[Stretch]:
    """Neighbouring runs of one source shorter than ``min_run`` frames folded into one mixed stretch each."""
    out: list[Stretch] = []
    names: list[set[str] | None] = []  # the designs folded into out[i]; None: a run of its own
    for run in runs:
        folded = names[-1] if names else None
        if run.span < min_run and folded is not None:
            mixed = out[-1]
            mixed.absorb(run)
            folded.add(run.design or "")
            mixed.designs = len(folded)
            if mixed.designs > 1:
                mixed.design, mixed.design_taught = None, None
        else:
            out.append(run)
            names.append({run.design or ""} if run.span < min_run else None)
    return out


def run_line(row: Row[Any] | Stretch) -> str:
    """One run in words: ``design golden_a.png: frames 0-19 (20 boards)`` (``, 2 not inspected`` when some were;
    ``; 1 board of other designs among them`` for a run with brief interruptions; then ``; warning: this design looks
    unlike ...`` when its golden image is unlike the model's training images); ``taught design golden_a.png: ...``
    when the weights were taught it (``teach``). A mixed stretch: ``12 designs, each on fewer than 3 frames in a row: frames
    40-55 (16 boards)``."""
    frames = f"frame {row.first_frame}" if row.first_frame == row.last_frame else f"frames {row.first_frame}-{row.last_frame}"
    refused = f", {row.not_inspected} not inspected" if row.not_inspected else ""
    designs = getattr(row, "designs", 1)
    others = getattr(row, "others", 0)
    among = f"; {others} board{'s' if others != 1 else ''} of other designs among them" if others else ""
    counted = f"{row.frames} board{'s' if row.frames != 1 else ''}{refused}{among}"
    if designs > 1:
        line = f"{designs} designs, each on fewer than {MIN_RUN} frames in a row: {frames} ({counted})"
    else:
        taught = "taught " if getattr(row, "design_taught", None) else ""
        line = f"{taught}design {row.design}: {frames} ({counted})"
    warning = getattr(row, "design_warning", None)
    return f"{line}; warning: {warning.split(': ', 1)[-1]}" if warning else line


def run_dict(row: Row[Any] | Stretch) -> dict[str, Any]:
    """A design run (a ``design_runs`` row or a folded :class:`Stretch`) as the live page and the report give it: its
    fields, ``line`` (:func:`run_line`) and ``inspection``, the id of its first frame; ``designs`` (1 for a run, more
    for a mixed stretch, whose ``design`` is None) and ``others`` (frames of other designs inside a run)."""
    return {
        "id": row.id,
        "source": row.source,
        "design": row.design,
        "first_frame": row.first_frame,
        "last_frame": row.last_frame,
        "frames": row.frames,
        "not_inspected": row.not_inspected,
        "inspection": row.inspection_id,
        "started": iso(row.started),
        "ended": iso(row.ended),
        "design_warning": getattr(row, "design_warning", None),
        "design_taught": getattr(row, "design_taught", None),
        "designs": getattr(row, "designs", 1),
        "others": getattr(row, "others", 0),
        "line": run_line(row),
    }


def recent_runs(conn: Connection, limit: int = RECENT) -> list[dict[str, Any]]:
    """The newest ``limit`` design runs as the pages list them (:func:`fold` of the newest :data:`MAX_RUNS` rows),
    newest first."""
    rows = conn.execute(select(design_runs).order_by(design_runs.c.id.desc()).limit(MAX_RUNS)).all()
    return [run_dict(s) for s in reversed(fold(rows)[-limit:])]


def runs_between(conn: Connection, start: datetime, end: datetime, limit: int = MAX_RUNS) -> list[dict[str, Any]]:
    """The design runs with a frame in ``[start, end)`` (naive UTC) as the pages list them (:func:`fold`), oldest
    first, of the newest ``limit`` ``design_runs`` rows."""
    stmt = (
        select(design_runs)
        .where(design_runs.c.ended >= start, design_runs.c.started < end)
        .order_by(design_runs.c.id.desc())
        .limit(limit)
    )
    return [run_dict(s) for s in fold(conn.execute(stmt).all())]
