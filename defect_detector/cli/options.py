"""Flags several subcommands share."""

from __future__ import annotations

import argparse

PRECISION_CHOICES = ("auto", "float32", "bf16")
PRECISION_HELP = (
    "a checkpoint's precision: auto (float32 on the CPU, float16 on CUDA), float32, or bf16 (bfloat16 on a CPU with "
    "native bfloat16, AVX512-BF16 or AMX: the same accuracy on the held-out groups at 0.75-0.8x the model time)"
)
TTA_HELP = (
    "test-time augmentation: none (default), flip2, flip4 or d8: 1, 2, 4 or 8 orientations per image, averaged; "
    "each costs one model pass (d8: 8x the model time per frame)"
)


def add_monitor_arguments(parser: argparse.ArgumentParser) -> None:
    """The drift-monitoring flags of ``predict``."""
    group = parser.add_argument_group("drift monitoring (on whenever the weights carry a baseline)")
    group.add_argument("--no-monitor", action="store_true", help="do not watch layer statistics for drift")
    group.add_argument("--baseline", metavar="PATH", help="drift baseline JSON from `calibrate` (default: the one the weights carry)")
    group.add_argument("--alerts", metavar="PATH", help="append drift / recovered / rebaseline events to this JSONL file")
    group.add_argument("--webhook", metavar="URL", help="POST each drift event as JSON to this http(s) URL")
    group.add_argument("--metrics-port", metavar="N", type=int, help="serve Prometheus metrics on this port (0: any free port)")
    group.add_argument("--metrics-addr", metavar="ADDR", default="0.0.0.0", help="address for the metrics server (default 0.0.0.0)")
    group.add_argument("--monitor-config", metavar="YAML", help="drift thresholds: a YAML with a `monitor:` section or the section itself")
