"""Command line: thin subcommands over the package modules.

Every command exits non-zero with one clear line on stderr for bad arguments,
missing files or malformed data.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

from defect_detector.cli.errors import error_line, is_expected  # noqa: E402
from defect_detector.cli.parser import build_parser  # noqa: E402

log = logging.getLogger("defect_detector")


class CliError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


def _check_imgsz(imgsz: int | None, flag: str = "--imgsz") -> None:
    """``imgsz`` (None: the model's) must be a multiple of 32 (the model's largest stride) and at least 64."""
    if imgsz is not None and (imgsz < 64 or imgsz % 32):
        raise CliError(f"{flag} must be a multiple of 32 and >= 64, got {imgsz}")


def _cmd_convert(args: argparse.Namespace) -> None:
    from defect_detector.core.io import atomic_write_json
    from defect_detector.data import convert

    out = Path(args.out)
    if args.format == "deeppcb":
        split = Path(args.split)
        if not split.is_absolute() and not split.exists():
            split = Path(args.src) / split
        coco = convert.deeppcb_to_coco(args.src, split, templates=args.templates)
    elif args.format == "voc":
        coco = convert.voc_to_coco(args.src, args.images or args.src, args.classes.split(",") if args.classes else None)
    else:
        if not args.classes:
            raise CliError("convert yolo needs --classes name1,name2,...")
        coco = convert.yolo_to_coco(args.src, args.images or args.src, args.classes.split(","))
    if args.references:
        if args.format == "deeppcb":
            raise CliError("convert deeppcb: --references is for voc and yolo (DeepPCB's templates are found by name)")
        missing = convert.attach_references(coco, args.references)
        if missing:
            log.warning(
                "%d of %d images have no reference in %s (first: %s)", len(missing), len(coco["images"]), args.references, missing[0]
            )
    root = Path(coco.setdefault("info", {}).get("images_root", args.src)).resolve()
    coco["info"]["images_root"] = os.path.relpath(root, out.resolve().parent)
    atomic_write_json(out, coco)
    print(f"wrote {out}: {len(coco['images'])} images, {len(coco['annotations'])} annotations")
    if args.val_groups:
        train, val = convert.split_deeppcb_by_group(coco, [g.strip() for g in args.val_groups.split(",")])
        for name, part in (("train", train), ("val", val)):
            path = out.with_name(f"{out.stem}_{name}.json")
            atomic_write_json(path, part)
            print(f"wrote {path}: {len(part['images'])} images, {len(part['annotations'])} annotations")


def _cmd_train(args: argparse.Namespace) -> None:
    from defect_detector.core.config import load_config
    from defect_detector.engine.trainer import fit

    cfg = load_config(args.config, args.overrides)
    run_dir = fit(cfg, resume=args.resume, exist_ok=args.exist_ok, threads=args.threads)
    print(f"run folder: {run_dir}")


def _cmd_val(args: argparse.Namespace) -> None:
    import torch

    from defect_detector.core.io import atomic_write_json
    from defect_detector.data.collate import build_loader
    from defect_detector.data.dataset import CocoDetectionDataset
    from defect_detector.engine.evaluate import evaluate_predictions, per_group_map, predict_dataset
    from defect_detector.model.checkpoint import load_checkpoint
    from defect_detector.model.summary import model_summary

    _check_imgsz(args.imgsz)
    loaded = load_checkpoint(args.weights)
    cfg = loaded.config
    torch.set_num_threads(args.threads) if args.threads else None
    pairs = cfg.model.in_channels == 2
    register = pairs and cfg.data.register_val and not args.no_register
    dataset = CocoDetectionDataset(
        args.data, args.images, loaded.class_names, args.imgsz or cfg.data.imgsz, None, "skip", reference=pairs, register=register
    )
    if not dataset.label_to_cat_id and dataset.unknown_categories:
        raise CliError(
            f"{args.data}: none of its categories ({', '.join(dataset.unknown_categories)}) is a class of the model "
            f"({', '.join(loaded.class_names)}); categories are matched by name"
        )
    loader = build_loader(dataset, args.batch_size, train=False, workers=args.workers, seed=0)
    tta = args.tta or "none"
    f1_conf = cfg.eval.f1_conf if args.conf is None else args.conf
    cross_class = (cfg.eval.cross_class_iou, cfg.eval.cross_class_factor)
    predictions = predict_dataset(
        loaded.model, loader, torch.device("cpu"), cfg.eval.conf, cfg.eval.nms_iou, cfg.eval.max_det, tta=tta, cross_class=cross_class
    )
    metrics = evaluate_predictions(dataset.coco, predictions, dataset.label_to_cat_id, loaded.class_names, f1_conf)
    summary = model_summary(loaded.model, dataset.imgsz)
    keys = ("map50", "map50_95", "per_class", "absent_classes", "f1_iou033", "precision", "recall", "operating_points")
    out = {k: metrics[k] for k in keys}
    out.update({"f1_conf": f1_conf, "tta": tta, "images": len(predictions), "weights": str(loaded.path), **summary})
    out["per_group"] = per_group_map(dataset.coco, predictions, dataset.label_to_cat_id, loaded.class_names)
    pairing = f" (image + reference, {'registered' if register else 'as given'})" if pairs else ""
    _print_val(out, f"1x{cfg.model.in_channels}x{dataset.imgsz}x{dataset.imgsz}{pairing}", dataset.report())
    if args.out:
        atomic_write_json(args.out, out)
        print(f"wrote {args.out}")
    if args.plots:
        from defect_detector.engine.trainer import write_eval_plots

        write_eval_plots(Path(args.plots), metrics, predictions, dataset, loaded.class_names, f1_conf)
        print(f"wrote PR curves, confusion matrix (score >= {f1_conf}) and a grid of predictions to {args.plots}")


def _print_val(out: dict[str, Any], model_input: str, report: str) -> None:
    """The ``val`` summary lines of the metrics ``out`` (as ``val --out`` writes them)."""
    print(f"model: {out['params'] / 1e6:.3f} M parameters, {out['gflops']:.3f} GFLOPs at {model_input}")
    print(f"images: {out['images']} (skipped: {report})")
    print(f"mAP@0.5 {out['map50']:.4f}  mAP@0.5:0.95 {out['map50_95']:.4f}  (test-time augmentation: {out['tta']})")
    print("per-class AP@0.5: " + ", ".join(f"{k} {v:.4f}" for k, v in out["per_class"].items()))
    if out["absent_classes"]:
        print(f"not scored (not among the json's categories): {', '.join(out['absent_classes'])}")
    print(
        f"DeepPCB protocol (IoU>0.33, score>={out['f1_conf']}): "
        f"precision {out['precision']:.4f} recall {out['recall']:.4f} F1 {out['f1_iou033']:.4f}"
    )
    for group, m in out["per_group"].items():
        print(f"  {group} ({m['images']} images, ranked alone): mAP@0.5 {m['map50']:.4f}  mAP@0.5:0.95 {m['map50_95']:.4f}")
    for op in out["operating_points"]:
        at = f"conf >= {op['conf']:.4g}" if op["conf"] is not None else f"not reached (max {op['achieved_recall']:.2%}, all detections)"
        print(f"catch {op['recall']:.1%} of defects (any class, IoU>0.33): {at} -> {op['false_calls_per_image']:.2f} false calls/board")


def _cmd_info(args: argparse.Namespace) -> None:
    from defect_detector.model.checkpoint import load_checkpoint
    from defect_detector.model.summary import model_summary

    loaded = load_checkpoint(args.weights)
    summary = model_summary(loaded.model, loaded.config.data.imgsz)
    info = {"weights": str(loaded.path), "class_names": list(loaded.class_names), **summary, "metrics": loaded.metrics}
    print(json.dumps(info, indent=2))


def _cmd_export(args: argparse.Namespace) -> None:
    from defect_detector import export
    from defect_detector.model.checkpoint import DEFAULT_WEIGHTS, load_checkpoint

    weights = Path(args.weights) if args.weights else DEFAULT_WEIGHTS
    _check_imgsz(args.imgsz)
    if args.half and args.format == "onnx":
        raise CliError("--half applies to TorchScript; for float16 ONNX build a TensorRT engine: trtexec --onnx=MODEL --fp16")
    if args.portable and (args.format != "torchscript" or args.half):
        raise CliError("--portable applies to a float32 TorchScript export (ONNX and --half are always portable; --triton implies it)")
    if args.triton and args.format != "torchscript":
        raise CliError("--triton writes a TorchScript model repository; drop --format onnx")
    loaded = load_checkpoint(weights)
    baseline = args.baseline  # a file, or None for the checkpoint's own baseline; checked against the model by the export
    if args.triton:
        report = export.export_triton(loaded, args.triton, imgsz=args.imgsz, half=args.half, baseline=baseline)
        print(f"wrote Triton model repository {report['repository']} ({report['config']}, {report['path']})")
    elif args.format == "onnx":
        out = Path(args.out or f"{weights.stem}.onnx")
        report = export.export_onnx(loaded, out, imgsz=args.imgsz, baseline=baseline)
        print(f"wrote {out} ({report['bytes'] / 1e6:.2f} MB, opset {report['opset']}) and {export.onnx_meta_path(out)}")
    else:
        out = Path(args.out or f"{weights.stem}{'.fp16' if args.half else ''}.torchscript.pt")
        report = export.export_torchscript(loaded, out, imgsz=args.imgsz, half=args.half, baseline=baseline, portable=args.portable)
        cpu_only = " with CPU-only oneDNN conv+SiLU kernels (--portable for CUDA)" if report["meta"]["cpu_only"] else ""
        print(f"wrote {out} ({report['bytes'] / 1e6:.2f} MB, traced on {report['device']}{cpu_only})")
        opt = report["meta"]["optimize_for_inference"]
        print(f"optimize_for_inference: {'applied' if opt['applied'] else 'not applied'} ({opt['reason']})")
    meta = report["meta"]
    print(
        f"input [B, {meta['channels']}, {meta['imgsz']}, {meta['imgsz']}] {meta['input']['dtype']}; "
        f"classes {', '.join(meta['class_names'])}; "
        f"{len(meta['layers'])} monitored layers; "
        f"baseline {'none' if meta['baseline'] is None else 'embedded from ' + report['baseline_source']}"
    )
    parity = report["parity"]
    if parity is None:
        print(f"parity check skipped: {report.get('parity_skipped', 'unavailable')}")
    else:
        print(
            f"parity vs eager on {report['parity_images']} images: max abs diff pred {parity['pred']:.3g} "
            f"(boxes {parity['boxes']:.3g} px, scores {parity['scores']:.3g}), stats {parity['stats']:.3g}"
        )


def _cmd_predict(args: argparse.Namespace) -> None:
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
        if args.save_json and args.conf > EvalConfig.conf:  # the score threshold val uses for mAP
            print(
                f"note: --save-json keeps detections scoring >= {args.conf}; "
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


def _cmd_bench(args: argparse.Namespace) -> None:
    from benchmarks.bench import load_bench_model, run_bench
    from defect_detector.core.io import atomic_write_json

    def int_list(text: str, name: str) -> list[int]:
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError as exc:
            raise CliError(f"{name} must be comma-separated integers, got {text!r}") from exc
        if not values or min(values) < 1:
            raise CliError(f"{name} must list integers >= 1, got {text!r}")
        return values

    batches, threads = int_list(args.batches, "--batches"), int_list(args.threads, "--threads")
    _check_imgsz(args.imgsz)
    loaded, description = load_bench_model(args.weights, args.config)
    result = run_bench(loaded, description, args.imgsz, batches, threads, args.iters, args.yolo)
    for row in result["latency"]:
        print(
            f"{row['candidate']:>22} b{row['batch']} t{row['threads']}: median {row['median_ms']:8.2f} ms  p90 {row['p90_ms']:8.2f} ms  "
            f"{row['images_per_s']:7.2f} img/s  {row['gflops_per_s']:6.2f} GFLOP/s"
        )
    for row in result["pipeline"]:
        print(
            f"pipeline {row['frame']}: preprocess {row['preprocess_ms']:.2f} ms, postprocess {row['postprocess_ms']:.2f} ms, "
            f"decode {row['decode_ms']:.2f} ms (inside the model)"
        )
    tta = result["tta"]
    print(
        f"test-time augmentation, model time per {args.imgsz}x{args.imgsz} frame at {tta['threads']} threads: "
        + ", ".join(f"{mode} {t['median_ms']:.1f} ms (x{t['paired_vs_none']:.2f})" for mode, t in tta["modes"].items())
    )
    print(f"drift statistics overhead (%): {result['derived']['stats_overhead_pct']}")
    if result["derived"]["onednn_fusion_ratio"]:
        print(f"latency ratio oneDNN-fused / portable artifact: {result['derived']['onednn_fusion_ratio']}")
    if result["derived"]["yolo_ratio"]:
        print(f"latency ratio ours/YOLOv8n at batch 1: {result['derived']['yolo_ratio']}")
    reg, target = result["registration"], result["targets"]
    print(
        f"registration of the reference at {reg['frame']} ({reg['torch_threads']} torch / {reg['cv2_threads']} OpenCV threads), "
        f"against one model pass of {reg['model']['median_ms']:.2f} ms: every frame {reg['register_full']['median_ms']:.2f} ms "
        f"(x{reg['register_full_ratio']:.3f}, target <= {target['registration_full_ratio_max']}), fixed golden board "
        f"{reg['register_fixed']['median_ms']:.2f} ms (x{reg['register_fixed_ratio']:.3f}), transform reused "
        f"{reg['register_reuse']['median_ms']:.2f} ms (x{reg['register_reuse_ratio']:.3f}, "
        f"target <= {target['registration_reuse_ratio_max']})"
    )
    if args.out:
        atomic_write_json(args.out, result)
        print(f"wrote {args.out}")


def _cmd_synth(args: argparse.Namespace) -> None:
    from defect_detector.data.synth import write_synthetic_dataset

    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError as exc:
        raise CliError(f"--size must look like WIDTHxHEIGHT, e.g. 2048x1536, got {args.size!r}") from exc
    if min(width, height) < 64 or args.n < 1:
        raise CliError(f"need --n >= 1 and both sides >= 64, got --n {args.n} --size {args.size}")
    ann = write_synthetic_dataset(args.out, args.n, height, width, args.seed)
    print(f"wrote {args.n} boards of {width}x{height} and {ann}")


def _cmd_strip(args: argparse.Namespace) -> None:
    import torch

    from defect_detector.core.io import atomic_torch_save
    from defect_detector.model.checkpoint import load_checkpoint, strip_checkpoint

    loaded = load_checkpoint(args.weights)  # validates it loads into its model
    baseline = None
    if args.baseline:  # checked against the monitored layers, input size and classes, as export checks it
        from defect_detector.core.constants import DEFAULT_LAYERS
        from defect_detector.export.baseline import export_baseline
        from defect_detector.monitor.hooks import resolve_layers

        layers = resolve_layers(loaded.model, DEFAULT_LAYERS)
        baseline = export_baseline(loaded, args.baseline, layers, loaded.config.data.imgsz)[0]
    ckpt = torch.load(args.weights, map_location="cpu", weights_only=True)
    atomic_torch_save(strip_checkpoint(ckpt, args.set or [], baseline), args.out)
    stripped = load_checkpoint(args.out)
    print(f"wrote {args.out} ({Path(args.out).stat().st_size / 1e6:.2f} MB): EMA weights, config, class names, metrics")
    if args.set:
        print(f"config set: {', '.join(args.set)}")
    carried = f"from {args.baseline}" if args.baseline else "kept from the input" if stripped.baseline else "none"
    print(f"drift baseline: {carried} (predict monitors drift whenever the weights carry one)")


def _cmd_average(args: argparse.Namespace) -> None:
    from defect_detector.core.io import atomic_torch_save
    from defect_detector.model.checkpoint import average_checkpoints, load_checkpoint

    ckpt = average_checkpoints(args.weights, args.set or [])
    atomic_torch_save(ckpt, args.out)
    load_checkpoint(args.out)  # the written file loads with weights_only=True into its model
    print(f"wrote {args.out} ({Path(args.out).stat().st_size / 1e6:.2f} MB): mean of {len(args.weights)} checkpoints' weights")
    if args.set:
        print(f"config set: {', '.join(args.set)}")


def _cmd_calibrate(args: argparse.Namespace) -> None:
    from defect_detector.inspect.calibrate import run_calibrate

    _check_imgsz(args.imgsz)
    baseline = run_calibrate(args.weights, args.data, args.images, args.out, imgsz=args.imgsz, max_images=args.max_images, batch=args.batch)
    print(f"wrote {args.out}: {len(baseline.layer_names)} layers from {baseline.count} frames")


def _cmd_demo(args: argparse.Namespace) -> None:
    from defect_detector.cli.demo import run_demo

    run_demo(args.out, threads=args.threads)


_COMMANDS = {
    "convert": _cmd_convert,
    "train": _cmd_train,
    "val": _cmd_val,
    "synth": _cmd_synth,
    "strip": _cmd_strip,
    "average": _cmd_average,
    "calibrate": _cmd_calibrate,
    "demo": _cmd_demo,
    "info": _cmd_info,
    "export": _cmd_export,
    "predict": _cmd_predict,
    "bench": _cmd_bench,
}


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; the error boundary: an expected failure (see ``cli_errors``) prints one line
    ``defect-detector CMD: error: <file>: <problem>`` and returns 2, Ctrl-C returns 130."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        _COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print(f"defect-detector {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if not is_expected(exc, (CliError,)):
            raise
        print(f"defect-detector {args.command}: error: {error_line(exc)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
