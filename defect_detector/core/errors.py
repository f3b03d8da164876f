"""The error raised for bad dataset input (annotations, image files, references)."""

from __future__ import annotations


class DatasetError(ValueError):
    """Bad dataset input; the message names the file (or annotation id) and the problem."""
