"""One writer per output, checked before the first frame: what ``predict`` does with ``--save-json``, ``--report`` and
``--save-dir`` before it inspects anything.

:class:`RunGuard` (taken at the start of :meth:`Inspector.run <defect_detector.inspect.inspector.Inspector.run>`):

- refuses outputs that would write into each other or that the source would read back, or overwrite
  (``inspect/output_paths.py``), before anything is read or written;
- checks that every output folder can be written (creating it), so a read-only folder fails before the first
  frame with one line, not after 300 frames;
- locks each output: ``.NAME.lock`` beside ``--save-json`` (it covers the ``.json`` and the ``.jsonl``) and beside
  ``--report``, and ``DIR/.defect-detector.lock`` inside ``--save-dir``. The lock is an ``fcntl.flock`` on that file, which the
  kernel releases when the process ends however it ends (kill -9 included), so a lock is never stale; the file
  holds the owner's process id and host for the message a second run gets:
  ``out/det.json: another predict run (pid 4242 on host line-pc) is writing it; ...``;
- recovers what a killed run (kill -9, power loss) left: its hidden temp JSONL (``.det*.tmp.jsonl``) is renamed
  to ``det.recovered-<UTC time>.jsonl`` beside it (complete lines only: a partly written last line is dropped), its
  temp ``--report`` CSV (``.report*.tmp.csv``) to ``report.recovered-<UTC time>.csv`` (complete lines), its
  unfinished video (``DIR/.NAME*.tmp.mp4``) to ``DIR/NAME.recovered-<UTC time>.mp4``, the annotated images it listed in
  ``DIR/annotated.unfinished.txt`` to ``DIR.recovered-<UTC time>/`` (``inspect/previous_run.py``); each is logged at
  WARNING and listed in :attr:`RunGuard.recovered`. Nothing a run left is overwritten or deleted silently.

Outputs write to per-run temp names (:func:`run_temp_name`), so even without a lock (a platform without
``fcntl``) two runs never write into one temp file.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import secrets
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from defect_detector.inspect.output_paths import check_output_paths, jsonl_path
from defect_detector.inspect.previous_run import recover_unfinished
from defect_detector.inspect.sources import FrameSource

try:
    import fcntl
except ImportError:  # Windows: no advisory locks here; outputs still use per-run temp names
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("defect_detector.inspect")

DIR_LOCK_NAME = ".defect-detector.lock"
RUN_TOKEN = f"{os.getpid()}-{secrets.token_hex(3)}"
"""This process's part of every temp name (pid + random: two containers may both be pid 1)."""


class OutputBusyError(ValueError):
    """Another run holds the lock of an output path; the message names the path and that run's process id."""


def run_temp_name(path: Path) -> Path:
    """The hidden temp file an output of this run is written to before it is renamed to ``path``:
    ``.STEM.<pid>-<random>.tmp.SUFFIX`` beside it."""
    return path.with_name(f".{path.stem}.{RUN_TOKEN}.tmp{path.suffix}")


def leftover_temps(path: Path) -> list[Path]:
    """Temp files of ``path`` left by earlier runs (this form and the older ``.STEM.tmp.SUFFIX``), oldest first."""
    pattern = f".{glob.escape(path.stem)}.*tmp{glob.escape(path.suffix)}"
    found = [p for p in path.parent.glob(pattern) if p.is_file() and RUN_TOKEN not in p.name]
    return sorted(found, key=lambda p: p.stat().st_mtime)


