"""``defect-detector val``: score weights (a checkpoint or an exported artifact) on a COCO json, through the frame pipeline.

Every image goes the way ``predict`` takes a frame (``inspect/pipeline.py``): decoded to gray, its golden image
registered, letterboxed or tiled, the model, boxes back to the image's pixels, tiles merged. So ``val`` scores exactly
what ``predict`` outputs, for the deployed artifact as for the checkpoint, at the low score threshold mAP needs
(``EvalConfig.conf``) and the weights' NMS IoU; the DeepPCB F-score is read at the operating point.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from defect_detector.core.config import Config, EvalConfig
from defect_detector.core.frame import Frame
from defect_detector.core.frame_record import Prepared
from defect_detector.core.progress import progress as progress_bar
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.data.evaluate import Predictions, evaluate_predictions, per_group_map
from defect_detector.inspect.designs import Designs
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.prepare import Prepare, detect
from defect_detector.inspect.runtime import Runtime, precision_half
from defect_detector.jobs.annotated_frames import annotated_frames
from defect_detector.model.checkpoint import LoadedModel
from defect_detector.screens.frame import calibration_levels

log = logging.getLogger("defect_detector.inspect")


@dataclass
class Validation:
    """What ``val`` measured: ``metrics`` (``data.evaluate.evaluate_predictions`` plus ``per_group``), the
    ``predictions`` (``{image_id: {"boxes" xyxy image pixels, "scores", "labels"}}``), the ``dataset`` read, and the
    images left out with the reason (``{name: reason}``)."""

    metrics: dict[str, Any]
    predictions: Predictions
    dataset: CocoDetectionDataset
    runtime: Runtime
    not_inspected: dict[str, str] = field(default_factory=dict)


def open_dataset(data: str | os.PathLike[str], images: str | os.PathLike[str] | None, runtime: Runtime) -> CocoDetectionDataset:
    """The json's images and annotations, categories matched to the model's classes by name; ``ValueError`` when no
    category is a class of the model, or a golden-template model is given a json without ``reference`` entries."""
    dataset = CocoDetectionDataset(data, images, runtime.class_names, runtime.imgsz, None, "skip", reference=runtime.channels == 2)
    if not dataset.label_to_cat_id and dataset.unknown_categories:
        raise ValueError(
            f"{data}: none of its categories ({', '.join(dataset.unknown_categories)}) is a class of the model "
            f"({', '.join(runtime.class_names)}); categories are matched by name"
        )
    return dataset


def prepared_frames(prepare: Prepare, dataset: CocoDetectionDataset, progress: bool = True) -> Iterator[tuple[int, Prepared]]:
    """``(image_id, record)`` of every image of ``dataset`` through the prepare stage (``inspect/prepare.py``), the
    json's golden image given with each: what ``predict`` would make of it, refusals included (``record.refused``)."""
    frames = annotated_frames(dataset.files(), dataset.images_root, str(dataset.ann_file))
    bar = progress_bar(frames, total=len(dataset), desc="val", enabled=progress)
    for index, frame in enumerate(bar):
        as_frame = Frame(index, frame.image, str(dataset.ann_file), frame.name, 0.0, frame.error)
        yield frame.image_id, prepare(as_frame, frame.golden)


def predict_frames(
    pipeline: Pipeline, dataset: CocoDetectionDataset, batch: int = 4, progress: bool = True, prepare: Prepare | None = None
) -> tuple[Predictions, dict[str, str]]:
    """Run every image of ``dataset`` through the prepare stage and ``pipeline``: ``({image_id: prediction}, {name:
    reason not inspected})``. ``prepare``: the stage to use (None: a new one, with the weights' calibration levels),
    kept by a caller that validates one dataset many times (its designs are prepared once)."""
    prepare = prepare or Prepare(pipeline, calibration=calibration_levels(pipeline.runtime.meta.get("baseline")))
    predictions: Predictions = {}
    skipped: dict[str, str] = {}
    pending: list[tuple[int, Prepared]] = []

    def flush() -> None:
        for (image_id, _), det in zip(pending, detect(pipeline, [r for _, r in pending])):
            predictions[image_id] = {"boxes": det.boxes, "scores": det.scores, "labels": det.labels}
        pending.clear()

    for image_id, record in prepared_frames(prepare, dataset, progress):
        if record.refused:
            skipped[record.frame.file_name] = record.refusal.message
            if prepare.designs is None or record.refusal.kind not in prepare.designs.skipped:  # designs log their own
                log.warning("not inspected: %s", record.refusal.message)
            continue
        pending.append((image_id, record))
        if len(pending) >= batch:
            flush()
    if pending:
        flush()
    return predictions, skipped


