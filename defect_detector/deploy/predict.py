"""The ``predict`` loop: frames from a source -> runtime -> JSON / annotated outputs, with live latency figures.

:func:`run_predict` is what ``defect-detector predict`` runs. Extension points for monitoring: pass a
loaded :class:`Runtime` (to build monitors from its ``meta`` and ``layer_names`` first) and ``on_frame``
callbacks, called as ``callback(frame, result)`` for every frame in source order, after its outputs are
written; ``result`` is the frame's :class:`Detections` (with ``stats [L, 2]``), or None for an error frame.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import cv2
import numpy as np
from tqdm import tqdm

from defect_detector.boxes import xyxy_to_xywh
from defect_detector.deploy.references import ReferenceError, References
from defect_detector.deploy.runtime import Detections, Runtime
from defect_detector.deploy.sources import Frame, FrameSource, open_source
from defect_detector.engine.plots import draw_detections
from defect_detector.io import atomic_write_bytes, atomic_write_json

log = logging.getLogger("defect_detector.deploy")

FrameCallback = Callable[[Frame, "Detections | None"], None]
STAGES = ("decode", "preprocess", "model", "postprocess")
_EMA = 0.1  # smoothing of the live status line
_DEFAULT_VIDEO_FPS = 10.0


def detection_records(frame: Frame, result: Detections, with_frame: bool) -> list[dict[str, Any]]:
    """``--save-json`` entries of one frame: ``{"file_name", "category_name", "bbox": [x, y, w, h], "score"}``
    (+ ``"frame"``) with ``bbox`` in original-image pixels (COCO xywh, rounded to 0.01 px)."""
    xywh = xyxy_to_xywh(result.boxes).tolist()
    records = []
    for box, name, score in zip(xywh, result.names, result.scores.tolist()):
        bbox = [round(v, 2) for v in box]
        record: dict[str, Any] = {"file_name": frame.file_name, "category_name": name, "bbox": bbox, "score": round(score, 5)}
        if with_frame:
            record["frame"] = frame.index
        records.append(record)
    return records


class _Outputs:
    """``--save-json`` (one list, written atomically at the end; plus a JSONL line per frame, flushed, for
    video and stream sources) and ``--save-dir`` (annotated images with the source's relative names, or
    one annotated ``.mp4`` for video and stream sources, renamed into place when closed)."""

    def __init__(self, source: FrameSource, class_names: Sequence[str], save_json: str | None, save_dir: str | None) -> None:
        self.source = source
        self.class_names = list(class_names)
        self.per_frame = source.kind in ("video", "camera", "stream")
        self.save_json = Path(save_json) if save_json else None
        self.save_dir = Path(save_dir) if save_dir else None
        self.records: list[dict[str, Any]] = []
        self.jsonl: TextIO | None = None
        self.jsonl_path: Path | None = None
        if self.save_json and self.per_frame:
            self.jsonl_path = self.save_json.with_suffix(".jsonl")
            self.jsonl_path.parent.mkdir(parents=True, exist_ok=True)
            self.jsonl = self.jsonl_path.open("w", encoding="utf-8")
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
            self.video_tmp = self.video_path.with_name(f".{self.video_path.stem}.tmp.mp4")
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
        """Finish every output; returns the written paths by kind."""
        written: dict[str, str] = {}
        if self.jsonl is not None:
            self.jsonl.close()
            written["jsonl"] = str(self.jsonl_path)
        if self.save_json is not None:
            atomic_write_json(self.save_json, self.records)
            written["json"] = str(self.save_json)
        if self.video is not None:
            self.video.release()
            os.replace(self.video_tmp, self.video_path)
            written["video"] = str(self.video_path)
        if self.save_dir is not None and "video" not in written:
            written["images"] = str(self.save_dir)
        return written


def _batches(frames: Iterator[Frame], size: int, max_frames: int | None) -> Iterator[list[Frame]]:
    """Group ``frames`` into lists of up to ``size``, stopping after ``max_frames`` frames."""
    batch: list[Frame] = []
    count = 0
    for frame in frames:
        batch.append(frame)
        count += 1
        if len(batch) == size or (max_frames is not None and count >= max_frames):
            yield batch
            batch = []
        if max_frames is not None and count >= max_frames:
            break
    if batch:
        yield batch


def check_reference_use(runtime: Runtime, reference: str | None) -> None:
    """``ValueError`` unless a reference is given exactly when the model takes one (``runtime.channels == 2``)."""
    if runtime.channels == 2 and not reference:
        raise ValueError(f"{runtime.path.name} is a golden-template model: give each frame's reference with --reference REF")
    if runtime.channels == 1 and reference:
        raise ValueError(
            f"{runtime.path.name} is a single-image model: --reference needs a reference model (in_channels 2; "
            "leave --weights out for the bundled one)"
        )


def _align(batch: list[Frame], references: References | None) -> tuple[list[Frame], list[Frame], list[np.ndarray] | None]:
    """``(batch, inspectable frames, their registered references)``; references are None without ``references``.
    A frame whose reference is missing or does not register comes back in ``batch`` with its ``error`` set
    (its image kept for drawing) and is left out of the inspectable frames."""
    if references is None:
        return batch, [f for f in batch if f.image is not None], None
    out, kept, warped = [], [], []
    for frame in batch:
        if frame.image is None:
            out.append(frame)
            continue
        try:
            ref, _ = references.align(frame.image, frame.file_name)
        except ReferenceError as exc:
            out.append(dataclasses.replace(frame, error=str(exc)))
            continue
        out.append(frame)
        kept.append(frame)
        warped.append(ref)
    return out, kept, warped


def run_predict(args: argparse.Namespace, on_frame: Sequence[FrameCallback] = (), runtime: Runtime | None = None) -> dict[str, Any]:
    """Run detection over ``args.source`` and write the requested outputs; returns a summary dict.

    ``args`` fields: ``source, weights, conf, iou, max_det, save_json, save_dir, device, threads, batch,
    latest_only, max_frames`` and optionally ``tta`` and ``reference`` (as parsed by the ``predict`` subcommand; a reference
    model needs ``reference``, see :mod:`defect_detector.deploy.references`). Live sources run one frame per
    batch. Ctrl-C stops the loop cleanly: outputs so far are written and ``summary["interrupted"]`` is True.
    Summary keys: ``frames`` (consumed), ``processed``, ``skipped`` (error frames), ``dropped`` (stale stream
    frames), ``no_reference`` (frames skipped for a missing, unreadable or unregistrable reference, by reason),
    ``detections``, ``reconnects``, ``gaps``, ``gave_up``, ``fps``, ``wall_s``, ``mean_ms`` (per stage,
    per frame), ``outputs`` (written paths), ``interrupted``.
    """
    if args.batch < 1:
        raise ValueError(f"--batch must be >= 1, got {args.batch}")
    if args.max_frames is not None and args.max_frames < 1:
        raise ValueError(f"--max-frames must be >= 1, got {args.max_frames}")
    source = open_source(args.source, latest_only=args.latest_only)
    reference = getattr(args, "reference", None)
    runtime = runtime or Runtime.load(args.weights, device=args.device, threads=args.threads, tta=getattr(args, "tta", None))
    check_reference_use(runtime, reference)
    references = References(reference) if reference else None
    runtime.warmup()
    batch_size = 1 if source.is_stream else args.batch
    outputs = _Outputs(source, runtime.class_names, args.save_json, args.save_dir)
    totals = dict.fromkeys(STAGES, 0.0)
    live = dict.fromkeys(STAGES, 0.0)
    consumed = processed = skipped = detections = 0
    interrupted = False
    start = time.perf_counter()
    bar = tqdm(total=source.total if args.max_frames is None else args.max_frames, unit="frame", file=sys.stderr, disable=None, leave=False)
    try:
        with source:
            for batch in _batches(iter(source), batch_size, args.max_frames):
                batch, good, refs = _align(batch, references)
                results = runtime.predict([f.image for f in good], args.conf, args.iou, args.max_det, references=refs) if good else []
                by_index = {f.index: r for f, r in zip(good, results)}
                for frame in batch:
                    result = by_index.get(frame.index)
                    outputs.add(frame, result)
                    for callback in on_frame:
                        callback(frame, result)
                    consumed += 1
                    if result is None:
                        skipped += 1
                        continue
                    processed += 1
                    detections += len(result)
                    stage_ms = {"decode": frame.decode_ms, **result.timings}
                    for stage in STAGES:
                        totals[stage] += stage_ms[stage]
                        live[stage] = stage_ms[stage] if processed == 1 else (1 - _EMA) * live[stage] + _EMA * stage_ms[stage]
                bar.update(len(batch))
                fps = bar.n / max(time.perf_counter() - start, 1e-9)
                latency = " ".join(f"{s} {live[s]:.1f}" for s in STAGES)
                bar.set_postfix_str(f"{fps:.1f} fps, ms: {latency}, det {detections}", refresh=False)
    except KeyboardInterrupt:
        interrupted = True
        log.warning("interrupted: writing the outputs of the frames processed so far")
    finally:
        bar.close()
        written = outputs.close()
    wall = time.perf_counter() - start
    stats = source.stats
    return {
        "source": args.source,
        "kind": source.kind,
        "weights": str(runtime.path),
        "device": str(runtime.device),
        "frames": consumed,
        "processed": processed,
        "skipped": skipped,
        "dropped": stats.dropped,
        "no_reference": dict(references.skipped) if references is not None else {},
        "detections": detections,
        "reconnects": stats.reconnects,
        "gaps": len(stats.gaps),
        "gave_up": stats.gave_up,
        "wall_s": round(wall, 3),
        "fps": round(processed / wall, 3) if wall > 0 else 0.0,
        "mean_ms": {s: round(totals[s] / processed, 3) if processed else None for s in STAGES},
        "outputs": written,
        "interrupted": interrupted,
    }


def summary_line(summary: dict[str, Any]) -> str:
    """One human-readable line for the end of a ``predict`` run."""
    ms = summary["mean_ms"]
    latency = ", ".join(f"{s} {ms[s]:.2f}" for s in STAGES) if summary["processed"] else "n/a"
    extra = f", dropped {summary['dropped']}, reconnects {summary['reconnects']}" if summary["kind"] in ("camera", "stream") else ""
    if summary.get("no_reference"):
        extra += ", of them without a usable reference: " + ", ".join(f"{why} x{n}" for why, n in sorted(summary["no_reference"].items()))
    return (
        f"frames {summary['frames']} (processed {summary['processed']}, skipped {summary['skipped']}{extra}), "
        f"detections {summary['detections']}, {summary['fps']:.2f} fps; mean ms per frame: {latency}"
    )
