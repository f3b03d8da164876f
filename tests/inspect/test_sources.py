"""Frame sources: file ordering, corrupt files, video files, stream reconnects and latest-only dropping."""

from __future__ import annotations

import threading
from pathlib import Path

import cv2
import numpy as np
import pytest

from defect_detector.inspect.sources import FrameSource, ReconnectPolicy, open_source, source_kind


def _write_png(path: Path, value: int, shape: tuple[int, int] = (24, 32)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), np.full(shape, value, np.uint8))


def _write_video(path: Path, frames: int, shape: tuple[int, int] = (48, 64)) -> None:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10.0, (shape[1], shape[0]))
    assert writer.isOpened()
    for i in range(frames):
        image = np.full((*shape, 3), 20 * i % 256, np.uint8)
        writer.write(image)
    writer.release()


class FakeCapture:
    """A capture that yields ``frames`` BGR frames then fails (read returns False), or fails to open."""

    def __init__(self, frames: int, opened: bool = True, raise_on_read: bool = False, start: int = 0) -> None:
        self.remaining, self.opened, self.raise_on_read, self.value = frames, opened, raise_on_read, start
        self.released = False

    def isOpened(self) -> bool:  # noqa: N802 - OpenCV's name
        return self.opened

    def read(self) -> tuple[bool, np.ndarray | None]:
        if self.remaining <= 0:
            if self.raise_on_read:
                raise OSError("connection reset")
            return False, None
        self.remaining -= 1
        self.value += 1
        return True, np.full((6, 8, 3), self.value, np.uint8)

    def get(self, prop_id: int) -> float:
        return 25.0 if prop_id == cv2.CAP_PROP_FPS else 0.0

    def release(self) -> None:
        self.released = True


class FakeFactory:
    """Hands out the given captures in order, then captures that fail to open."""

    def __init__(self, captures: list[FakeCapture]) -> None:
        self.captures = list(captures)
        self.calls: list[object] = []

    def __call__(self, target: object) -> FakeCapture:
        self.calls.append(target)
        return self.captures.pop(0) if self.captures else FakeCapture(0, opened=False)


def test_source_kinds(tmp_path: Path) -> None:
    _write_png(tmp_path / "a.png", 1)
    (tmp_path / "notes.txt").write_text("x")
    assert source_kind("0") == "camera"
    assert source_kind("rtsp://camera.local/stream") == "stream"
    assert source_kind("http://host:8080/video") == "stream"
    assert source_kind(str(tmp_path)) == "folder"
    assert source_kind(str(tmp_path / "*.png")) == "glob"
    assert source_kind(str(tmp_path / "a.png")) == "image"
    with pytest.raises(FileNotFoundError):
        source_kind(str(tmp_path / "missing.png"))
    with pytest.raises(ValueError, match="unknown file type"):
        source_kind(str(tmp_path / "notes.txt"))
    with pytest.raises(ValueError, match="no image files"):
        open_source(str(tmp_path / "*.jpg"))


def test_folder_order_and_non_images_ignored(tmp_path: Path) -> None:
    for name, value in (("b.png", 2), ("a.png", 1), ("sub/a.png", 3), ("c.JPG", 4)):
        _write_png(tmp_path / name, value)
    (tmp_path / "labels.json").write_text("{}")
    (tmp_path / "sub" / "readme.md").write_text("x")
    with open_source(str(tmp_path)) as source:
        frames = list(source)
    assert [f.file_name for f in frames] == ["a.png", "b.png", "c.JPG", "sub/a.png"]
    assert [f.index for f in frames] == [0, 1, 2, 3]
    assert [int(f.image[0, 0]) for f in frames] == [1, 2, 4, 3]
    assert all(f.image.dtype == np.uint8 and f.image.ndim == 2 and f.error is None for f in frames)
    assert source.total == 4 and source.stats.frames == 4 and source.stats.skipped == 0

    with open_source(str(tmp_path / "**" / "*.png")) as source:
        assert [f.file_name for f in source] == ["a.png", "b.png", "sub/a.png"]


def test_corrupt_image_is_skipped_and_counted(tmp_path: Path) -> None:
    _write_png(tmp_path / "a.png", 1)
    (tmp_path / "b.png").write_bytes(b"\x89PNG not really")
    (tmp_path / "c.jpg").write_bytes(b"")
    _write_png(tmp_path / "d.png", 4)
    with open_source(str(tmp_path), queue_size=1) as source:
        frames = list(source)
    assert [f.file_name for f in frames] == ["a.png", "b.png", "c.jpg", "d.png"]
    assert [f.image is None for f in frames] == [False, True, True, False]
    assert "b.png" in frames[1].error and "c.jpg" in frames[2].error
    assert source.stats.skipped == 2 and source.stats.frames == 4


