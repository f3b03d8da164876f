"""The CLI's error boundary: which failures are expected, and the one line each is reported as.

An expected failure is bad input or a failing environment, not a bug: a :class:`ValueError` (this package's
``DatasetError``, ``ConfigError``, ``ExportError``, ``TrainingError`` such as ``NonFiniteLossError`` ... are ValueErrors), an
:class:`OSError` (a missing file, a full disk, no permission) or a ``CliError``. Each becomes
``defect-detector CMD: error: <file>: <problem>`` on one line; anything else keeps its traceback.
"""

from __future__ import annotations

import re

_WORKER_HEADER = re.compile(r"^Caught \w+ in DataLoader worker process \d+\.\s*$")
_EXCEPTION_PREFIX = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*: ")


def is_expected(exc: BaseException, extra: tuple[type[BaseException], ...] = ()) -> bool:
    """Whether ``exc`` is a failure the CLI reports in one line (exit 2) rather than with a traceback."""
    return isinstance(exc, (ValueError, OSError, *extra))


def error_line(exc: BaseException) -> str:
    """``exc`` as one line naming the file: an OSError as ``<filename>: <strerror>``; an exception a DataLoader
    worker re-raised (its message a whole traceback) as the original exception's message; newlines folded."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}" + (f" -> {exc.filename2}" if exc.filename2 else "")
    else:
        text = str(exc) or type(exc).__name__
    text = worker_message(text)
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def worker_message(text: str) -> str:
    """The original exception's message in a DataLoader worker's re-raised ``text`` (``Caught DatasetError in
    DataLoader worker process 0.`` + ``Original Traceback ...``), without the exception's qualified name;
    ``text`` itself when it is no such message."""
    lines = text.splitlines()
    if len(lines) < 2 or not _WORKER_HEADER.match(lines[0]) or not lines[1].startswith("Original Traceback"):
        return text
    body = lines[2:]
    last_indented = max((i for i, line in enumerate(body) if line[:1].isspace()), default=-1)
    tail = [line for line in body[last_indented + 1 :] if line.strip()]
    if not tail:
        return text
    tail[0] = _EXCEPTION_PREFIX.sub("", tail[0], count=1)
    return "\n".join(tail)


class CliError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


def check_imgsz(imgsz: int | None, flag: str = "--imgsz") -> None:
    """``imgsz`` (None: the model's) must be a multiple of 32 (the model's largest stride) and at least 64."""
    if imgsz is not None and (imgsz < 64 or imgsz % 32):
        raise CliError(f"{flag} must be a multiple of 32 and >= 64, got {imgsz}")


class NotInspected(CliError):
    """Some frames were not inspected (the outputs are written): one line, exit code 3."""

    exit_code = 3
