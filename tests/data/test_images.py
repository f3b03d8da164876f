"""Tests for defect_detector.data.images: reading image files as single-channel uint8."""

import logging
from pathlib import Path

import cv2
import numpy as np
import pytest

from defect_detector.core.errors import DatasetError
from defect_detector.data.images import IMAGE_SUFFIXES, ConversionNotice, decode_gray, has_colour, load_image_gray, to_gray_uint8

H, W = 48, 64


def _image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(H, W), dtype=np.uint8)


def test_to_gray_uint8_and_load_image_gray(tmp_path: Path) -> None:
    gray = _image(3)
    out, kinds = to_gray_uint8(gray[:, :, None])
    assert kinds == [] and out.shape == (H, W)
    out, kinds = to_gray_uint8((gray.astype(np.uint16) * 257)[:, :, None].repeat(3, axis=2))
    assert kinds == ["colour", "16-bit:16"] and out.dtype == np.uint8
    np.testing.assert_array_equal(out, gray)
    with pytest.raises(DatasetError, match="unsupported pixel type"):
        to_gray_uint8(gray.astype(np.float32))
    path = tmp_path / "x.png"
    cv2.imwrite(str(path), gray)
    np.testing.assert_array_equal(load_image_gray(path), gray)
    with pytest.raises(DatasetError, match="absent.png"):
        load_image_gray(tmp_path / "absent.png")


def test_to_gray_uint8_channels_and_shapes() -> None:
    gray = _image(4)
    out, kinds = to_gray_uint8(np.stack([gray, np.full_like(gray, 255)], axis=2))
    assert kinds == ["alpha"]
    np.testing.assert_array_equal(out, gray)
    bgra = np.concatenate([np.repeat(gray[:, :, None], 3, axis=2), np.full((H, W, 1), 255, np.uint8)], axis=2)
    out, kinds = to_gray_uint8(bgra)
    assert kinds == ["colour", "alpha"]
    np.testing.assert_array_equal(out, gray)
    assert out.flags["C_CONTIGUOUS"]
    with pytest.raises(DatasetError, match="number of channels: 5"):
        to_gray_uint8(np.zeros((H, W, 5), np.uint8))
    with pytest.raises(DatasetError, match="unsupported image shape"):
        to_gray_uint8(np.zeros(H, np.uint8))


