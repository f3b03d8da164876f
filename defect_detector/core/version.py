"""The package version (``defect-detector --version``, ``pyproject.toml``)."""

__version__ = "0.9.0"