def test_video_file_read_end_to_end(tmp_path: Path) -> None:
    path = tmp_path / "clip.avi"
    _write_video(path, 5)
    with open_source(str(path)) as source:
        assert source.kind == "video" and not source.is_stream
        frames = list(source)
    assert [f.index for f in frames] == [0, 1, 2, 3, 4]
    assert all(f.image.shape == (48, 64) and f.image.dtype == np.uint8 for f in frames)
    assert all(f.file_name == "clip.avi" and f.error is None for f in frames)
    assert int(frames[3].image.mean()) == pytest.approx(60, abs=3)
    assert source.fps == pytest.approx(10.0)


def test_stream_failure_is_retried_with_backoff(caplog: pytest.LogCaptureFixture) -> None:
    # 3 frames, then the stream drops; the first reopen fails, the second yields 2 more frames; then nothing opens.
    factory = FakeFactory([FakeCapture(3), FakeCapture(0, opened=False), FakeCapture(2, raise_on_read=True, start=100)])
    source = FrameSource(
        "rtsp://fake",
        "stream",
        target="rtsp://fake",
        capture_factory=factory,
        reconnect=ReconnectPolicy(attempts=3, delay=0.001, max_delay=0.004),
    )
    with caplog.at_level("WARNING", logger="defect_detector.inspect"), source:
        frames = list(source)
    assert [f.index for f in frames] == [0, 1, 2, 3, 4]
    assert [int(f.image[0, 0]) for f in frames] == [1, 2, 3, 101, 102]
    stats = source.stats
    assert stats.reconnects == 1 and len(stats.gaps) == 1 and stats.gave_up
    assert stats.gaps[0].attempts == 2 and stats.gaps[0].seconds >= 0
    assert len(factory.calls) == 1 + 2 + 3  # first open, two tries for the gap, three before giving up
    assert "reconnect attempt" in caplog.text and "resumed after" in caplog.text and "giving up" in caplog.text


def test_camera_that_never_opens_gives_up() -> None:
    with open_source("3", capture_factory=FakeFactory([]), reconnect_attempts=2, reconnect_delay=0.001) as source:
        assert list(source) == []
    assert source.stats.gave_up and source.stats.frames == 0


def test_latest_only_keeps_the_newest_frame() -> None:
    exhausted = threading.Event()

    class Finite(FakeCapture):
        def read(self) -> tuple[bool, np.ndarray | None]:
            ok, image = super().read()
            if not ok:
                exhausted.set()
            return ok, image

    source = open_source("0", latest_only=True, capture_factory=FakeFactory([Finite(50)]), reconnect_attempts=0)
    received = []
    with source:
        for frame in source:
            received.append(frame.index)
            exhausted.wait(timeout=30)  # a slow consumer: the stream is over before it asks again
    assert received[-1] == 49
    assert source.stats.dropped == 50 - len(received) > 0


def test_consumer_can_stop_early(tmp_path: Path) -> None:
    for i in range(6):
        _write_png(tmp_path / f"{i}.png", i)
    with open_source(str(tmp_path), queue_size=1) as source:
        for frame in source:
            if frame.index == 1:
                break
    assert source._thread is not None and not source._thread.is_alive()


