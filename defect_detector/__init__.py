"""defect_detector: small, fast PCB defect detection on grayscale images.

``from defect_detector import Inspector`` gives the inspection path (``inspect/inspector.py``), the API
to embed in line software. It is imported on first use, so ``defect-detector --version`` stays fast.
"""

from typing import Any

from defect_detector.core.version import __version__

__all__ = ["Inspector", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Inspector":
        from defect_detector.inspect.inspector import Inspector

        return Inspector
    raise AttributeError(f"module 'defect_detector' has no attribute {name!r}")