def test_decode_gray_names_the_file_for_each_failure(tmp_path: Path) -> None:
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    with pytest.raises(DatasetError, match="empty.png: zero-byte image file"):
        decode_gray(empty)
    ok, jpeg = cv2.imencode(".jpg", _image(5))
    assert ok
    truncated = tmp_path / "cut.jpg"
    truncated.write_bytes(jpeg.tobytes()[: len(jpeg) // 2])
    with pytest.raises(DatasetError, match="cut.jpg: truncated JPEG"):
        decode_gray(truncated)
    garbage = tmp_path / "garbage.png"
    garbage.write_bytes(b"not an image at all")
    with pytest.raises(DatasetError, match="garbage.png: corrupt or unsupported image"):
        decode_gray(garbage)
    wide = tmp_path / "float.tiff"
    cv2.imwrite(str(wide), _image(6).astype(np.float32))
    with pytest.raises(DatasetError, match="float.tiff: unsupported pixel type"):
        decode_gray(wide)


def test_decode_gray_reports_conversions(tmp_path: Path) -> None:
    gray = _image(7)
    path = tmp_path / "colour16.png"
    cv2.imwrite(str(path), (np.repeat(gray[:, :, None], 3, axis=2).astype(np.uint16) * 257))
    image, kinds = decode_gray(path)
    assert kinds == ["colour", "16-bit:16"]
    np.testing.assert_array_equal(image, gray)


@pytest.mark.parametrize("suffix", [".png", ".bmp", ".jpg", ".tif", ".webp", ".pgm"])
def test_image_suffixes_round_trip_through_opencv(tmp_path: Path, suffix: str) -> None:
    """Every pixel comes back where it was: exactly, except JPEG's (quality 100: within 3 levels on a smooth ramp)."""
    assert suffix in IMAGE_SUFFIXES
    rows, cols = np.mgrid[0:H, 0:W]
    gray = (rows * 3 + cols * 2).astype(np.uint8)  # no symmetry: a flip, a transpose or a dropped row shows
    path = tmp_path / f"board{suffix}"
    assert cv2.imwrite(str(path), gray, [cv2.IMWRITE_JPEG_QUALITY, 100, cv2.IMWRITE_WEBP_QUALITY, 101])  # webp > 100: lossless
    loaded = load_image_gray(path)
    assert loaded.dtype == np.uint8 and loaded.shape == (H, W)
    if suffix == ".jpg":
        np.testing.assert_allclose(loaded, gray, atol=3)
    else:
        np.testing.assert_array_equal(loaded, gray)


def test_image_suffixes_are_lowercase_and_exclude_video_and_float_formats() -> None:
    assert isinstance(IMAGE_SUFFIXES, frozenset)
    assert all(s.startswith(".") and s == s.lower() for s in IMAGE_SUFFIXES)
    assert not IMAGE_SUFFIXES & {".gif", ".mp4", ".hdr", ".pfm", ".exr"}


def test_has_colour_tells_colour_from_gray_stored_as_bgr() -> None:
    gray = _image(8)
    bgr = cv2.cvtColor(gray, cv2.COLOR_GRAY2BGR)
    assert not has_colour(gray) and not has_colour(bgr) and not has_colour(gray[:, :, None])
    ok, jpeg = cv2.imencode(".jpg", bgr)  # a lossy codec leaves the channels a few levels apart
    assert ok and not has_colour(cv2.imdecode(jpeg, cv2.IMREAD_COLOR))
    tinted = bgr.copy()
    tinted[::4, ::4, 2] = 255 - tinted[::4, ::4, 2]
    assert has_colour(tinted) and has_colour(cv2.cvtColor(tinted, cv2.COLOR_BGR2BGRA))
    assert not has_colour(bgr.astype(np.uint16) * 257) and has_colour(tinted.astype(np.uint16) * 257)


def test_conversion_notice_warns_once_per_kind(caplog: pytest.LogCaptureFixture) -> None:
    notice = ConversionNotice("line3/")
    gray_bgr = cv2.cvtColor(_image(9), cv2.COLOR_GRAY2BGR)
    colour = gray_bgr.copy()
    colour[..., 0] = 0
    with caplog.at_level(logging.WARNING, logger="defect_detector.data"):
        notice.note(gray_bgr, ["colour"], "a.png")  # gray content: no warning
        notice.note(colour, ["colour"], "b.png")
        notice.note(colour, ["colour"], "c.png")
        notice.note(colour, ["colour", "16-bit:12"], "d.png")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and all(r.levelno == logging.WARNING for r in caplog.records)
    assert messages[0].startswith("line3/: converting colour input to 8-bit grayscale") and "first: b.png" in messages[0]
    assert "16-bit (12-bit data) scaled to 8-bit" in messages[1] and "first: d.png" in messages[1]
    assert notice.warned == {"colour", "16-bit:12"}


def test_a_file_name_the_os_rejects_is_a_dataset_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cannot read image file"):
        decode_gray(tmp_path / "a\x00.png")


@pytest.mark.parametrize("bits", [8, 10, 12, 14, 16])
def test_16_bit_containers_are_scaled_by_their_real_depth(bits: int) -> None:
    """v0.8 scaled every uint16 image by 255/65535: 10- and 12-bit camera data came out near black (0 detections)."""
    gray = _image(11)
    gray[0, 0] = 255  # the full range is used
    wide = (gray.astype(np.float64) * (2**bits - 1) / 255).round().astype(np.uint16)
    out, kinds = to_gray_uint8(wide)
    assert kinds == [f"16-bit:{bits}"]
    np.testing.assert_allclose(out.astype(int), gray.astype(int), atol=1)


def test_a_corrupt_jpeg_that_still_decodes_is_refused(tmp_path: Path) -> None:
    """A zeroed middle with an intact end marker decodes to a half-grey board; libjpeg's complaint makes it unreadable."""
    ok, encoded = cv2.imencode(".jpg", _image(5))
    data = bytearray(encoded.tobytes())
    data[len(data) // 3 : len(data) // 2] = bytes(len(data) // 2 - len(data) // 3)
    path = tmp_path / "corrupt.jpg"
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=r"corrupt.jpg: corrupt JPEG data \(libjpeg: Corrupt JPEG data"):
        decode_gray(path)
    assert decode_gray(_good_jpeg(tmp_path))[0].shape == (H, W)


def _good_jpeg(folder: Path) -> Path:
    path = folder / "good.jpg"
    assert cv2.imwrite(str(path), _image(6))
    return path


def _header_bomb(path: Path) -> None:
    """A 700-byte PNG whose header claims 65535x65535 pixels."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = chunk(b"IHDR", struct.pack(">IIBBBBB", 65535, 65535, 8, 0, 0, 0, 0))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + header + chunk(b"IDAT", zlib.compress(b"\x00" * 600)) + chunk(b"IEND", b""))


def test_a_header_bomb_is_refused_from_its_header_in_words(tmp_path: Path) -> None:
    """Issue 44: OpenCV's CV_IO_MAX_IMAGE_PIXELS assertion escaped as a cv2.error traceback and ended the run."""
    _header_bomb(tmp_path / "bomb.png")
    with pytest.raises(DatasetError, match=r"bomb\.png: image too large: its header claims more than 2\^30 pixels"):
        load_image_gray(tmp_path / "bomb.png")


def test_a_header_bomb_in_a_folder_costs_only_itself(tmp_path: Path) -> None:
    """The frames after it are inspected, it is counted not inspected with its reason, and the outputs are written."""
    import json

    from defect_detector.cli.main import main

    frames = tmp_path / "frames"
    frames.mkdir()
    board = (np.random.default_rng(0).random((96, 128)) > 0.5).astype(np.uint8) * 255
    for name in ("a.png", "c.png"):
        assert cv2.imwrite(str(frames / name), board)
    _header_bomb(frames / "b.png")
    out = tmp_path / "r.json"
    assert main(["predict", str(frames), "--device", "cpu", "--threads", "1", "--no-monitor", "--save-json", str(out)]) == 3
    records = {r["file_name"]: r for r in json.loads(out.read_text())}
    assert set(records) == {"a.png", "b.png", "c.png"} and records["c.png"]["verdict"] != "not_inspected"
    assert records["b.png"]["verdict"] == "not_inspected" and "image too large" in records["b.png"]["reason"]


def _tiff_directories(data: bytes) -> list[int]:
    """The byte offsets of a little-endian classic TIFF's page directories, in chain order."""
    import struct

    offsets, offset = [], struct.unpack_from("<I", data, 4)[0]
    while offset:
        offsets.append(offset)
        entries = struct.unpack_from("<H", data, offset)[0]
        offset = struct.unpack_from("<I", data, offset + 2 + 12 * entries)[0]
    return offsets


def _ten_page_tiff(path: Path) -> tuple[list[np.ndarray], bytes]:
    pages = [np.random.default_rng(k).integers(0, 256, (60, 80), np.uint8) for k in range(10)]
    assert cv2.imwritemulti(str(path), pages)
    return pages, path.read_bytes()


@pytest.mark.parametrize("damage", ["cut at 60%", "corrupt directory of page 5", "cut, no page count"])
def test_every_page_a_damaged_tiff_cannot_give_is_an_error_in_its_place(tmp_path: Path, damage: str) -> None:
    """Issue 58 item 4: a 10-page TIFF cut at 60% gave 6 pages, one with a corrupt page directory 4, the rest nowhere.
    ``read_pages`` gives every page the file's directories promise: those it holds, in order, and for each it cannot
    give a ``DatasetError`` naming the page and why. Without a page count (no PageNumber tag), one error stands for the
    pages from the first missing one on."""
    from defect_detector.data.images import read_pages

    pages, data = _ten_page_tiff(tmp_path / "scan.tif")
    directories = _tiff_directories(data)
    if damage == "corrupt directory of page 5":
        data = data[: directories[4]] + b"\xff\xff" + data[directories[4] + 2 :]
    else:
        data = data[: int(len(data) * 0.6)]
    if damage == "cut, no page count":  # tag 297 (PageNumber) renamed 298, an unknown tag: the file no longer says how many
        data = data.replace(b"\x29\x01\x03\x00\x02\x00\x00\x00", b"\x2a\x01\x03\x00\x02\x00\x00\x00")
    (tmp_path / "scan.tif").write_bytes(data)
    got = read_pages(tmp_path / "scan.tif")
    readable = [p for p in got if isinstance(p, np.ndarray)]
    errors = [p for p in got if isinstance(p, DatasetError)]
    assert len(readable) + len(errors) == len(got) and got[: len(readable)] == readable  # the pages it holds first, in order
    for page, want in zip(readable, pages):
        np.testing.assert_array_equal(page, want)
    if damage == "cut, no page count":
        assert len(got) == len(readable) + 1
        assert str(errors[0]).startswith(f"{tmp_path / 'scan.tif'}#page{len(readable) + 1}: the pages from {len(readable) + 1} on")
        assert "how many is unknown" in str(errors[0]) and "the file ends at byte" in str(errors[0])
        return
    assert len(got) == 10 and len(readable) == (4 if damage.startswith("corrupt") else 6)
    first = len(readable) + 1
    assert [str(e).split(":")[0] for e in errors] == [f"{tmp_path / 'scan.tif'}#page{k}" for k in range(first, 11)]
    why = "page 5's directory is corrupt" if damage.startswith("corrupt") else f"the file ends at byte {len(data)}, before page {first}'s"
    assert all(f"page {k} of the 10 the file declares cannot be read: " in str(e) for k, e in zip(range(first, 11), errors))
    assert all(why in str(e) and "\n" not in str(e) for e in errors)


def test_an_intact_or_single_page_tiff_reads_as_before(tmp_path: Path) -> None:
    from defect_detector.data.images import read_pages

    pages, _ = _ten_page_tiff(tmp_path / "scan.tif")
    got = read_pages(tmp_path / "scan.tif")
    assert len(got) == 10 and all(np.array_equal(a, b) for a, b in zip(got, pages))
    assert cv2.imwrite(str(tmp_path / "one.tif"), pages[0])
    (one,) = read_pages(tmp_path / "one.tif")
    np.testing.assert_array_equal(one, pages[0])
    (tmp_path / "cut.tif").write_bytes((tmp_path / "one.tif").read_bytes()[:100])
    with pytest.raises(DatasetError, match="cut.tif: corrupt or unsupported image"):
        read_pages(tmp_path / "cut.tif")


def test_one_lister_of_image_files_in_a_folder(tmp_path: Path) -> None:
    """Issue 57 item 5: golden images, good boards, dataset folders and folder sources are listed by one function:
    every image suffix in any case, sorted, files only, subfolders when asked."""
    from defect_detector.data.images import image_files

    (tmp_path / "sub").mkdir()
    (tmp_path / "dir.png").mkdir()  # a folder named like an image is no image
    for name in ("b.PNG", "a.jpg", "c.webp", "notes.txt", "sub/d.tif"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in image_files(tmp_path)] == ["a.jpg", "b.PNG", "c.webp"]
    assert [p.relative_to(tmp_path).as_posix() for p in image_files(tmp_path, recursive=True)] == ["a.jpg", "b.PNG", "c.webp", "sub/d.tif"]
