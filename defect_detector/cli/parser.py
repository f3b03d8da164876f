"""The argument parser of ``defect-detector``: one small function per subcommand (``cli.py`` runs them)."""

from __future__ import annotations

import argparse
from typing import Any

from defect_detector.cli import review, station
from defect_detector.core.version import __version__

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


def _add_convert(sub: Any) -> None:
    """The ``convert`` subcommand."""
    p = sub.add_parser("convert", help="convert DeepPCB / Pascal VOC / YOLO annotations to COCO json")
    p.add_argument("format", choices=["deeppcb", "voc", "yolo"])
    p.add_argument("src", help="DeepPCB root, VOC xml folder or YOLO labels folder")
    p.add_argument("--split", default="trainval.txt", help="DeepPCB split file (relative to SRC or a path)")
    p.add_argument("--images", help="images folder (VOC/YOLO; default SRC)")
    p.add_argument("--classes", help="comma-separated class names (YOLO: required, in id order)")
    p.add_argument("--val-groups", help="DeepPCB: comma-separated board groups to hold out; also writes OUT_train.json and OUT_val.json")
    p.add_argument(
        "--templates",
        action="store_true",
        help="DeepPCB: also list each pair's defect-free template (<id>_temp.jpg) as an image without defects "
        "(training negatives; never in the OUT_val.json of --val-groups)",
    )
    p.add_argument(
        "--references",
        help="VOC/YOLO: folder of golden (defect-free) images; each image's reference is the file with its relative path, "
        "else its file name",
    )
    p.add_argument("--out", required=True, help="output COCO json")


def _add_train(sub: Any) -> None:
    """The ``train`` subcommand."""
    p = sub.add_parser("train", help="train a detector from a YAML config")
    p.add_argument("--config", required=True, help="YAML config, e.g. configs/deeppcb.yaml")
    p.add_argument("--resume", action="store_true", help="continue from runs/<name>/weights/last.pt")
    p.add_argument("--exist-ok", action="store_true", help="replace an earlier run of the same name")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: the cores not busy with other work)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.epochs=3")


def _add_val(sub: Any) -> None:
    """The ``val`` subcommand."""
    p = sub.add_parser("val", help="evaluate weights on a COCO json (mAP, per-class AP, DeepPCB F-score)")
    p.add_argument("--weights", help="checkpoint (default: bundled DeepPCB model)")
    p.add_argument("--data", required=True, help="COCO json")
    p.add_argument("--images", help="images root (default: from the json)")
    p.add_argument("--imgsz", type=int, help="input size (default: the model's)")
    p.add_argument("--conf", type=float, help="score threshold for the DeepPCB F-score (default: the model's eval.f1_conf)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--tta", help=TTA_HELP)
    p.add_argument(
        "--no-register",
        action="store_true",
        help="reference models: use each json reference as given (already aligned) instead of registering it to its image",
    )
    p.add_argument("--out", help="write metrics JSON here")
    p.add_argument("--plots", help="write PR curves, confusion matrix and a prediction grid (PNG) to this folder")


def _add_synth(sub: Any) -> None:
    """The ``synth`` subcommand."""
    p = sub.add_parser("synth", help="write synthetic PCB boards with all six defect types and a COCO json")
    p.add_argument("--out", required=True, help="output folder (images/ and annotations.json)")
    p.add_argument("--n", type=int, default=32, help="number of boards")
    p.add_argument("--size", default="640x640", help="WIDTHxHEIGHT, e.g. 2048x1536")
    p.add_argument("--seed", type=int, default=0)


def _add_strip(sub: Any) -> None:
    """The ``strip`` subcommand."""
    p = sub.add_parser("strip", help="inference-only copy of a checkpoint (EMA weights, config, metrics; no optimizer state)")
    p.add_argument("weights", help="training checkpoint, e.g. runs/NAME/weights/best.pt")
    p.add_argument("--out", required=True)
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override for the result, e.g. eval.f1_conf=0.5 (repeatable)")
    p.add_argument("--baseline", help="drift baseline JSON from `calibrate` to carry in the result (checked against the model)")


def _add_average(sub: Any) -> None:
    """The ``average`` subcommand."""
    p = sub.add_parser("average", help="inference checkpoint whose weights are the mean of fine-tunes of one parent (a model soup)")
    p.add_argument("weights", nargs="+", help="two or more checkpoints of one architecture (runs/A/weights/best.pt ...)")
    p.add_argument("--out", required=True)
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override for the result, e.g. eval.f1_conf=0.4 (repeatable)")


def _add_calibrate(sub: Any) -> None:
    """The ``calibrate`` subcommand."""
    p = sub.add_parser("calibrate", help="drift baseline: layer statistics of the model over clean reference images")
    p.add_argument("--weights", help="checkpoint or exported TorchScript (default: bundled DeepPCB model)")
    p.add_argument("--data", required=True, help="COCO json of clean reference images (training or validation split)")
    p.add_argument("--images", help="images root (default: from the json)")
    p.add_argument("--imgsz", type=int, help="input size for checkpoints (default: the model's)")
    p.add_argument("--max-images", type=int, help="use this many images, spread evenly over the file")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--out", required=True, help="baseline JSON to write")


