"""defect_detector: small, fast PCB defect detection on grayscale images."""

__version__ = "0.7.0"
