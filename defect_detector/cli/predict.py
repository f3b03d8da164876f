"""``defect-detector predict``: inspect frames through the Inspector."""

from __future__ import annotations

import argparse
import signal
from typing import TYPE_CHECKING, Any

from defect_detector.cli.errors import CliError, NotInspected
from defect_detector.cli.options import PRECISION_CHOICES, PRECISION_HELP, TTA_HELP, add_monitor_arguments

if TYPE_CHECKING:
    from defect_detector.inspect.stop_signals import StopSignals


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
    p.add_argument(
        "--save-json",
        help="write one record per frame here: verdict (pass, pass_suspect, fail, not_inspected), reason, "
        "calls (bbox xywh in original pixels); plus a .jsonl written frame by frame (kept after a crash)",
    )
    p.add_argument(
        "--json-layout",
        choices=["frames", "detections"],
        default="frames",
        help="frames (default): one record per frame; detections: v0.8's flat list of calls (frames without calls are absent)",
    )
    p.add_argument("--report", help="write a CSV here, row by row: one row per frame (name, verdict, reason, calls per class, drift state)")
    p.add_argument("--save-dir", help="write annotated images (or an .mp4 for video/streams) here; frames not inspected are stamped")
    p.add_argument(
        "--allow-skips",
        action="store_true",
        help="exit 0 even when some frames were not inspected or passed as suspect (pass_suspect: a critical drift alert, or "
        "an untaught look; default: exit 3, so no unseen board passes unnoticed)",
    )
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    p.add_argument(
        "--threads", type=int, help="torch CPU threads (default: the cores other work leaves free, re-chosen every 2 s as that changes)"
    )
    p.add_argument("--batch", type=int, default=1, help="frames per model call (files and video; streams use 1)")
    p.add_argument("--latest-only", action="store_true", help="live streams: drop stale frames, always process the newest")
    p.add_argument("--max-frames", type=int, help="stop after N frames")
    p.add_argument("--tta", help=TTA_HELP)
    p.add_argument("--precision", choices=PRECISION_CHOICES, default="auto", help=PRECISION_HELP)
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
    _add_line_arguments(p)
    add_monitor_arguments(p)


def _add_line_arguments(p: argparse.ArgumentParser) -> None:
    """What a line tells ``predict`` beside its frames: where the board's serial is, and a panel's board outlines."""
    p.add_argument(
        "--trace-pattern",
        metavar="REGEX",
        help="read each frame's board serial, lot and work order from its file name: a regular expression with named groups "
        "serial, lot, order, e.g. '(?P<serial>SN\\d+)_(?P<lot>L\\d+)' (the serial identifies a board for first-pass yield)",
    )
    p.add_argument(
        "--boards",
        metavar="FILE",
        help="a panel's board outlines: JSON or YAML {name: [x1, y1, x2, y2]} in the golden image's pixels (a single-image "
        "model: the frame's); each board gets its own verdict",
    )


def run(args: argparse.Namespace) -> None:
    from defect_detector.inspect.stop_signals import StopSignals

    with StopSignals() as stop:  # SIGTERM / SIGHUP / SIGINT: finish the frame, write the outputs, exit 128 + signal
        _predict(args, stop)
        stop.check()  # a signal while the sinks were closing


def _predict(args: argparse.Namespace, stop: StopSignals) -> None:
    from defect_detector.core.safe_text import mask_secrets
    from defect_detector.inspect.inspector import Inspector
    from defect_detector.inspect.options import InspectOptions
    from defect_detector.inspect.run_summary import summary_line

    try:
        options = InspectOptions.of_args(args)
    except ValueError as exc:  # "max_det: must be >= 1, got 0": the flag's name
        key, _, why = str(exc).partition(": ")
        raise CliError(f"--{key.replace('_', '-')}: {why}") from None
    inspector = Inspector.from_options(options)
    with inspector:
        _print_setup(inspector, args)
        summary = inspector.run(
            args.source,
            args.batch,
            args.max_frames,
            args.latest_only,
            args.save_json,
            args.save_dir,
            report=args.report,
            json_layout=args.json_layout,
            stop=stop,
        )
    summary["alerts_undelivered"] = max(summary["alerts_undelivered"], inspector.undelivered_at_close)  # final, after close
    summary["unrecorded"] = max(summary["unrecorded"], inspector.unrecorded_at_close)
    print(mask_secrets(summary_line(summary)))
    for path in summary["recovered"]:
        print(f"recovered from a run that did not finish: {path}")
    for kind, path in summary["outputs"].items():
        print(f"wrote {kind}: {path}")
    if args.alerts:
        print(f"drift events: {args.alerts}")
    if args.db:
        db = mask_secrets(args.db)  # the password of a postgresql:// URL never reaches the terminal or a log
        print(f"station database: {db} (serve it: defect-detector station --db {db})")
    _raise_for(summary, args)


