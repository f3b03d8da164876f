"""The package version: the one place it is written (``pyproject.toml`` reads it as its dynamic version, ``defect-detector
--version`` prints it; the docs name releases, never restate it)."""

__version__ = "0.18.0"
