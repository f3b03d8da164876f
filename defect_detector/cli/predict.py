"""``defect-detector predict``: inspect frames through the Inspector."""

from __future__ import annotations

import argparse
from typing import Any

from defect_detector.cli.errors import CliError
from defect_detector.cli.options import TTA_HELP, add_monitor_arguments


def add_parser(sub: Any) -> None:
    """The ``predict`` subcommand."""
    p = sub.add_parser("predict", help="detect defects in an image, folder, glob, video, camera or stream")
    p.add_argument("source", help="image, folder, glob, video file, camera index or rtsp/http URL")
    p.add_argument(
        "--weights",
        help="exported artifact (.pt2, .torchscript.pt, .onnx, .int8.onnx) or checkpoint "
        "(default: bundled DeepPCB model; with --reference the bundled reference model)",
    )
    p.add_argument(
        "--reference",
        help="golden (defect-free) board: one image for every frame, or a folder with each frame's reference under its relative path "
        "(else its file name); registered to each frame, frames that do not match are skipped and counted",
    )
    p.add_argument("--conf", type=float, help="score threshold (default: the operating point the weights store, eval.f1_conf)")
    p.add_argument("--iou", type=float, help="NMS IoU threshold, per class (default: the weights' eval.nms_iou)")
    p.add_argument("--max-det", type=int, default=100, help="calls kept per model input: a frame, or each tile of a tiled frame")
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
    add_monitor_arguments(p)


def run(args: argparse.Namespace) -> None:
    from defect_detector.core.config import EvalConfig
    from defect_detector.inspect.inspector import Inspector, summary_line
    from defect_detector.model.tta import orientations

    inspector = Inspector.load(
        args.weights,
        reference=args.reference,
        device=args.device,
        threads=args.threads,
        tta=args.tta,
        conf=args.conf,
        iou=args.iou,
        max_det=args.max_det,
        tile=args.tile,
        monitor=not args.no_monitor,
        baseline=args.baseline,
        monitor_config=args.monitor_config,
        alerts=args.alerts,
        webhook=args.webhook,
        metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr,
    )
    with inspector:
        runtime = inspector.runtime
        what = "golden-template model (image + reference)" if runtime.channels == 2 else "single-image model"
        n = len(orientations(runtime.tta))
        passes = f"{n} model passes per frame (test-time augmentation {runtime.tta})" if n > 1 else "one model pass per frame"
        drift = "on (baseline from " + ("--baseline" if args.baseline else "the weights") + ")" if inspector.monitoring else "off"
        print(f"model: {runtime.path.name} ({runtime.kind}, {runtime.device}, {what}); {passes}; drift monitoring {drift}")
        conf = inspector.pipeline.conf
        print(f"operating point: score >= {conf:g}, NMS IoU {inspector.pipeline.iou:g}" + (" (the weights')" if args.conf is None else ""))
        if args.save_json and conf > EvalConfig.conf:  # the score threshold val uses for mAP
            print(
                f"note: --save-json keeps detections scoring >= {conf:g}; "
                f"to score mAP (pycocotools) keep the whole ranking: --conf {EvalConfig.conf}"
            )
        summary = inspector.run(args.source, args.batch, args.max_frames, args.latest_only, args.save_json, args.save_dir)
    print(summary_line(summary))
    for kind, path in summary["outputs"].items():
        print(f"wrote {kind}: {path}")
    if args.alerts:
        print(f"drift events: {args.alerts}")
    if summary["gave_up"]:
        raise CliError(
            f"{args.source}: the stream failed and could not be reopened, so the run stopped early "
            f"(after {summary['frames']} frames, {summary['reconnects']} reconnects; the outputs above hold those frames)"
        )