def _print_setup(inspector: Any, args: argparse.Namespace) -> None:
    """What the run will do: the model, its passes, drift monitoring and the operating point."""
    from defect_detector.core.config import EvalConfig
    from defect_detector.model.tta import orientations

    runtime = inspector.runtime
    what = "golden-template model (image + reference)" if runtime.channels == 2 else "single-image model"
    n = len(orientations(runtime.tta))
    passes = f"{n} model passes per frame (test-time augmentation {runtime.tta})" if n > 1 else "one model pass per frame"
    drift = "on (baseline from " + ("--baseline" if args.baseline else "the weights") + ")" if inspector.monitoring else "off"
    print(f"model: {runtime.path.name} ({runtime.kind}, {runtime.device}, {what}); {passes}; drift monitoring {drift}")
    conf = inspector.pipeline.conf
    print(f"operating point: score >= {conf:g}, NMS IoU {inspector.pipeline.iou:g}" + (" (the weights')" if args.conf is None else ""))
    if inspector.pipeline.design_conf:
        taught = {d["key"]: d["name"] for d in runtime.meta.get("taught") or []}
        points = ", ".join(f"{taught.get(k, k)} score >= {c:g}" for k, c in sorted(inspector.pipeline.design_conf.items()))
        print(f"taught designs, each at its own point: {points}")
    if inspector.options is not None:
        print(
            "designs unlike its training looks go to the bundled weights nearer their look, at those weights' own point "
            "(each frame's record names the weights and threshold that decided it; the summary counts them)"
        )
    if args.save_json and conf > EvalConfig().conf:  # the score threshold val uses for mAP
        print(f"note: --save-json keeps detections scoring >= {conf:g}; to score mAP (pycocotools) keep the whole ranking: ", end="")
        print(f"--conf {EvalConfig().conf}")


def _raise_for(summary: dict[str, Any], args: argparse.Namespace) -> None:
    """The run's exit, after its outputs are written: the signal that stopped it, an output that could not be finished
    (a full disk), frames the station database did not record, a stream given up or a truncated video (exit 2), or
    frames not inspected or passed as suspect (a critical drift alert, an untaught look; exit 3 unless ``--allow-skips``)."""
    from defect_detector.core.errors import Stopped

    if summary["signal"] is not None:
        raise Stopped(getattr(signal, summary["signal"]), summary["signal"])
    lost = summary.get("outputs_failed") or []
    if lost:
        more = f" (and {len(lost) - 1} more output(s): see the warnings above)" if len(lost) > 1 else ""
        raise CliError(f"{lost[0].split('; the other outputs go on')[0]}{more}; the other outputs are finished")
    if summary.get("unrecorded"):
        raise CliError(
            f"--db {args.db}: {summary['unrecorded']} of {summary['frames']} frames were not recorded in the station database "
            "(lost or unreachable during the run: see the warnings above); the other outputs are finished"
        )
    if summary["gave_up"]:
        raise CliError(
            f"{args.source}: the stream failed and could not be reopened, so the run stopped early "
            f"(after {summary['frames']} frames, {summary['reconnects']} reconnects; the outputs above hold those frames)"
        )
    if summary["ended_early"]:  # any container: a truncated video is a failed run, as one that does not open is
        raise CliError(
            f"{args.source}: the video ended after {summary['frames']} of the {summary['expected_frames']} frames its header "
            "lists (truncated or corrupt file); the outputs above hold those frames"
        )
    skipped, suspect = summary["verdicts"]["not_inspected"], summary["verdicts"]["pass_suspect"]
    if (skipped or suspect) and not args.allow_skips:
        why = ", ".join(f"{reason} x{n}" for reason, n in sorted(summary["not_inspected"].items()))
        parts = [f"{skipped} of {summary['frames']} frames were NOT INSPECTED ({why})"] if skipped else []
        kinds = " or ".join(sorted(summary.get("pass_suspect", {}))) or "drift critical"
        parts += [f"{suspect} passed as suspect (pass_suspect: {kinds})"] if suspect else []
        raise NotInspected(f"{'; '.join(parts)}; --allow-skips accepts that")
