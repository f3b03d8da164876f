"""The errors the package raises for bad input: a dataset (annotations, image files), a frame's golden image, a stop."""

from __future__ import annotations

from typing import Any

from defect_detector.core.refusal import RefusalKind


class DatasetError(ValueError):
    """Bad dataset input; the message names the file (or annotation id) and the problem."""


class Stopped(KeyboardInterrupt):
    """A run stopped by a signal (SIGINT, SIGTERM, SIGHUP) after finishing its outputs; ``signum`` says which, and the
    command's exit status is ``128 + signum`` (130, 143, 129)."""

    def __init__(self, signum: int, name: str) -> None:
        super().__init__(name)
        self.signum = signum
        self.name = name


class ReferenceError(ValueError):
    """A frame cannot be inspected against a reference; the message says which file and why, ``kind`` how it is counted
    (``no golden image``, ``no reference``, ``unreadable reference``, ``reference does not match``, ``occluded or not this board``).
    ``registered``: the golden image registered into the frame and its ``Registration`` when the registration found
    the board but the golden check refused it (the prepare stage asks whether hidden area explains that), else None."""

    def __init__(self, message: str, kind: RefusalKind, registered: tuple[Any, Any] | None = None) -> None:
        super().__init__(message)
        self.kind = RefusalKind(kind)
        self.registered = registered
