"""What ``predict`` writes: ``--save-json`` (one record per frame, plus a JSONL line per frame as it goes, for every
source: a folder run killed with -9 leaves its frames too), ``--report`` (a CSV row per frame, as it goes), and
``--save-dir`` (annotated images, or one annotated ``.mp4``).

Every frame of the source has its record, whatever happened to it: ``{"file_name", "frame", "verdict", "reason",
"drift", "design_warning", "design_taught", "registration", "working_scale", "calls": [{"category_name", "bbox": [x, y, w, h], "score"}],
"dropped", "merged", "tolerated", "off_area", "weights"}``
with ``verdict`` ``pass``, ``pass_suspect`` (no call, under a critical drift alert or with an untaught look), ``fail`` or ``not_inspected``
(``reason`` says why), ``bbox`` in the frame's original pixels and ``dropped`` the calls the ``max_det`` cap cut
(``merged``: those merged into a better call on the same defect, ``model/postprocess.py`` ``merge_nested``;
``tolerated``: those its design's tolerance map dropped, ``teach --good``, ``inspect/tolerance.py``; ``off_area``: those
off its design's inspection area, ``align/inspection_area.py``;
``weights``: the file name of the weights that inspected it, chosen per design with the bundled ones). So
"clean", "not inspected" and "not processed" can never look alike. ``design_warning``: the frame's golden image looks
unlike the model's training images (``inspect/design_check.py``: a warning, the frame is inspected as before), else
null; ``design_taught``: whether the weights were taught the frame's golden image (``teach``; never warned about);
``registration``: how its golden image sat in the frame (``shift`` px, ``angle`` degrees, ``score``, the golden check's
``difference`` and ``spread``, ``reused``: the fixture's cached matrix), null without one; ``working_scale``: the
frame's design showed this many times coarser than the weights were validated at and was inspected downscaled to it
(``inspect/design_scale.py``; 1.0: as given; a design finer than validated is named in ``design_warning``).
``json_layout="detections"`` writes v0.8's flat list of calls instead (for scripts that read it). A frame that was
not inspected is stamped NOT INSPECTED with its reason in ``--save-dir``, an inspected one PASS, FAIL or PASS SUSPECT
(``inspect/annotated_image.py``).

Every file is written to a temporary name and renamed into place when complete, so an interrupted run never leaves
a half-written output, and a run that fails (:meth:`Outputs.discard`) never replaces the results of an earlier one:
its temporary files are removed. While a run goes (and after it is killed) the previous run's files wait as
``NAME.previous.SUFFIX`` and the annotated images it writes are listed in ``DIR/annotated.unfinished.txt``
(``inspect/previous_run.py``): a run that did not finish is never taken for a finished one. A full disk under one output
stops that output alone (:class:`Outputs`).
"""

from __future__ import annotations

import csv
import errno
import io
import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import cv2
import numpy as np

from defect_detector.core.io import atomic_write_bytes
from defect_detector.core.safe_text import csv_cell
from defect_detector.inspect.annotated_image import annotated_image
from defect_detector.inspect.output_paths import jsonl_path, video_path
from defect_detector.inspect.previous_run import FINISHED_LIST, UNFINISHED_LIST, PreviousOutputs, clear_finished
from defect_detector.inspect.record import Inspection, csv_header
from defect_detector.inspect.run_guard import run_temp_name
from defect_detector.inspect.sources import FrameSource

JSON_LAYOUTS = ("frames", "detections")

log = logging.getLogger("defect_detector.inspect")

_DEFAULT_VIDEO_FPS = 10.0
_FSYNC_S = 1.0  # the per-frame JSONL is fsynced at least this often


