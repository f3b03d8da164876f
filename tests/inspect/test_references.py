"""Golden images for the frames of a source: found by relative path, name, or stem with any image extension."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from defect_detector.inspect.references import ReferenceError, References


def test_a_png_golden_image_serves_a_jpg_frame(tmp_path: Path) -> None:
    """v0.8 needed the frame's exact file name, extension included, while the README said to save golden images as PNG."""
    golden = tmp_path / "golden"
    (golden / "line2").mkdir(parents=True)
    board = np.full((32, 32), 200, np.uint8)
    for name in ("a.png", "line2/b.tiff", "c.jpg"):
        assert cv2.imwrite(str(golden / name), board)
    refs = References(golden)
    assert refs.lookup("a.jpg") == golden / "a.png"
    assert refs.lookup("line2/b.jpg") == golden / "line2" / "b.tiff"
    assert refs.lookup("elsewhere/b.png") == golden / "line2" / "b.tiff"  # by stem, any folder
    assert refs.lookup("c.jpg") == golden / "c.jpg"
    with pytest.raises(ReferenceError, match="no golden image in .*any image extension"):
        refs.lookup("d.jpg")
