"""defect_detector: small, fast PCB defect detection on grayscale images.

``from defect_detector import Inspector`` gives the inspection path (``deploy/inspector.py``), the API
to embed in line software. It is imported on first use, so ``defect-detector --version`` stays fast.
"""

from typing import Any

__version__ = "0.8.0"
__all__ = ["Inspector", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Inspector":
        from defect_detector.deploy.inspector import Inspector

        return Inspector
    raise AttributeError(f"module 'defect_detector' has no attribute {name!r}")
