"""``defect-detector calibrate``: a drift baseline of the model's layer statistics over clean frames."""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import torch

from defect_detector.monitor.baseline import Baseline, calibrate_dataset

logger = logging.getLogger("defect_detector.monitor")


def evenly_spaced(n: int, k: int | None) -> list[int]:
    """``k`` indices spread evenly over ``range(n)`` (all of them when ``k`` is None or >= n).

    Annotation files list images group by group, so the first ``k`` would cover one board design only.
    """
    if k is None or k >= n:
        return list(range(n))
    if k < 1:
        raise ValueError(f"need at least one image, got max_images={k}")
    return sorted({int(i) for i in np.linspace(0, n - 1, k).round()})


def run_calibrate(
    weights: str | os.PathLike[str] | None,
    data_json: str | os.PathLike[str],
    images_root: str | os.PathLike[str] | None,
    out: str | os.PathLike[str],
    imgsz: int | None = None,
    max_images: int | None = None,
    batch: int = 8,
    device: str = "cpu",
) -> Baseline:
    """``defect-detector calibrate``: baseline of the model's layer statistics over clean images.

    ``weights``: a checkpoint or exported TorchScript artifact (None: the bundled model), run exactly
    as ``predict`` runs it (``deploy.runtime.Runtime``). ``data_json``: COCO json of clean reference
    images (training or validation split; for a reference model, with their ``reference`` entries, registered as
    ``predict`` registers them), read with ``images_root`` (default: the json's
    ``info.images_root``). ``imgsz`` applies to checkpoints (an artifact fixes it); ``max_images``
    takes that many images spread evenly over the file. Writes ``out`` atomically and returns the
    baseline. Raises ``FileNotFoundError`` / ``ValueError`` naming the file and the problem.
    """
    from defect_detector.data.dataset import CocoDetectionDataset
    from defect_detector.inspect.runtime import Runtime

    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    runtime = Runtime.load(weights, device=device, imgsz=imgsz, tta="none")  # statistics come from the identity pass alone
    if not runtime.layer_names:
        raise ValueError(f"{runtime.path}: the model reports no layer statistics (exported without monitored layers)")
    pairs = runtime.channels == 2
    dataset = CocoDetectionDataset(
        data_json, images_root, runtime.class_names, runtime.imgsz, None, "skip", reference=pairs, register=pairs
    )
    if len(dataset) == 0:
        raise ValueError(f"{data_json}: no readable images")
    indices = evenly_spaced(len(dataset), max_images)
    images = _Subset(dataset, indices)

    def model(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return runtime.infer(x.to(runtime.device, runtime.dtype))

    info = {"weights": str(runtime.path), "kind": runtime.kind, "class_names": list(runtime.class_names)}
    baseline = calibrate_dataset(
        model, images, layer_names=runtime.layer_names, batch_size=batch, model_info=info, source=f"{data_json} ({len(indices)} images)"
    )
    if dataset.skipped:
        logger.warning("%s", dataset.report())
    baseline.save(out)
    return baseline


class _Subset:
    """``dataset[indices[i]]`` as a sized iterable of images (targets dropped)."""

    def __init__(self, dataset: Any, indices: list[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self):
        for i in self.indices:
            yield self.dataset[i][0]
