"""``defect-detector export``: weights -> a deployable artifact."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from defect_detector.cli.errors import CliError, check_imgsz


def add_parser(sub: Any) -> None:
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


def run(args: argparse.Namespace) -> None:
    from defect_detector import export
    from defect_detector.model.checkpoint import DEFAULT_WEIGHTS, load_checkpoint

    weights = Path(args.weights) if args.weights else DEFAULT_WEIGHTS
    check_imgsz(args.imgsz)
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
