"""What ``predict`` writes: ``--save-json`` (one record per frame, plus per-frame JSONL for video and streams),
``--report`` (a CSV row per frame), and ``--save-dir`` (annotated images, or one annotated ``.mp4``).

Every frame of the source has its record, whatever happened to it: ``{"file_name", "frame", "verdict", "reason",
"drift", "calls": [{"category_name", "bbox": [x, y, w, h], "score"}], "dropped"}`` with ``verdict`` ``pass``,
``pass_suspect`` (no call, under a critical drift alert), ``fail`` or ``not_inspected`` (``reason`` says why), ``bbox``
in the frame's original pixels and ``dropped`` the calls the ``max_det`` cap cut. So "clean", "not inspected" and "not
processed" can never look alike.
``json_layout="detections"`` writes v0.8's flat list of calls instead (for scripts that read it). A frame that was
not inspected is stamped NOT INSPECTED with its reason in ``--save-dir``.

Every file is written to a temporary name and renamed into place when complete, so an interrupted run never leaves
a half-written output, and a run that fails (:meth:`Outputs.discard`) never replaces the results of an earlier one:
its temporary files are removed.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import cv2
import numpy as np
from torchvision.ops import box_convert

from defect_detector.core.io import atomic_write_bytes, atomic_write_json, atomic_write_text
from defect_detector.core.types import Detections
from defect_detector.data.draw import draw_detections, stamp
from defect_detector.inspect.run_guard import run_temp_name
from defect_detector.inspect.sources import FrameSource

VERDICTS = ("pass", "pass_suspect", "fail", "not_inspected")
JSON_LAYOUTS = ("frames", "detections")
_PLACEHOLDER = (240, 640)  # size of the stamped image that stands in for a frame that could not be read

_DEFAULT_VIDEO_FPS = 10.0
_FSYNC_S = 1.0  # the per-frame JSONL is fsynced at least this often


def call_records(result: Detections | None) -> list[dict[str, Any]]:
    """The calls of one frame: ``{"category_name", "bbox": [x, y, w, h], "score"}``, ``bbox`` in the frame's original
    pixels (COCO xywh, rounded to 0.01 px); none for a frame that was not inspected."""
    if result is None:
        return []
    xywh = box_convert(result.boxes, "xyxy", "xywh").tolist()
    return [
        {"category_name": name, "bbox": [round(v, 2) for v in box], "score": round(score, 5)}
        for box, name, score in zip(xywh, result.names, result.scores.tolist())
    ]


def frame_record(inspection: Any) -> dict[str, Any]:
    """The ``--save-json`` record of one :class:`~defect_detector.inspect.inspector.Inspection` (see the module docstring)."""
    frame, result = inspection.frame, inspection.detections
    return {
        "file_name": frame.file_name,
        "frame": frame.index,
        "verdict": inspection.verdict,
        "reason": inspection.reason,
        "drift": inspection.drift,
        "calls": call_records(result),
        "dropped": result.dropped if result is not None else 0,
    }


class Outputs:
    """``--save-json`` (written atomically at the end; plus a JSONL line per frame, flushed, for video and stream
    sources), ``--report`` (CSV, at the end) and ``--save-dir`` (annotated images with the source's relative names, or
    one annotated ``.mp4`` for video and stream sources). The JSONL and the video are written to hidden temp files
    beside their destinations (``.NAME.<run>.tmp.jsonl``, ``.NAME.<run>.tmp.mp4``) and renamed into place by
    :meth:`close`; :meth:`discard` (a failed run) removes them and leaves any earlier outputs as they were."""

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
        self.records: list[dict[str, Any]] = []
        self.written: dict[str, str] = {}  # what close() wrote, by kind
        self.jsonl: TextIO | None = None
        self.jsonl_path: Path | None = None
        self.jsonl_tmp: Path | None = None
        self.closed = False
        self.synced = time.monotonic()
        if self.save_json and self.per_frame:
            self.jsonl_path = self.save_json.with_suffix(".jsonl")
            self.jsonl_tmp = _temp_name(self.jsonl_path)
            self.jsonl_path.parent.mkdir(parents=True, exist_ok=True)
            self.jsonl = self.jsonl_tmp.open("w", encoding="utf-8")
        self.video: cv2.VideoWriter | None = None
        self.video_path: Path | None = None
        self.video_tmp: Path | None = None
        self.video_size: tuple[int, int] | None = None

    def add(self, inspection: Any) -> None:
        """Record one :class:`~defect_detector.inspect.inspector.Inspection` in every requested output."""
        record = frame_record(inspection)
        record["timestamp"] = inspection.frame.timestamp
        self.records.append(record)
        if self.jsonl is not None:
            self.jsonl.write(json.dumps(record) + "\n")
            self.jsonl.flush()
            if time.monotonic() - self.synced >= _FSYNC_S:  # durable as it goes: a power loss costs at most ~1 s
                os.fsync(self.jsonl.fileno())
                self.synced = time.monotonic()
        if self.save_dir is not None:
            annotated = self._annotated(inspection)
            if self.per_frame:
                self._write_video_frame(annotated)
            else:
                self._write_image(inspection.frame.file_name, annotated)

    def _annotated(self, inspection: Any) -> np.ndarray:
        """The frame with its calls drawn, or stamped NOT INSPECTED with the reason (a stamped placeholder when the
        frame could not be read at all)."""
        frame, result = inspection.frame, inspection.detections
        if result is not None:
            return draw_detections(frame.image, result.boxes, result.scores, result.labels, self.class_names)
        canvas = cv2.cvtColor(frame.image, cv2.COLOR_GRAY2BGR) if frame.image is not None else np.full((*_PLACEHOLDER, 3), 90, np.uint8)
        return stamp(canvas, "NOT INSPECTED", inspection.reason or "")

    def _write_image(self, name: str, image: np.ndarray) -> None:
        path = self.save_dir / name
        ok, encoded = cv2.imencode(path.suffix or ".png", image)
        if not ok:
            path = path.with_suffix(".png")
            ok, encoded = cv2.imencode(".png", image)
        if not ok:
            raise ValueError(f"{path}: cannot encode the annotated image")
        atomic_write_bytes(path, encoded.tobytes())

    def _write_video_frame(self, image: np.ndarray) -> None:
        height, width = image.shape[:2]
        if self.video is None:
            name = self.source.source.strip()
            stem = {"video": Path(name).stem, "camera": f"camera{name}"}.get(self.source.kind, "stream")
            self.video_path = self.save_dir / f"{stem}.mp4"
            self.video_tmp = _temp_name(self.video_path)
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
        """Finish every output (renaming the JSONL and the video into place); returns the written paths by kind.
        If finishing one fails, the unfinished temp files are discarded and the error raised. Idempotent."""
        if self.closed:
            return {}
        written: dict[str, str] = {}
        try:
            if self.save_json is not None:
                atomic_write_json(self.save_json, self._json())
                written["json"] = str(self.save_json)
            if self.report is not None:
                atomic_write_text(self.report, report_csv(self.records, self.class_names))
                written["report"] = str(self.report)
            if self.jsonl is not None:
                self.jsonl.flush()
                os.fsync(self.jsonl.fileno())
                self.jsonl.close()
                os.replace(self.jsonl_tmp, self.jsonl_path)
                self.jsonl = None
                written["jsonl"] = str(self.jsonl_path)
            if self.video is not None:
                self.video.release()
                os.replace(self.video_tmp, self.video_path)
                self.video = None
                written["video"] = str(self.video_path)
        except BaseException:
            self.discard()
            raise
        self.closed = True
        if self.save_dir is not None and "video" not in written:
            written["images"] = str(self.save_dir)
        self.written = written
        return written

    def discard(self) -> None:
        """A failed run: close and remove the temp JSONL and video, keeping whatever the destinations held before
        (annotated images already written stay: each is one finished result). Later :meth:`close` calls write nothing."""
        self.closed = True
        if self.jsonl is not None:
            self.jsonl.close()
            self.jsonl = None
        if self.video is not None:
            self.video.release()
            self.video = None
        for tmp in (self.jsonl_tmp, self.video_tmp):
            if tmp is not None:
                tmp.unlink(missing_ok=True)

    def _json(self) -> list[dict[str, Any]]:
        """What ``--save-json`` holds: the frame records, or (layout ``detections``) v0.8's flat list of calls."""
        records = [{k: v for k, v in r.items() if k != "timestamp" or self.per_frame} for r in self.records]
        if self.json_layout == "frames":
            return records
        flat = []
        for r in records:
            extra = {"frame": r["frame"]} if self.per_frame else {}
            flat += [{"file_name": r["file_name"], **call, **extra} for call in r["calls"]]
        return flat


def report_csv(records: Sequence[dict[str, Any]], class_names: Sequence[str]) -> str:
    """``--report``: one CSV row per frame record: file name, frame, verdict, reason, calls per class, drift state."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["file_name", "frame", "verdict", "reason", "calls", *class_names, "dropped", "drift"])
    for r in records:
        per_class = [sum(c["category_name"] == name for c in r["calls"]) for name in class_names]
        writer.writerow(
            [r["file_name"], r["frame"], r["verdict"], r["reason"] or "", len(r["calls"]), *per_class, r["dropped"], r["drift"]]
        )
    return buffer.getvalue()


def _temp_name(path: Path) -> Path:
    """The hidden temp file an output is written to before it is renamed to ``path``: ``.STEM.<run>.tmp.SUFFIX``
    beside it, unique per run (``inspect/run_guard.py`` recovers those a killed run left)."""
    return run_temp_name(path)
