"""``defect-detector calibrate``: a drift baseline of the model's layer statistics over clean frames.

The frames go through the frame pipeline exactly as ``predict`` takes them (``inspect/pipeline.py``: gray, golden
image registered, letterboxed or tiled with the statistics pooled over the tiles), so the baseline describes what
``predict`` measures on the same frames. Up to ``FAULT_FRAMES`` of them, spread over the run, are also run under each
simulated camera fault (``monitor/faults.py``, applied to the frame in its own pixels as a camera would deliver it), so
an alert can name its likely cause. Frames come from a COCO json (its golden ``reference`` entries too) or from a
folder of good frames (no annotations needed; a golden-template model then takes ``--reference``).

For a golden-template model each frame's golden image also goes through the pipeline, paired with itself, and the
baseline describes the frames relative to their golden images (``Baseline.relative``, ``monitor/drift.py``): the
inspector reads every frame against its own golden image, so a board design the calibration never saw cancels out.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from defect_detector.core.frame import Frame
from defect_detector.core.frame_record import Prepared
from defect_detector.core.progress import progress as progress_bar
from defect_detector.data.coco_json import read_json
from defect_detector.data.dataset import CocoDetectionDataset, evenly_spaced
from defect_detector.engine.budget import MIN_BASELINE_FRAMES, Budget
from defect_detector.inspect.drift_inputs import golden_of
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.prepare import Prepare, detect, reframed
from defect_detector.inspect.references import References
from defect_detector.inspect.runtime import Runtime
from defect_detector.inspect.sources import list_images, source_kind
from defect_detector.jobs.annotated_frames import AnnotatedFrame, annotated_frames
from defect_detector.model.checkpoint import attach_baseline, load_checkpoint, weights_digest
from defect_detector.monitor.baseline import FAULT_FRAMES, Baseline, calibrate
from defect_detector.monitor.faults import CALIBRATION_STRENGTHS, apply_fault
from defect_detector.screens.hidden import level_histogram

logger = logging.getLogger("defect_detector.monitor")


class _FrameList:
    """The ``files`` of a json as a sized iterable of :class:`AnnotatedFrame` (read ahead in a thread)."""

    def __init__(self, files: list[tuple[int, str, str | None]], root: Path, source: str) -> None:
        self.files, self.root, self.source = files, root, source

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self) -> Iterator[AnnotatedFrame]:
        return annotated_frames(self.files, self.root, self.source)


def _folder_frames(folder: str) -> _FrameList:
    kind = source_kind(folder)
    if kind not in ("folder", "glob", "image"):
        raise ValueError(f"{folder}: calibrate --images takes a folder, glob or image of good frames, not a {kind}")
    files = list_images(folder, kind)
    if not files:
        raise ValueError(f"{folder}: no image files")
    return _FrameList([(i, str(path), None) for i, (path, _) in enumerate(files)], Path(folder), folder)


def _records(prepare: Prepare, frames: _FrameList, indices: list[int]) -> Iterator[Prepared]:
    """The records of the chosen frames through the prepare stage (as ``predict`` prepares them: the same view, the same
    plan); the frames it refuses (unreadable, blank, unmatched, badly exposed) are logged and left out."""
    wanted = set(indices)
    for i, frame in enumerate(frames):
        if i not in wanted:
            continue
        try:
            record = prepare(Frame(i, frame.image, frames.source, frame.name, 0.0, frame.error), frame.golden)
        except ValueError as exc:  # a golden image that is not an image
            logger.warning("calibrate: left out %s", exc)
            continue
        if record.refused:
            logger.warning("calibrate: left out %s", record.refusal.message)
            continue
        yield record


def _statistics(pipeline: Pipeline, records: list[Prepared]) -> np.ndarray:
    """float64 ``[N, L, 2]`` pooled layer statistics of prepared ``records`` through the pipeline, as the inspector
    computes them (``prepare.detect``: the golden view or the frame view)."""
    return np.stack([d.stats.double().numpy() for d in detect(pipeline, records)])


def golden_statistics(pipeline: Pipeline, records: list[Prepared], batch: int) -> list[np.ndarray]:
    """Per batch of ``records``: float64 ``[B, L, 2]`` statistics of each frame's golden image paired with itself, as the
    inspector computes them once per design (``inspect/drift_inputs.py``; ``monitor/drift.py``)."""
    out = []
    for i in range(0, len(records), batch):
        out.append(np.stack([g.stats for g in golden_of(pipeline, records[i : i + batch])]))
    return out


def fault_statistics(pipeline: Pipeline, records: list[Prepared], batch: int, progress: bool = False) -> dict[str, np.ndarray]:
    """``Baseline.faults``: statistics of the prepared ``records`` under each fault of ``monitor/faults.py`` at each of
    its ``CALIBRATION_STRENGTHS`` (``[S * N, L, 2]``, strength-major; the camera's frame faulted, its registration and
    golden image kept: ``prepare.reframed``), and of the same frames clean, repeated to match (``"clean"``)."""
    runs = [(name, s) for name, strengths in CALIBRATION_STRENGTHS.items() for s in strengths]
    out: dict[str, list[np.ndarray]] = {}
    with progress_bar(total=(len(runs) + 1) * len(records), desc="simulated faults", enabled=progress) as bar:
        for name, strength in [("clean", 0.0), *runs]:
            for start in range(0, len(records), batch):
                chunk = records[start : start + batch]
                if name != "clean":
                    chunk = [reframed(r, apply_fault(r.frame.image, name, strength, start + k)) for k, r in enumerate(chunk)]
                out.setdefault(name, []).append(_statistics(pipeline, chunk))
                bar.update(len(chunk))
    faults = {name: np.concatenate(parts) for name, parts in out.items()}
    faults["clean"] = np.concatenate([faults["clean"]] * len(next(iter(CALIBRATION_STRENGTHS.values()))))
    return faults


def run_calibrate(  # noqa: PLR0913 - the Python twin of calibrate's flags, one keyword each
    weights: str | os.PathLike[str] | None,
    data_json: str | os.PathLike[str] | None,
    images_root: str | os.PathLike[str] | None,
    out: str | os.PathLike[str],
    imgsz: int | None = None,
    max_images: int | None = None,
    batch: int = 8,
    reference: str | os.PathLike[str] | None = None,
    progress: bool = True,
    fault_frames: int = FAULT_FRAMES,
) -> Baseline:
    """Build and write (atomically) the drift baseline of ``weights`` (checkpoint or artifact; None: the bundled model).

    Frames: the images of the COCO json ``data_json`` (read from ``images_root``, default the json's; golden images
    from its ``reference`` entries), or with ``data_json`` None the folder / glob ``images_root`` of good frames
    (golden images from ``reference``: one image or a folder, as ``predict --reference``). ``max_images`` takes that
    many spread evenly, ``fault_frames`` of them also under the simulated faults. ``imgsz`` applies to checkpoints.
    A checkpoint's baseline records the digest of its weights (``model["weights_sha256"]``: ``weights_digest``), so
    ``strip --baseline`` refuses to carry it in other weights.
    Raises ``FileNotFoundError`` / ``ValueError`` naming the file and the problem."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    runtime = Runtime.load(weights, device="cpu", imgsz=imgsz, tta="none")  # statistics come from the identity pass alone
    if not runtime.layer_names:
        raise ValueError(f"{runtime.path}: the model reports no layer statistics (exported without monitored layers)")
    if runtime.channels == 2 and data_json is None and reference is None:
        raise ValueError(f"{runtime.path} is a golden-template model: give the frames' golden images with --reference")
    pipeline = Pipeline(runtime, References(reference) if reference else None, conf=1.0)
    if data_json is not None:
        frames, source = _FrameList(*_json_parts(pipeline, data_json, images_root)), str(data_json)
    elif images_root is not None:
        frames, source = _folder_frames(str(images_root)), str(images_root)
    else:
        raise ValueError("calibrate needs --data ANN.json or --images DIR")
    indices = evenly_spaced(len(frames), max_images)
    chosen = _records(Prepare(pipeline), frames, indices)
    records = list(progress_bar(chosen, total=len(indices), desc="calibrate", enabled=progress))
    if len(records) < 2:
        raise ValueError(f"{source}: fewer than 2 frames could be read and inspected")
    with progress_bar(total=len(records), desc="layer statistics", enabled=progress) as bar:
        stats = []
        for i in range(0, len(records), batch):
            stats.append(_statistics(pipeline, records[i : i + batch]))
            bar.update(len(records[i : i + batch]))
    golden = golden_statistics(pipeline, records, batch) if runtime.channels == 2 else None
    levels = np.stack([r.levels for r in records])
    shares = np.sum([level_histogram(r.frame.image) for r in records], axis=0) if runtime.channels == 1 else None
    info = {"weights": str(runtime.path), "kind": runtime.kind, "class_names": list(runtime.class_names)}
    if runtime.kind == "checkpoint":  # what strip --baseline checks the weights it carries it in against
        info["weights_sha256"] = weights_digest(load_checkpoint(runtime.path).model)
    source = f"{source} ({len(records)} images)"
    baseline = calibrate(stats, runtime.layer_names, runtime.imgsz, info, source, golden=golden, image_levels=levels, pixel_levels=shares)
    kept = [records[i] for i in evenly_spaced(len(records), fault_frames)]
    baseline.faults = fault_statistics(pipeline, kept, batch, progress)
    baseline.save(out)
    return baseline


