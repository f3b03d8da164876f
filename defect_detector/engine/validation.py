"""Training-time validation: the EMA weights' predictions on the run's validation json, and all metrics of them.

``fit`` validates with a :data:`Validator` when given one: ``defect-detector train`` and ``teach`` pass the frame
pipeline's (``inspect/validate.py`` ``TrainingValidation``), so the mAP that chooses ``best.pt`` is the one ``val``
reproduces. Without one (the engine used as a library), the validation loader's letterboxed batches are scored.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from defect_detector.core.config import Config
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.engine.evaluate import Predictions, evaluate_predictions, predict_dataset
from defect_detector.model.detector import TinyDetector

Validator = Callable[[torch.nn.Module, Config, CocoDetectionDataset], Predictions]
"""Training-time validation's predictions: ``(eval-mode model, the run's config, its validation set) -> {image_id:
prediction}`` on the validation set's images (``data.max_images`` applied), boxes in image pixels.
``defect-detector train`` and ``teach`` pass the frame pipeline's (``inspect/validate.py`` ``TrainingValidation``: the
prepare stage ``val`` and ``predict`` use, so ``best.pt`` is chosen on the metric ``val`` reproduces)."""


def validate(
    model: TinyDetector,
    loader: torch.utils.data.DataLoader,
    val_set: CocoDetectionDataset,
    cfg: Config,
    device: torch.device,
    progress: bool = True,
    validator: Validator | None = None,
) -> tuple[dict, dict]:
    """Predict on the validation set and compute all metrics. Returns ``(metrics, predictions)``. ``validator``: how
    to predict (None: the validation loader's letterboxed batches, :func:`predict_dataset`)."""
    if validator is not None:
        model.eval()
        predictions = validator(model, cfg, val_set)
    else:
        predictions = predict_dataset(model, loader, device, cfg.eval, progress)
    metrics = evaluate_predictions(val_set.coco, predictions, val_set.label_to_cat_id, cfg.data.class_names, cfg.eval.f1_conf)
    return metrics, predictions


