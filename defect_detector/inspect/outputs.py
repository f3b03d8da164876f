"""What ``predict`` writes: ``--save-json`` (a JSON list, plus per-frame JSONL for video and streams) and
``--save-dir`` (annotated images, or one annotated ``.mp4``). Every file is written to a temporary name
and renamed into place when complete, so an interrupted run never leaves a half-written output, and a run that
fails (:meth:`Outputs.discard`) never replaces the results of an earlier one: its temporary files are removed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import cv2
import numpy as np
from torchvision.ops import box_convert

from defect_detector.core.io import atomic_write_bytes, atomic_write_json
from defect_detector.core.types import Detections
from defect_detector.data.draw import draw_detections
from defect_detector.inspect.run_guard import run_temp_name
from defect_detector.inspect.sources import Frame, FrameSource

_DEFAULT_VIDEO_FPS = 10.0
_FSYNC_S = 1.0  # the per-frame JSONL is fsynced at least this often


def detection_records(frame: Frame, result: Detections, with_frame: bool) -> list[dict[str, Any]]:
    """``--save-json`` entries of one frame: ``{"file_name", "category_name", "bbox": [x, y, w, h], "score"}``
    (+ ``"frame"``) with ``bbox`` in original-image pixels (COCO xywh, rounded to 0.01 px)."""
    xywh = box_convert(result.boxes, "xyxy", "xywh").tolist()
    records = []
    for box, name, score in zip(xywh, result.names, result.scores.tolist()):
        bbox = [round(v, 2) for v in box]
        record: dict[str, Any] = {"file_name": frame.file_name, "category_name": name, "bbox": bbox, "score": round(score, 5)}
        if with_frame:
            record["frame"] = frame.index
        records.append(record)
    return records


class Outputs:
    """``--save-json`` (one list, written atomically at the end; plus a JSONL line per frame, flushed, for
    video and stream sources) and ``--save-dir`` (annotated images with the source's relative names, or
    one annotated ``.mp4`` for video and stream sources). The JSONL and the video are written to hidden temp
    files beside their destinations (``.NAME.<run>.tmp.jsonl``, ``.NAME.<run>.tmp.mp4``) and renamed into place by
    :meth:`close`; :meth:`discard` (a failed run) removes them and leaves any earlier outputs as they were."""

    def __init__(self, source: FrameSource, class_names: Sequence[str], save_json: str | None, save_dir: str | None) -> None:
        self.source = source
        self.class_names = list(class_names)
        self.per_frame = source.kind in ("video", "camera", "stream")
        self.save_json = Path(save_json) if save_json else None
        self.save_dir = Path(save_dir) if save_dir else None
        self.records: list[dict[str, Any]] = []
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

    def add(self, frame: Frame, result: Detections | None) -> None:
        records = detection_records(frame, result, self.per_frame) if result is not None else []
        self.records += records
        if self.jsonl is not None:
            line: dict[str, Any] = {"frame": frame.index, "file_name": frame.file_name, "timestamp": frame.timestamp}
            if result is None:
                line["error"] = frame.error
            else:
                line["detections"] = [{k: r[k] for k in ("category_name", "bbox", "score")} for r in records]
            self.jsonl.write(json.dumps(line) + "\n")
            self.jsonl.flush()
            if time.monotonic() - self.synced >= _FSYNC_S:  # durable as it goes: a power loss costs at most ~1 s
                os.fsync(self.jsonl.fileno())
                self.synced = time.monotonic()
        if self.save_dir is not None and frame.image is not None:
            if result is None:
                annotated = cv2.cvtColor(frame.image, cv2.COLOR_GRAY2BGR)
            else:
                annotated = draw_detections(frame.image, result.boxes, result.scores, result.labels, self.class_names)
            if self.per_frame:
                self._write_video_frame(annotated)
            else:
                self._write_image(frame.file_name, annotated)

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
                atomic_write_json(self.save_json, self.records)
                written["json"] = str(self.save_json)
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


def _temp_name(path: Path) -> Path:
    """The hidden temp file an output is written to before it is renamed to ``path``: ``.STEM.<run>.tmp.SUFFIX``
    beside it, unique per run (``inspect/run_guard.py`` recovers those a killed run left)."""
    return run_temp_name(path)