def _json_parts(
    pipeline: Pipeline, data: str | os.PathLike[str], root: str | os.PathLike[str] | None
) -> tuple[list[tuple[int, str, str | None]], Path, str]:
    runtime = pipeline.runtime
    dataset = CocoDetectionDataset(data, root, runtime.class_names, runtime.imgsz, None, "skip", reference=runtime.channels == 2)
    if len(dataset) == 0:
        raise ValueError(f"{data}: no images")
    return dataset.files(), dataset.images_root, str(data)


RUN_CALIBRATION_IMAGES = 300
"""Training images (spread over the json) that ``train`` calibrates the drift baseline of its weights on."""


def calibrate_run(
    run_dir: str | os.PathLike[str], data: str, images: str | None, progress: bool = True, budget: Budget | None = None
) -> str:
    """The drift baseline of a finished training run: calibrated with ``weights/best.pt`` on up to
    :data:`RUN_CALIBRATION_IMAGES` of its training images (``data``, ``images``: the run's ``data.train`` and
    ``data.train_images``), written to ``baseline.json`` and carried in ``best.pt`` and ``last.pt``, so the weights
    watch their camera from the first ``predict``. ``budget``: the run's ``train.max_minutes``; fewer frames are
    calibrated when all would not fit before its deadline (at the per-frame cost its validations measured). A baseline
    of fewer than ``MIN_BASELINE_FRAMES`` (30) frames, too few in the json or in the time left, is not made: its spread
    would be a guess. Returns the line ``train`` prints: what was calibrated, or why not and how to add one later."""
    weights = Path(run_dir) / "weights"
    available = len(read_json(Path(data)).get("images", []))
    frames, why = min(available, RUN_CALIBRATION_IMAGES), "in the training json"
    faults = min(frames, FAULT_FRAMES)
    if budget is not None and frames >= MIN_BASELINE_FRAMES:
        fit, faults = budget.baseline_plan(frames, FAULT_FRAMES)
        if fit < frames or faults < min(frames, FAULT_FRAMES):
            logger.warning(
                "train.max_minutes: the drift baseline calibrates on %d of %d frames, %d under simulated faults (the time left)",
                fit,
                frames,
                faults,
            )
            frames, why = fit, f"fit in the time train.max_minutes left ({budget.left():.0f} s)"
    if frames < MIN_BASELINE_FRAMES:
        return _no_baseline_line(frames, why, weights, data)
    start = time.perf_counter()
    out = Path(run_dir) / "baseline.json"
    baseline = run_calibrate(weights / "best.pt", data, images, out, max_images=frames, progress=progress, fault_frames=faults)
    for name in ("best.pt", "last.pt"):
        if (weights / name).is_file():
            attach_baseline(weights / name, baseline.to_dict())
    return (
        f"drift baseline: {baseline.count} training images in {time.perf_counter() - start:.0f} s, carried in best.pt and last.pt "
        f"(predict monitors the camera with them; {Path(run_dir) / 'baseline.json'})"
    )


def _no_baseline_line(frames: int, why: str, weights: Path, data: str) -> str:
    """The line of a run that carries no drift baseline: too few frames, that ``predict`` will not watch the camera with
    these weights, and the two commands that add one later; also logged as a warning (a run that ships unmonitored
    weights says so where warnings are read, not only among the lines it prints)."""
    logger.warning(
        "%s: no drift baseline: only %d frames %s, fewer than %d; predict will not monitor drift with these weights",
        weights / "best.pt",
        frames,
        why,
        MIN_BASELINE_FRAMES,
    )
    return (
        f"drift baseline: NONE (best.pt and last.pt carry none: predict will not monitor drift with them): {frames} frames "
        f"{why}, fewer than {MIN_BASELINE_FRAMES}; add one later from {MIN_BASELINE_FRAMES}+ clean boards: defect-detector "
        f"calibrate --weights {weights / 'best.pt'} --data ANN.json --out baseline.json, then "
        f"defect-detector strip {weights / 'best.pt'} --baseline baseline.json --out {weights / 'best_monitored.pt'}"
    )
