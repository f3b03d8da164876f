"""Glue between the command line and drift monitoring.

``predict``: :func:`add_monitor_arguments` adds the flags, :func:`build_monitoring` turns the parsed
arguments into an :class:`~defect_detector.monitor.alerts.AlertRouter` (or None), and the inference
loop calls ``router.on_frame(...)`` per frame and ``router.close()`` at the end.
``calibrate``: :func:`run_calibrate` builds and writes a baseline.

Errors a user can fix (missing or malformed files, a baseline for other layers) raise
:class:`MonitorSetupError` (a ``ValueError``) with one clear line.
"""

from __future__ import annotations

import argparse
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


def add_monitor_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--baseline``, ``--alerts``, ``--webhook``, ``--metrics-port``, ``--metrics-addr`` and ``--monitor-config``."""
    group = parser.add_argument_group("drift monitoring")
    group.add_argument("--baseline", metavar="PATH", help="drift baseline JSON from `calibrate` (default: the artifact's own)")
    group.add_argument("--alerts", metavar="PATH", help="append drift / recovered events to this JSONL file")
    group.add_argument("--webhook", metavar="URL", help="POST each drift event as JSON to this http(s) URL")
    group.add_argument("--metrics-port", metavar="N", type=int, help="serve Prometheus metrics on this port (0: any free port)")
    group.add_argument("--metrics-addr", metavar="ADDR", default="0.0.0.0", help="address for the metrics server (default 0.0.0.0)")
    group.add_argument("--monitor-config", metavar="YAML", help="drift thresholds: a YAML with a `monitor:` section or the section itself")


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
    args: argparse.Namespace,
    baseline_from_artifact: dict[str, Any] | None,
    layer_names: Sequence[str],
    monitor_config: MonitorConfig | None = None,
) -> AlertRouter | None:
    """The router for a ``predict`` run, or None when nothing is monitored.

    Drift detection is on when ``--baseline`` is given (it wins) or the artifact's meta embeds a
    baseline (``baseline_from_artifact``). ``layer_names``: the layers whose statistics the model
    outputs, in order; the baseline must cover the same ones. Thresholds: ``--monitor-config``, else
    ``monitor_config`` (e.g. the checkpoint's), else the defaults. ``--metrics-port`` alone serves frame,
    detection and latency metrics without drift detection. ``--alerts`` / ``--webhook`` without any
    baseline is an error.
    """
    baseline = _baseline(getattr(args, "baseline", None), baseline_from_artifact)
    alerts, webhook, port = getattr(args, "alerts", None), getattr(args, "webhook", None), getattr(args, "metrics_port", None)
    if baseline is None:
        if alerts or webhook:
            raise MonitorSetupError(
                "--alerts/--webhook need a drift baseline: pass --baseline (from `defect-detector calibrate`) "
                "or use an artifact exported with one"
            )
        if port is None:
            return None
    if baseline is not None and list(baseline.layer_names) != list(layer_names):
        raise MonitorSetupError(
            f"the baseline covers layers {baseline.layer_names} but the model reports {list(layer_names)}; "
            "calibrate again with these weights"
        )
    cfg = load_monitor_config(args.monitor_config) if getattr(args, "monitor_config", None) else monitor_config or MonitorConfig()
    detector = DriftDetector(baseline, cfg) if baseline is not None else None
    sinks: list[Sink] = []
    try:
        if detector is not None:
            sinks.append(LogSink())
        if alerts:
            sinks.append(JsonlSink(alerts))
        if webhook:
            sinks.append(WebhookSink(webhook))
        if port is not None:
            sink = PrometheusSink(port, addr=getattr(args, "metrics_addr", "0.0.0.0"))
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