def test_truncated_video_warns_that_it_ended_early(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "clip.avi"
    _write_video(path, 30)
    with open_source(str(path)) as source:
        assert len(list(source)) == 30
    assert source.stats.expected_frames == 30 and not source.stats.ended_early
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 6 // 10])  # the file's header still says 30 frames
    with caplog.at_level("WARNING", logger="defect_detector.inspect"), open_source(str(path)) as source:
        read = len(list(source))
    assert 0 < read < 30 and source.stats.ended_early
    assert f"{path}: video ended after {read} of 30 frames (truncated or corrupt file?)" in caplog.text


def test_stopping_early_is_not_a_truncated_video(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "clip.avi"
    _write_video(path, 10)
    with caplog.at_level("WARNING", logger="defect_detector.inspect"), open_source(str(path), queue_size=1) as source:
        for frame in source:
            if frame.index == 2:
                break
    assert not source.stats.ended_early and "ended after" not in caplog.text


def test_colour_files_warn_once_per_source(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _write_png(tmp_path / "a_gray.png", 10)
    assert cv2.imwrite(str(tmp_path / "b_bgr_gray.png"), np.full((24, 32, 3), 50, np.uint8))  # gray stored as BGR
    for name in ("c_colour.png", "d_colour.png"):
        image = np.zeros((24, 32, 3), np.uint8)
        image[..., 2] = 200
        assert cv2.imwrite(str(tmp_path / name), image)
    with caplog.at_level("WARNING"), open_source(str(tmp_path)) as source:
        frames = list(source)
    assert all(f.image.ndim == 2 for f in frames)
    notes = [r for r in caplog.records if "converting" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelname == "WARNING" and "first: c_colour.png" in notes[0].getMessage()


class StallingCapture(FakeCapture):
    """Yields ``frames`` frames, then one read blocks ``stall_s`` seconds and fails (``fail``) or returns a frame."""

    def __init__(self, frames: int, stall_s: float, fail: bool) -> None:
        super().__init__(frames + (0 if fail else 2))
        self.left, self.stall_s, self.fail = frames, stall_s, fail

    def read(self) -> tuple[bool, np.ndarray | None]:
        if self.left == 0:
            self.left = -1
            threading.Event().wait(self.stall_s)
            if self.fail:
                return False, None
        self.left -= 1
        return super().read()


@pytest.mark.parametrize("fail", [True, False], ids=["read-fails-after-the-stall", "read-returns-after-the-stall"])
def test_a_stall_is_logged_with_its_real_length(fail: bool, caplog: pytest.LogCaptureFixture) -> None:
    stall = 0.4  # (a 30 s stall was logged as a "0.50 s gap": the reopen delay alone)
    factory = FakeFactory([StallingCapture(2, stall, fail), FakeCapture(1, start=50)])
    source = FrameSource(
        "rtsp://fake",
        "stream",
        target="rtsp://fake",
        capture_factory=factory,
        reconnect=ReconnectPolicy(attempts=1, delay=0.001, stall_s=0.3),
    )
    with caplog.at_level("WARNING", logger="defect_detector.inspect"), source:
        frames = list(source)
    assert [f.index for f in frames] == list(range(3 if fail else 5))
    gap = source.stats.gaps[0]  # (then the fake stream ends: a second gap that gives up)
    assert gap.seconds >= stall and gap.reason == ("read failed" if fail else "stalled: the read blocked")
    assert f"resumed after a {gap.seconds:.2f} s gap" in caplog.text


def test_a_stream_urls_password_never_reaches_a_frame_record() -> None:
    url = "rtsp://admin:S3cret@10.0.0.5/stream1?token=abc"
    source = FrameSource(url, "stream", target=url, capture_factory=FakeFactory([FakeCapture(2)]), reconnect=ReconnectPolicy(attempts=0))
    with source:
        frames = list(source)
    assert len(frames) == 2
    assert {f.source_name for f in frames} == {f.file_name for f in frames} == {"rtsp://***@10.0.0.5/stream1?token=***"}


def test_every_page_of_a_multi_page_tiff_is_a_frame(tmp_path: Path) -> None:
    """Issue 44: a 10-page TIFF was read as 1 frame, 9 boards never inspected. Each page is a frame now, named
    ``scan.tif#pageN`` from the second page, numbered in order with the files around it."""
    folder = tmp_path / "frames"
    folder.mkdir()
    pages = [np.full((40, 48), 20 * k, np.uint8) for k in range(10)]
    assert cv2.imwritemulti(str(folder / "b_scan.tif"), pages)
    assert cv2.imwrite(str(folder / "a.png"), pages[0]) and cv2.imwrite(str(folder / "c.png"), pages[1])
    with open_source(str(folder)) as source:
        frames = list(source)
    assert [f.file_name for f in frames] == ["a.png", "b_scan.tif", *(f"b_scan.tif#page{k}" for k in range(2, 11)), "c.png"]
    assert [f.index for f in frames] == list(range(12)) and all(f.error is None for f in frames)
    assert [int(f.image[0, 0]) for f in frames[1:11]] == [20 * k for k in range(10)]


def test_every_page_a_cut_tiff_promises_is_a_frame_and_the_unread_ones_are_not_inspected(tmp_path: Path) -> None:
    """Issue 58 item 4: a 10-page TIFF cut at 60% was inspected as 6 pages, the other 4 appeared nowhere, exit 0. Each
    page the file declares is a frame; those it cannot give are error frames naming the page and why, counted
    ``not_inspected``, and ``predict`` exits 3."""
    import json

    from defect_detector.cli.main import main

    folder = tmp_path / "frames"
    folder.mkdir()
    pages = [(np.random.default_rng(k).random((96, 128)) > 0.5).astype(np.uint8) * 255 for k in range(10)]
    assert cv2.imwritemulti(str(tmp_path / "scan.tif"), pages)
    data = (tmp_path / "scan.tif").read_bytes()
    (folder / "b_scan.tif").write_bytes(data[: int(len(data) * 0.6)])
    _write_png(folder / "c.png", 100, (96, 128))
    with open_source(str(folder)) as source:
        frames = list(source)
    assert [f.file_name for f in frames] == ["b_scan.tif", *(f"b_scan.tif#page{k}" for k in range(2, 11)), "c.png"]
    unread = [f.file_name for f in frames if f.error is not None]
    first = 11 - len(unread)  # the first page the cut file cannot give
    assert 2 <= first <= 10 and unread == [f"b_scan.tif#page{k}" for k in range(first, 11)] and source.stats.skipped == len(unread)
    assert all("the file ends at byte" in f.error for f in frames if f.error)  # cut short, page by page
    assert "page 10 of the 10 the file declares cannot be read: the file ends at byte" in frames[9].error

    out = tmp_path / "det.json"
    argv = ["predict", str(folder), "--device", "cpu", "--threads", "1", "--no-monitor", "--save-json", str(out)]
    assert main(argv) == 3  # some frames not inspected (it was 0)
    records = {r["file_name"]: r for r in json.loads(out.read_text())}
    assert len(records) == 11 and [records[n]["verdict"] for n in unread] == ["not_inspected"] * len(unread)
