"""Training-time validation: the EMA weights' predictions on the run's validation json, and all metrics of them.

``fit`` validates with the :data:`Validator` its caller passes: ``defect-detector train`` and ``teach`` pass the frame
pipeline's (``jobs/validate.py`` ``TrainingValidation``; the engine cannot import it, a layer above), so the mAP that
chooses ``best.pt`` is the one ``val`` reproduces.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from defect_detector.core.config import Config
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.data.evaluate import Predictions, evaluate_predictions
from defect_detector.model.detector import TinyDetector

Validator = Callable[[torch.nn.Module, Config, CocoDetectionDataset], Predictions]
"""Training-time validation's predictions: ``(eval-mode model, the run's config, its validation set) -> {image_id:
prediction}`` on the validation set's images (``data.max_images`` applied), boxes xyxy in image pixels.
``defect-detector train`` and ``teach`` pass the frame pipeline's (``jobs/validate.py`` ``TrainingValidation``: the
prepare stage ``val`` and ``predict`` use, so ``best.pt`` is chosen on the metric ``val`` reproduces)."""


def validate(model: TinyDetector, val_set: CocoDetectionDataset, cfg: Config, validator: Validator) -> tuple[dict, dict]:
    """``validator``'s predictions of the eval-mode ``model`` on ``val_set`` and all their metrics (at the score
    threshold ``cfg.eval.f1_conf``): ``(metrics, predictions)``."""
    model.eval()
    predictions = validator(model, cfg, val_set)
    metrics = evaluate_predictions(val_set.coco, predictions, val_set.label_to_cat_id, cfg.data.class_names, cfg.eval.f1_conf)
    return metrics, predictions
