"""Golden images for the frames of a source: found by relative path, name, or stem with any image extension."""

from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np
import pytest

from defect_detector.core.errors import ReferenceError
from defect_detector.data.images import pixel_fingerprint
from defect_detector.inspect.designs import Designs
from defect_detector.inspect.references import References


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


def test_a_golden_image_is_keyed_by_its_pixels_not_its_file_name(tmp_path: Path) -> None:
    """Issue 35: two copies of one golden image under two names are one design; a file rewritten with new pixels is
    another (the key is cached by path and modification time, so it is not re-hashed every frame)."""
    rng = np.random.default_rng(0)
    board, other = (rng.integers(0, 255, (48, 64), dtype=np.uint8) for _ in range(2))
    for name, image in (("a.png", board), ("b.png", board), ("c.png", other)):
        assert cv2.imwrite(str(tmp_path / name), image)
    refs = References(tmp_path)
    assert refs.key("a.png") == refs.key("b.png") == pixel_fingerprint(board) != refs.key("c.png")
    assert refs.key("a.png") == refs.key("a.png") and refs._keys[tmp_path / "a.png"][1] == pixel_fingerprint(board)
    assert cv2.imwrite(str(tmp_path / "b.png"), other)
    os.utime(tmp_path / "b.png", ns=(1, 1))  # another modification time, whatever the file system's resolution
    assert refs.key("b.png") == pixel_fingerprint(other)
    designs = Designs(refs)
    design, name = designs.of("b.png")
    assert (design.key, name) == (pixel_fingerprint(other), "b.png")
    warped, _ = designs.register(design, other, "b.png")  # the registrar follows the new pixels too
    assert np.array_equal(warped, other)


def test_a_golden_image_rewritten_at_its_size_with_its_time_put_back_is_read_again(tmp_path: Path) -> None:
    """Issue 44: another design's pixels written over a golden image, same byte size and modification time, were never
    re-read (the cache keyed on mtime and size): the frames were inspected against the old design."""
    path = tmp_path / "golden.bmp"  # an uncompressed format: the same size for any pixels
    first, second = np.full((32, 32), 200, np.uint8), np.eye(32, dtype=np.uint8) * 255
    assert cv2.imwrite(str(path), first)
    refs = References(path)
    assert refs.key("board.png") == pixel_fingerprint(first)
    stat = path.stat()
    with path.open("r+b") as f:  # in place: the same inode
        f.write(cv2.imencode(".bmp", second)[1].tobytes())
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert refs.key("board.png") == pixel_fingerprint(second)
