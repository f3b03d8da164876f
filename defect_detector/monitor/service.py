"""Setting up drift monitoring, and calibration.

:func:`build_monitoring` turns a baseline and the requested sinks into an
:class:`~defect_detector.monitor.alerts.AlertRouter` (or None); the inspector
(``deploy/inspector.py``) calls it and feeds the router per frame.
:func:`run_calibrate` builds and writes a baseline (``defect-detector calibrate``).

Errors a user can fix (missing or malformed files, a baseline for other layers) raise
:class:`MonitorSetupError` (a ``ValueError``) with one clear line.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from defect_detector.config import ConfigError, MonitorConfig, config_from_dict
from defect_detector.monitor.alerts import AlertRouter, JsonlSink, LogSink, PrometheusSink, Sink, WebhookSink
from defect_detector.monitor.baseline import Baseline, BaselineError, calibrate_dataset
from defect_detector.monitor.drift import DriftDetector

logger = logging.getLogger("defect_detector.monitor")


class MonitorSetupError(ValueError):
    """Monitoring cannot start as asked; the message says why in one line."""


def load_monitor_config(path: str | os.PathLike[str]) -> MonitorConfig:
    """Read drift thresholds from YAML: a run config with a ``monitor`` section, or just that section's keys."""
    path = Path(path)
    if not path.is_file():
        raise MonitorSetupError(f"{path}: monitor config file not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
        raise MonitorSetupError(f"{path}: cannot read monitor config: {exc}") from exc
    if not isinstance(raw, dict):
        raise MonitorSetupError(f"{path}: monitor config must be a mapping")
    section = raw["monitor"] if "monitor" in raw else raw
    try:
        return config_from_dict({"monitor": section}).monitor
    except ConfigError as exc:
        raise MonitorSetupError(f"{path}: {exc}") from exc


def build_monitoring(
    layer_names: Sequence[str],
    baseline: str | os.PathLike[str] | None = None,
    embedded: dict[str, Any] | None = None,
    monitor: bool = True,
    alerts: str | os.PathLike[str] | None = None,
    webhook: str | None = None,
    metrics_port: int | None = None,
    metrics_addr: str = "0.0.0.0",
    monitor_config: str | os.PathLike[str] | MonitorConfig | None = None,
) -> AlertRouter | None:
    """The router of an inspection run, or None when nothing is monitored.

    Drift detection is on when ``monitor`` and a baseline exist: the ``baseline`` file (it wins), else the
    one the weights carry (``embedded``, a ``Baseline.to_dict()``). ``layer_names``: the layers whose
    statistics the model outputs, in order; the baseline must cover the same ones. Thresholds:
    ``monitor_config`` (a YAML path or a :class:`MonitorConfig`), else the defaults. Drift events are
    logged, and appended to ``alerts`` (JSONL) / POSTed to ``webhook`` when given; ``metrics_port``
    serves Prometheus metrics (frames, detections, latency; drift too when on). ``alerts`` / ``webhook``
    without a baseline, or with ``monitor`` off, is a :class:`MonitorSetupError`.
    """
    if not monitor and (alerts or webhook or baseline):
        raise MonitorSetupError("drift monitoring is off (--no-monitor): drop --baseline, --alerts and --webhook, or turn it on")
    found = _baseline(str(baseline) if baseline else None, embedded) if monitor else None
    if found is None:
        if alerts or webhook:
            raise MonitorSetupError(
                "--alerts/--webhook need a drift baseline: the weights carry none; pass --baseline (from `defect-detector calibrate`)"
            )
        if metrics_port is None:
            return None
    if found is not None and list(found.layer_names) != list(layer_names):
        raise MonitorSetupError(
            f"the baseline covers layers {found.layer_names} but the model reports {list(layer_names)}; calibrate again with these weights"
        )
    if isinstance(monitor_config, MonitorConfig):
        cfg = monitor_config
    else:
        cfg = load_monitor_config(monitor_config) if monitor_config else MonitorConfig()
    detector = DriftDetector(found, cfg) if found is not None else None
    sinks: list[Sink] = []
    try:
        if detector is not None:
            sinks.append(LogSink())
        if alerts:
            sinks.append(JsonlSink(alerts))
        if webhook:
            sinks.append(WebhookSink(webhook))
        if metrics_port is not None:
            sink = PrometheusSink(metrics_port, addr=metrics_addr)
            logger.info("serving Prometheus metrics on port %d", sink.port)
            sinks.append(sink)
    except (OSError, ValueError) as exc:
        for sink in sinks:
            sink.close()
        raise MonitorSetupError(f"cannot start monitoring: {exc}") from exc
    return AlertRouter(detector, sinks, layer_names)


def _baseline(path: str | None, embedded: dict[str, Any] | None) -> Baseline | None:
    try:
        if path:
            return Baseline.load(path)
        if embedded:
            return Baseline.from_dict(embedded, where="artifact meta.json baseline")
    except BaselineError as exc:
        raise MonitorSetupError(str(exc)) from exc
    return None


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
    from defect_detector.deploy.runtime import Runtime

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