def check_writable_folder(folder: Path, what: str) -> None:
    """Create ``folder`` if needed and prove a file can be created in it; ``ValueError`` naming ``what`` (the flag)
    and the folder otherwise."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-test.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(f"{what}: cannot write into {folder}: {exc.strerror or exc}") from exc


def check_writable_file(path: Path, what: str) -> None:
    """``path`` can be created or replaced: its folder is writable (a rename replaces even a read-only file) and it
    is not a folder itself."""
    if path.is_dir():
        raise ValueError(f"{what}: {path} is a folder, not a file")
    check_writable_folder(path.parent, what)


def check_database(db: str | os.PathLike[str]) -> None:
    """``--db``: the station database must be usable now, not found unusable after the first frames (the recorder would
    only count them unrecorded): a SQLite file (a path or ``sqlite:///...``) creatable or writable, and a database that
    answers a query (a file that is not a SQLite database, a PostgreSQL server that cannot be reached or refuses the
    login: within ``CONNECT_TIMEOUT_S``). ``ValueError``, one line, its password masked, otherwise."""
    from defect_detector.station.db import parse_url

    url = parse_url(db)
    if url.get_backend_name() == "sqlite" and url.database:
        path = Path(url.database)
        check_writable_file(path, "--db")
        if path.exists() and not os.access(path, os.W_OK):  # SQLite writes into the file itself
            raise ValueError(f"--db: {path} is not writable")
    _probe_database(url)


def _probe_database(url: Any) -> None:
    """Connect to the database at ``url`` (a SQLAlchemy URL) and run one query; ``ValueError`` naming it otherwise."""
    from sqlalchemy import text

    from defect_detector.station.db import describe, make_engine

    engine = make_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT count(*) FROM sqlite_master" if url.get_backend_name() == "sqlite" else "SELECT 1"))
    except Exception as exc:  # the driver's own errors (sqlite3.DatabaseError, psycopg.OperationalError, ...), wrapped or not
        inner = getattr(exc, "orig", None) or exc
        first = (str(inner).strip().splitlines() or [type(inner).__name__])[0]
        raise ValueError(f"--db {describe(url)}: cannot use the station database: {type(inner).__name__}: {first}") from exc
    finally:
        engine.dispose()


class OutputLock:
    """An exclusive ``flock`` on ``lock_path``, guarding ``target`` (what the error message names, with the
    ``command`` that holds it); released by :meth:`release` or when the process ends, however it ends."""

    def __init__(self, lock_path: Path, target: Path, what: str, command: str = "predict") -> None:
        self.path = lock_path
        self.fd: int | None = None
        if fcntl is None:
            return
        for _ in range(5):  # the file may be unlinked by its releasing owner between our open and our flock
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = os.read(fd, 200).decode("utf-8", "replace").strip() or "unknown"
                os.close(fd)
                raise OutputBusyError(
                    f"{target}: another {command} run ({_describe(owner)}) is writing {what}; stop it or choose another path"
                ) from None
            if _same_file(fd, lock_path):
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()} {socket.gethostname()} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}".encode())
                self.fd = fd
                return
            os.close(fd)
        raise OutputBusyError(f"{target}: cannot take the lock {lock_path}: it keeps changing (another run starting?)")

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self.fd)  # closing releases the flock
            self.fd = None


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _describe(owner: str) -> str:
    """``"4242 line-pc 2026-..."`` -> ``"pid 4242 on host line-pc, since 2026-..."``."""
    parts = owner.split()
    if len(parts) >= 2 and parts[0].isdigit():
        since = f", since {parts[2]}" if len(parts) > 2 else ""
        return f"pid {parts[0]} on host {parts[1]}{since}"
    return f"lock holder {owner!r}"


class RunGuard:
    """Checks, locks and leftover recovery for one run's outputs (see the module docstring). ``release()`` (or use it
    as a context manager) unlocks; the kernel unlocks anyway when the process ends. ``source``: the run's (its paths
    are checked against the outputs'); ``alerts``: the files the drift sinks write. ``ValueError`` with one line for
    outputs on one file, one the source would read back, or one that cannot be written; :class:`OutputBusyError` for
    one another run holds."""

    def __init__(
        self,
        save_json: str | os.PathLike[str] | None = None,
        save_dir: str | os.PathLike[str] | None = None,
        report: str | os.PathLike[str] | None = None,
        source: FrameSource | None = None,
        alerts: Sequence[Path] = (),
    ) -> None:
        self.locks: list[OutputLock] = []
        self.recovered: list[str] = []
        json_path = Path(save_json) if save_json else None
        dir_path = Path(save_dir) if save_dir else None
        report_path = Path(report) if report else None
        if source is not None:  # the outputs' paths against each other (``alerts``: the drift sinks' files) and the source
            files = [("--save-json", json_path), ("--report", report_path), *(("--alerts", path) for path in alerts)]
            check_output_paths(source, [(flag, path) for flag, path in files if path is not None], dir_path)
        if json_path is not None:
            check_writable_file(json_path, "--save-json")
        if report_path is not None:
            check_writable_file(report_path, "--report")
        if dir_path is not None:
            check_writable_folder(dir_path, "--save-dir")
        try:
            if json_path is not None:
                self.locks.append(OutputLock(json_path.with_name(f".{json_path.name}.lock"), json_path, "its --save-json"))
                self._recover(leftover_temps(jsonl_path(json_path)))
            if report_path is not None:
                self.locks.append(OutputLock(report_path.with_name(f".{report_path.name}.lock"), report_path, "its --report"))
                self._recover(leftover_temps(report_path))
            if dir_path is not None:
                self.locks.append(OutputLock(dir_path / DIR_LOCK_NAME, dir_path, "into this --save-dir"))
                self._recover([p for p in dir_path.glob(".*tmp.mp4") if p.is_file() and RUN_TOKEN not in p.name])
                images = recover_unfinished(dir_path, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
                self.recovered += [str(images)] if images is not None else []
        except BaseException:
            self.release()
            raise

    def _recover(self, leftovers: list[Path]) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for tmp in leftovers:
            stem, suffix = tmp.name[1:].split(".", 1)[0], tmp.suffix
            target = _free_name(tmp.with_name(f"{stem}.recovered-{stamp}{suffix}"))
            if suffix in (".jsonl", ".csv"):
                kept, dropped = _complete_lines(tmp, json_lines=suffix == ".jsonl")
                os.replace(tmp, target)
                what = "frame records" if suffix == ".jsonl" else "CSV lines (the header included)"
                note = f"{kept} {what}" + (", a partly written last line dropped" if dropped else "")
            else:
                note = f"{tmp.stat().st_size} bytes, unfinished: it may not play"
                os.replace(tmp, target)
            message = f"found {tmp.name}, left by an earlier run that did not finish (killed?): kept as {target.name} ({note})"
            log.warning("%s", message)
            self.recovered.append(str(target))

    def release(self) -> None:
        """Unlock every output (idempotent)."""
        while self.locks:
            self.locks.pop().release()

    def __enter__(self) -> RunGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _free_name(path: Path) -> Path:
    """``path``, or ``path`` with ``-2``, ``-3`` ... before its suffix when that exists (never overwrite)."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return candidate


def _complete_lines(path: Path, json_lines: bool = True) -> tuple[int, bool]:
    """Cut ``path`` after its last complete line (``json_lines``: the last line that parses as JSON); (complete lines,
    whether a partial line was dropped)."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    lines = data[:end].split(b"\n")[:-1] if end else []
    good = 0
    for line in lines:
        try:
            if json_lines:
                json.loads(line)
        except ValueError:
            break
        good += 1
    keep = sum(len(line) + 1 for line in lines[:good])
    if keep < len(data):
        with open(path, "r+b") as fh:
            fh.truncate(keep)
    return good, keep < len(data)