def _add_demo(sub: Any) -> None:
    """The ``demo`` subcommand."""
    p = sub.add_parser("demo", help="predict on the bundled samples, then show a drift alert for a simulated dirty lens")
    p.add_argument("--out", default="out/demo", help="output folder")
    p.add_argument("--threads", type=int, help="torch CPU threads")


def _add_info(sub: Any) -> None:
    """The ``info`` subcommand."""
    p = sub.add_parser("info", help="print parameters, FLOPs and metrics of a checkpoint")
    p.add_argument("--weights", help="checkpoint (default: bundled DeepPCB model)")


def _add_export(sub: Any) -> None:
    """The ``export`` subcommand."""
    p = sub.add_parser("export", help="export weights as TorchScript (default) or ONNX, or a Triton model repository")
    p.add_argument("--weights", help="training checkpoint (default: bundled DeepPCB model)")
    p.add_argument("--format", choices=["torchscript", "onnx"], default="torchscript")
    p.add_argument("--out", help="output file (default: <weights name>.torchscript.pt or .onnx in the current folder)")
    p.add_argument("--imgsz", type=int, help="input size (default: the model's)")
    p.add_argument("--half", action="store_true", help="float16 TorchScript for CUDA / Jetson (traced on CUDA when available)")
    p.add_argument(
        "--portable",
        action="store_true",
        help="float32 TorchScript that also runs on CUDA (default when traced on the CPU: faster oneDNN conv+SiLU kernels, CPU only; "
        "implied by --triton)",
    )
    p.add_argument(
        "--baseline",
        help="drift baseline JSON to embed in meta.json (default: the checkpoint's own, if any); "
        "its layers, imgsz and class names must match the export",
    )
    p.add_argument(
        "--triton",
        metavar="DIR",
        help="write a Triton model repository into DIR instead of --out (always the portable graph, for a GPU server)",
    )


def _add_predict(sub: Any) -> None:
    """The ``predict`` subcommand."""
    p = sub.add_parser("predict", help="detect defects in an image, folder, glob, video, camera or stream")
    p.add_argument("source", help="image, folder, glob, video file, camera index or rtsp/http URL")
    p.add_argument(
        "--weights", help="TorchScript export or checkpoint (default: bundled DeepPCB model; with --reference the bundled reference model)"
    )
    p.add_argument(
        "--reference",
        help="golden (defect-free) board: one image for every frame, or a folder with each frame's reference under its relative path "
        "(else its file name); registered to each frame, frames that do not match are skipped and counted",
    )
    p.add_argument("--conf", type=float, default=0.25, help="score threshold")
    p.add_argument("--iou", type=float, default=0.5, help="NMS IoU threshold (per class)")
    p.add_argument("--max-det", type=int, default=100, help="detections kept per frame")
    p.add_argument("--save-json", help="write detections (bbox xywh in original pixels) here; video/streams also get a .jsonl")
    p.add_argument("--save-dir", help="write annotated images (or an .mp4 for video/streams) here")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--batch", type=int, default=1, help="frames per model call (files and video; streams use 1)")
    p.add_argument("--latest-only", action="store_true", help="live streams: drop stale frames, always process the newest")
    p.add_argument("--max-frames", type=int, help="stop after N frames")
    p.add_argument("--tta", help=TTA_HELP)
    tile = p.add_mutually_exclusive_group()
    tile.add_argument(
        "--tile",
        dest="tile",
        action="store_true",
        default=None,
        help="inspect each frame in overlapping tiles at the model's training scale (default: when letterboxing would shrink it)",
    )
    tile.add_argument("--no-tile", dest="tile", action="store_false", help="letterbox each whole frame to the model's input size")
    p.add_argument(
        "--db", metavar="URL", help="record every frame into this station database (file path, sqlite:///... or postgresql://...)"
    )
    add_monitor_arguments(p)


def _add_bench(sub: Any) -> None:
    """The ``bench`` subcommand."""
    p = sub.add_parser("bench", help="latency/throughput of the eager model and the TorchScript export (optionally vs YOLOv8n)")
    p.add_argument("--weights", help="checkpoint (default: bundled model, else random init of --config)")
    p.add_argument("--config", default="configs/deeppcb.yaml", help="architecture used when no weights exist")
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--batches", default="1,8", help="comma-separated batch sizes")
    p.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    p.add_argument("--iters", type=int, default=20, help="timed calls per candidate at batch 1 (a quarter of that for larger batches)")
    p.add_argument("--yolo", action="store_true", help="also time a traced YOLOv8n from ultralytics' yolov8n.yaml (needs ultralytics)")
    p.add_argument("--out", help="write the results JSON here")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="defect-detector", description="PCB defect detection on grayscale images.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_convert(sub)
    _add_train(sub)
    _add_val(sub)
    _add_synth(sub)
    _add_strip(sub)
    _add_average(sub)
    _add_calibrate(sub)
    _add_demo(sub)
    _add_info(sub)
    _add_export(sub)
    _add_predict(sub)
    _add_bench(sub)
    station.add_parser(sub)
    review.add_parser(sub)
    return parser