class _Stream:
    """One output written a line per frame: a temp file beside ``path`` (``tmp``, default the hidden
    :func:`run_temp_name`), flushed every line and fsynced at least every :data:`_FSYNC_S`, renamed into place by
    :meth:`finish`. A killed run leaves the temp file, which the next run recovers (``inspect/run_guard.py``)."""

    def __init__(self, path: Path, header: str = "", tmp: Path | None = None) -> None:
        self.path = path
        self.tmp = tmp or run_temp_name(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file: TextIO | None = self.tmp.open("w", encoding="utf-8", newline="")
        self.synced = time.monotonic()
        if header:
            self.write(header)

    def write(self, text: str) -> None:
        assert self.file is not None
        self.file.write(text)
        self.file.flush()
        if time.monotonic() - self.synced >= _FSYNC_S:  # durable as it goes: a power loss costs at most ~1 s
            os.fsync(self.file.fileno())
            self.synced = time.monotonic()

    def finish(self) -> None:
        assert self.file is not None
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        self.file = None
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        """Close (ignoring a failing close: the disk may be full) and remove the temp file."""
        self.leave()
        self.tmp.unlink(missing_ok=True)

    def leave(self) -> None:
        """Close, leaving the temp file where it is (ignoring a failing close: the disk may be full)."""
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass
            self.file = None


class Outputs:
    """``--save-json`` (written atomically at the end, plus a JSONL line per frame as it goes, any source),
    ``--report`` (CSV, a row per frame as it goes) and ``--save-dir`` (annotated images with the source's relative
    names, or one annotated ``.mp4`` for video and stream sources). The JSONL, the CSV and the video are written to
    hidden temp files beside their destinations (``.NAME.<run>.tmp.jsonl``, ``.tmp.csv``, ``.tmp.mp4``) and renamed
    into place by :meth:`close`; :meth:`discard` (a failed run) removes them and leaves any earlier outputs as they were.

    One output that cannot be written (a full disk, an I/O error: any ``OSError``) stops alone: it is logged in one
    WARNING line, its temp file removed, the line kept in :attr:`failed` (by kind), and the others go on and are
    finished. ``predict`` exits non-zero when any output failed."""

    def __init__(
        self,
        source: FrameSource,
        class_names: Sequence[str],
        save_json: str | None,
        save_dir: str | None,
        report: str | None = None,
        json_layout: str = "frames",
    ) -> None:
        if json_layout not in JSON_LAYOUTS:
            raise ValueError(f"--json-layout must be one of {', '.join(JSON_LAYOUTS)}, got {json_layout!r}")
        self.source = source
        self.class_names = list(class_names)
        self.per_frame = source.kind in ("video", "camera", "stream")
        self.save_json = Path(save_json) if save_json else None
        self.save_dir = Path(save_dir) if save_dir else None
        self.report = Path(report) if report else None
        self.json_layout = json_layout
        self.frames = 0  # records added (the JSON is written from the JSONL at the end: nothing held per frame)
        self.written: dict[str, str] = {}  # what close() wrote, by kind
        self.failed: dict[str, str] = {}  # outputs that stopped, by kind (json, jsonl, report, images): the line that said so
        self.closed = False
        self.video: cv2.VideoWriter | None = None
        self.video_path: Path | None = None
        self.video_tmp: Path | None = None
        self.video_size: tuple[int, int] | None = None
        self.streams: dict[str, _Stream] = {}
        self.image_list: _Stream | None = None  # the annotated images written, a line each (not for a video)
        self.previous = PreviousOutputs()
        try:
            if self.save_json:
                self.streams["jsonl"] = _Stream(jsonl_path(self.save_json))
            if self.report:
                self.streams["report"] = _Stream(self.report, _csv_line(csv_header(self.class_names)))
            self._begin()
        except BaseException:  # one that cannot be opened: no temp file of the others is left behind
            self.discard()
            raise

    def _begin(self) -> None:
        """The run starts writing: the previous run's files are moved aside (``NAME.previous.SUFFIX``), the images a
        finished run listed in ``--save-dir`` removed, and this run's list of images opened (``inspect/previous_run.py``)."""
        if self.save_json is not None:
            self.previous.retire("json", self.save_json)
            self.previous.retire("jsonl", jsonl_path(self.save_json))
        if self.report is not None:
            self.previous.retire("report", self.report)
        if self.save_dir is not None and self.per_frame:
            self.previous.retire("images", video_path(self.save_dir, self.source.kind, self.source.source))
        elif self.save_dir is not None:
            cleared = clear_finished(self.save_dir)
            if cleared:
                log.info("%s: the %d annotated images of the previous run removed (this run's replace them)", self.save_dir, cleared)
            self.image_list = _Stream(self.save_dir / FINISHED_LIST, tmp=self.save_dir / UNFINISHED_LIST)

    def add(self, inspection: Inspection) -> None:
        """Record one :class:`~defect_detector.inspect.inspector.Inspection` in every requested output still going."""
        record = inspection.to_json() | ({"timestamp": inspection.frame.timestamp} if self.per_frame else {})
        self.frames += 1
        lines = {"jsonl": lambda: json.dumps(record) + "\n", "report": lambda: _csv_line(inspection.csv_row(self.class_names))}
        for kind, stream in list(self.streams.items()):
            try:
                stream.write(lines[kind]())
            except OSError as exc:
                self._lost(kind, exc, self.frames - 1)
        if self.save_dir is not None and "images" not in self.failed:
            annotated = annotated_image(inspection, self.class_names)
            try:
                if self.per_frame:
                    self._write_video_frame(annotated)
                else:
                    self._write_image(inspection.frame.file_name, annotated)
            except OSError as exc:
                self._lost("images", exc, self.frames - 1)

    def _lost(self, kind: str, exc: OSError, done: int | None = None) -> None:
        """Stop the output ``kind`` (a key of :data:`_FLAGS`) after ``exc``, when it held ``done`` frames (None: while
        finishing it, so nothing of it is written): one WARNING line, its temp file removed."""
        flag = _FLAGS[kind]
        stream = self.streams.pop(kind, None)
        if stream is not None:
            stream.discard()
        if kind == "images" and self.video is not None:
            self.video.release()
            self.video = None
            if self.video_tmp is not None:
                self.video_tmp.unlink(missing_ok=True)
        if kind == "images" and self.image_list is not None:
            self.image_list.leave()  # its images stay, listed as an unfinished run's
            self.image_list = None
        self.previous.restore(kind)  # the previous run's file is back where this one would have been
        where = exc.filename or (stream.path if stream is not None else self.save_dir)
        why = exc.strerror or str(exc)
        what = "not written" if done is None else f"this output stopped after {done} frames"
        self.failed[kind] = f"{flag} {where}: {why}: {what}; the other outputs go on"
        log.warning("%s", self.failed[kind])

    def _write_image(self, name: str, image: np.ndarray) -> None:
        path = self.save_dir / name
        ok, encoded = cv2.imencode(path.suffix or ".png", image)
        if not ok:
            path = path.with_suffix(".png")
            ok, encoded = cv2.imencode(".png", image)
        if not ok:
            raise ValueError(f"{path}: cannot encode the annotated image")
        if self.image_list is not None:  # listed first: a killed run's list names every image it left
            self.image_list.write(f"{path.relative_to(self.save_dir).as_posix()}\n")
        atomic_write_bytes(path, encoded.tobytes())

    def _write_video_frame(self, image: np.ndarray) -> None:
        height, width = image.shape[:2]
        if self.video is None:
            self.video_path = video_path(self.save_dir, self.source.kind, self.source.source)
            self.video_tmp = run_temp_name(self.video_path)
            self.video_path.parent.mkdir(parents=True, exist_ok=True)
            fps = self.source.fps or _DEFAULT_VIDEO_FPS
            self.video = cv2.VideoWriter(str(self.video_tmp), cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
            if not self.video.isOpened():
                raise ValueError(f"{self.video_path}: cannot open an mp4 (mp4v) video writer")
            self.video_size = (width, height)
        if (width, height) != self.video_size:
            image = cv2.resize(image, self.video_size, interpolation=cv2.INTER_AREA)
        self.video.write(image)

    def close(self) -> dict[str, str]:
        """Finish every output still going (renaming the JSONL, the CSV and the video into place), each on its own: one
        that cannot be finished (``OSError``: a full disk) is logged and kept in :attr:`failed`, the others are
        finished. Returns the written paths by kind. Any other error discards the unfinished temp files and is
        raised. Idempotent."""
        if self.closed:
            return {}
        written: dict[str, str] = {}
        try:
            if self.save_json is not None:
                self._finish("json", lambda: atomic_write_bytes(self.save_json, self._json()), self.save_json, written)
            for kind, stream in list(self.streams.items()):
                self._finish(kind, stream.finish, stream.path, written)
            if self.video is not None:
                self._finish("images", self._finish_video, self.video_path, written)
            if self.image_list is not None:
                self.image_list.finish()  # annotated.unfinished.txt -> annotated.txt: the folder holds a finished run
                self.image_list = None
        except BaseException:
            self.discard()
            raise
        self.streams = {}
        self.closed = True
        if self.save_dir is not None and "video" not in written and "images" not in self.failed:
            written["images"] = str(self.save_dir)
        self.written = written
        return written

    def _finish(self, kind: str, finish: Any, path: Path, written: dict[str, str]) -> None:
        try:
            finish()
        except OSError as exc:
            self._lost(kind, exc)
            return
        self.previous.drop(kind)
        written["video" if kind == "images" else kind] = str(path)

    def _finish_video(self) -> None:
        assert self.video is not None and self.video_tmp is not None and self.video_path is not None
        self.video.release()
        self.video = None
        os.replace(self.video_tmp, self.video_path)

    def discard(self) -> None:
        """A failed run: close and remove the temp JSONL, CSV and video, and put the previous run's files back (annotated
        images already written stay, listed as an unfinished run's). Later :meth:`close` calls write nothing."""
        self.closed = True
        for stream in self.streams.values():
            stream.discard()
        self.streams = {}
        if self.image_list is not None:
            self.image_list.leave()
            self.image_list = None
        self.previous.restore()
        if self.video is not None:
            self.video.release()
            self.video = None
        if self.video_tmp is not None:
            self.video_tmp.unlink(missing_ok=True)

    def _json(self) -> Iterator[bytes]:
        """What ``--save-json`` holds, a JSON array written chunk by chunk from the run's JSONL (issue 44: the records
        were held in memory, 2-4 KB a frame), one item a line: the frame records as the JSONL holds them, each
        serialised once (a live source's keep their timestamp), or (layout ``detections``) v0.8's flat list of calls,
        read back from them. ``OSError`` when the JSONL stopped (a full disk), so the JSON is not written either."""
        stream = self.streams.get("jsonl")
        if stream is None:
            raise OSError(errno.EIO, "its JSONL stopped earlier, so the frames it holds are not complete", str(self.save_json))
        first = True
        with stream.tmp.open(encoding="utf-8") as lines:
            for line in lines:
                items = [line.rstrip("\n")] if self.json_layout == "frames" else [json.dumps(i) for i in self._calls(json.loads(line))]
                for item in items:
                    yield (("[\n  " if first else ",\n  ") + item).encode("utf-8")
                    first = False
        yield b"[]\n" if first else b"\n]\n"

    def _calls(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        """The ``--save-json`` items of one JSONL record in layout ``detections``: its calls, each with its file name."""
        extra = {"frame": record["frame"]} if self.per_frame else {}
        return [{"file_name": record["file_name"], **call, **extra} for call in record["calls"]]


_FLAGS = {"json": "--save-json", "jsonl": "--save-json", "report": "--report", "images": "--save-dir"}
"""The flag of each output kind (the JSON and its JSONL are both ``--save-json``'s)."""


def _csv_line(cells: Sequence[Any]) -> str:
    """One CSV line, every cell escaped against formulas (:func:`~defect_detector.core.safe_text.csv_cell`)."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow([csv_cell(v) for v in cells])
    return buffer.getvalue()