def validate(  # noqa: PLR0913 - val's flags, one keyword each
    weights: str | os.PathLike[str] | None,
    data: str | os.PathLike[str],
    images: str | os.PathLike[str] | None = None,
    f1_conf: float | None = None,
    tta: str | None = None,
    align: bool = True,
    imgsz: int | None = None,
    progress: bool = True,
    precision: str = "auto",
) -> Validation:
    """Score ``weights`` (checkpoint or artifact; None: the bundled model) on the COCO json ``data``.

    ``f1_conf``: score threshold of the DeepPCB F-score (None: the weights' operating point). ``tta``: test-time
    augmentation (None: one pass). ``align``: register each json golden image to its image (False: use it as given).
    ``imgsz``: a checkpoint's input size (an artifact fixes its own). ``precision``: a checkpoint's (``Inspector.load``).
    Raises ``FileNotFoundError`` / ``ValueError``
    naming the file and the problem."""
    runtime = Runtime.load(weights, device="cpu", half=precision_half(precision), imgsz=imgsz, tta=tta)
    if imgsz is not None and imgsz != runtime.imgsz:
        raise ValueError(f"{runtime.path}: an exported artifact has a fixed input size ({runtime.imgsz}); drop --imgsz {imgsz}")
    point = runtime.operating_point
    pipeline = Pipeline(runtime, conf=EvalConfig().conf, iou=point["iou"], max_det=EvalConfig().max_det, align=align)
    pipeline.merge_at(point["conf"])
    dataset = open_dataset(data, images, runtime)
    predictions, skipped = predict_frames(pipeline, dataset, progress=progress)
    if not predictions:
        raise ValueError(f"{data}: no image could be inspected ({len(skipped)} not inspected; first: {next(iter(skipped.values()), '-')})")
    f1_conf = point["conf"] if f1_conf is None else f1_conf
    metrics = evaluate_predictions(dataset.coco, predictions, dataset.label_to_cat_id, runtime.class_names, f1_conf)
    metrics["per_group"] = per_group_map(dataset.coco, predictions, dataset.label_to_cat_id, runtime.class_names)
    return Validation(metrics, predictions, dataset, runtime, skipped)


def load_pair(validation: Validation, image_id: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The image ``image_id`` of a validation (gray uint8) and its golden image registered into it (None for a single-image
    model, or when the prepare stage refuses it): what the evaluation plots and the gallery show."""
    from defect_detector.data.images import load_image_gray

    path, golden = next((p, g) for i, p, g in validation.dataset.files() if i == image_id)
    image = load_image_gray(path)
    if golden is None or validation.runtime.channels == 1:
        return image, None
    record = Prepare(Pipeline(validation.runtime))(Frame(image_id, image, "val", Path(path).name, 0.0), load_image_gray(golden))
    return image, record.golden


class TrainingValidation:
    """Training-time validation through the frame pipeline (``engine/trainer.py`` :data:`Validator`): each call runs the
    model being trained over the run's validation json the way ``val`` runs a checkpoint (the prepare stage, the plan,
    the postprocess at ``eval.conf`` / ``eval.nms_iou`` / ``eval.max_det`` and the config's cross-class demotion), so
    ``best.pt`` is chosen on the mAP ``val`` reproduces. The designs (golden images, registration pyramids) are
    prepared once for the whole run; the model is wrapped untraced (eager) on each call."""

    def __init__(self) -> None:
        self._designs = Designs(None)

    def __call__(self, model: torch.nn.Module, cfg: Config, dataset: CocoDetectionDataset) -> Predictions:
        runtime = _training_runtime(model, cfg)
        pipeline = Pipeline(runtime, conf=cfg.eval.conf, iou=cfg.eval.nms_iou, max_det=cfg.eval.max_det)
        pipeline.merge_at(cfg.eval.f1_conf)
        prepare = Prepare(pipeline, self._designs, calibration=None)
        predictions, _ = predict_frames(pipeline, dataset, progress=False, prepare=prepare)
        return predictions


def _training_runtime(model: torch.nn.Module, cfg: Config) -> Runtime:
    """A :class:`Runtime` of the weights being trained, as ``val`` builds one for their checkpoint (the golden graphs of
    a siamese model included), but eager, float32, on the model's device, with no monitored layers."""
    loaded = LoadedModel(model, cfg, tuple(cfg.data.class_names), {}, Path("training"))
    return Runtime.from_loaded(loaded, next(model.parameters()).device, half=False, layers=(), imgsz=cfg.data.imgsz, trace=False)
