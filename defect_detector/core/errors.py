"""The error raised for bad dataset input (annotations, image files, references)."""

from __future__ import annotations


class DatasetError(ValueError):
    """Bad dataset input; the message names the file (or annotation id) and the problem."""


class Stopped(KeyboardInterrupt):
    """A run stopped by a signal (SIGINT, SIGTERM, SIGHUP) after finishing its outputs; ``signum`` says which, and the
    command's exit status is ``128 + signum`` (130, 143, 129)."""

    def __init__(self, signum: int, name: str) -> None:
        super().__init__(name)
        self.signum = signum
        self.name = name
