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


def run_line(row: Row[Any]) -> str:
    """One run in words: ``design golden_a.png: frames 0-19 (20 boards)`` (``, 2 not inspected`` when some were; then
    ``; warning: this design looks unlike ...`` when its golden image is unlike the model's training images);
    ``taught design golden_a.png: ...`` when the weights were taught it (``teach``)."""
    frames = f"frame {row.first_frame}" if row.first_frame == row.last_frame else f"frames {row.first_frame}-{row.last_frame}"
    refused = f", {row.not_inspected} not inspected" if row.not_inspected else ""
    taught = "taught " if getattr(row, "design_taught", None) else ""
    line = f"{taught}design {row.design}: {frames} ({row.frames} board{'s' if row.frames != 1 else ''}{refused})"
    warning = getattr(row, "design_warning", None)
    return f"{line}; warning: {warning.split(': ', 1)[-1]}" if warning else line


def run_dict(row: Row[Any]) -> dict[str, Any]:
    """A ``design_runs`` row as the live page and the report give it: the row's fields, ``line`` (:func:`run_line`)
    and ``inspection``, the id of its first frame."""
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
        "line": run_line(row),
    }


def recent_runs(conn: Connection, limit: int = RECENT) -> list[dict[str, Any]]:
    """The newest ``limit`` design runs, newest first."""
    return [run_dict(r) for r in conn.execute(select(design_runs).order_by(design_runs.c.id.desc()).limit(limit))]


def runs_between(conn: Connection, start: datetime, end: datetime, limit: int = MAX_RUNS) -> list[dict[str, Any]]:
    """The design runs with a frame in ``[start, end)`` (naive UTC), oldest first, at most the newest ``limit``."""
    stmt = (
        select(design_runs)
        .where(design_runs.c.ended >= start, design_runs.c.started < end)
        .order_by(design_runs.c.id.desc())
        .limit(limit)
    )
    return [run_dict(r) for r in reversed(conn.execute(stmt).all())]
