"""Errors of a training run that the CLI reports as one line (``ValueError`` subclasses, exit status 2)."""

from __future__ import annotations


class TrainingError(ValueError):
    """A training run cannot start or go on. The message is one line that names the file or config key,
    the problem and what to do; ``defect-detector train`` prints it as ``error: ...`` and exits with 2."""


class NonFiniteLossError(TrainingError):
    """More than ``train.max_bad_steps`` steps had a non-finite loss or gradient."""
