"""Setting up drift monitoring: the baseline, the thresholds and the sinks of an inspector.

:func:`build_monitoring` turns a baseline and the requested sinks into an
:class:`~defect_detector.monitor.alerts.AlertRouter` (or None); the inspector
(``inspect/inspector.py``) calls it and feeds the router per frame.

Errors a user can fix (missing or malformed files, a baseline for other layers) raise
:class:`MonitorSetupError` (a ``ValueError``) with one clear line.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from defect_detector.core.config import ConfigError, MonitorConfig, read_yaml_mapping
from defect_detector.monitor.alerts import AlertRouter, JsonlSink, LogSink, PrometheusSink, Sink, WebhookSink
from defect_detector.monitor.baseline import Baseline, BaselineError
from defect_detector.monitor.drift import DriftDetector

logger = logging.getLogger("defect_detector.monitor")


class MonitorSetupError(ValueError):
    """Monitoring cannot start as asked; the message says why in one line."""


def load_monitor_config(path: str | os.PathLike[str]) -> MonitorConfig:
    """Read drift thresholds (:class:`MonitorConfig`) from YAML: a file with a ``monitor`` section, or just its keys."""
    path = Path(path)
    try:
        raw = read_yaml_mapping(path, "monitor config", allow_empty=True)  # a repeated key is refused, not the last kept
    except ConfigError as exc:
        raise MonitorSetupError(str(exc)) from exc
    section = raw["monitor"] if "monitor" in raw else raw
    try:
        return MonitorConfig.from_raw(section)
    except ConfigError as exc:
        raise MonitorSetupError(f"{path}: {exc}") from exc


def build_monitoring(  # noqa: PLR0913 - one keyword per monitoring flag of predict (--baseline ... --monitor-config)
    layer_names: Sequence[str],
    baseline: str | os.PathLike[str] | None = None,
    embedded: dict[str, Any] | None = None,
    monitor: bool = True,
    alerts: str | os.PathLike[str] | None = None,
    webhook: str | None = None,
    metrics_port: int | None = None,
    metrics_addr: str = "0.0.0.0",
    monitor_config: str | os.PathLike[str] | MonitorConfig | None = None,
    sinks_of: AlertRouter | None = None,
) -> AlertRouter | None:
    """The router of an inspection run, or None when nothing is monitored.

    Drift detection is on when ``monitor`` and a baseline exist: the ``baseline`` file (it wins), else the
    one the weights carry (``embedded``, a ``Baseline.to_dict()``). ``layer_names``: the layers whose
    statistics the model outputs, in order; the baseline must cover the same ones. Thresholds:
    ``monitor_config`` (a YAML path or a :class:`MonitorConfig`), else the defaults. Drift events are
    logged, and appended to ``alerts`` (JSONL) / POSTed to ``webhook`` when given; ``metrics_port``
    serves Prometheus metrics (frames, detections, latency; drift too when on). ``alerts`` / ``webhook``
    without a baseline, or with ``monitor`` off, is a :class:`MonitorSetupError`. ``sinks_of``: another router (the
    inspector that routed a design to these weights) whose sinks take this router's events and frame metrics, in place
    of sinks of its own (``alerts``, ``webhook`` and ``metrics_port`` are then that router's).
    """
    if not monitor and (alerts or webhook or baseline):
        raise MonitorSetupError("drift monitoring is off (--no-monitor): drop --baseline, --alerts and --webhook, or turn it on")
    found = _baseline(str(baseline) if baseline else None, embedded) if monitor else None
    if found is None:
        if alerts or webhook:
            raise MonitorSetupError(
                "--alerts/--webhook need a drift baseline: the weights carry none; pass --baseline (from `defect-detector calibrate`)"
            )
        if metrics_port is None and sinks_of is None:
            return None
    if found is not None and list(found.layer_names) != list(layer_names):
        raise MonitorSetupError(
            f"the baseline covers layers {found.layer_names} but the model reports {list(layer_names)}; calibrate again with these weights"
        )
    cfg = _thresholds(monitor_config)  # read (and checked) even when only metrics are served
    detector = DriftDetector(found, cfg) if found is not None else None
    sinks = [sinks_of.forwarding()] if sinks_of is not None else _sinks(detector is not None, alerts, webhook, metrics_port, metrics_addr)
    return AlertRouter(detector, sinks, layer_names)


def _thresholds(monitor_config: str | os.PathLike[str] | MonitorConfig | None) -> MonitorConfig:
    """``monitor_config`` as it is (a :class:`MonitorConfig`), read from its YAML path, or the defaults (None)."""
    if isinstance(monitor_config, MonitorConfig):
        return monitor_config
    return load_monitor_config(monitor_config) if monitor_config else MonitorConfig()


def _sinks(
    drift: bool, alerts: str | os.PathLike[str] | None, webhook: str | None, metrics_port: int | None, metrics_addr: str
) -> list[Sink]:
    """The sinks asked for: the log when ``drift`` is detected, then JSONL ``alerts``, the ``webhook`` and Prometheus on
    ``metrics_port``. :class:`MonitorSetupError` (the ones started closed again) when one cannot start."""
    sinks: list[Sink] = []
    try:
        if drift:
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
    return sinks


def _baseline(path: str | None, embedded: dict[str, Any] | None) -> Baseline | None:
    try:
        if path:
            return Baseline.load(path)
        if embedded:
            return Baseline.from_dict(embedded, where="artifact meta.json baseline")
    except BaselineError as exc:
        raise MonitorSetupError(str(exc)) from exc
    return None
