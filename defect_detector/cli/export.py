"""``defect-detector export``: weights -> a deployable artifact (.pt2, TorchScript, ONNX float32 or int8, Triton)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from defect_detector.cli.errors import CliError, check_imgsz

FORMATS = ("pt2", "torchscript", "onnx")
BASELINE_IMAGES = 300
"""Frames of ``--data`` the int8 model's drift baseline is calibrated on (as the bundled baselines were)."""


def add_parser(sub: Any) -> None:
    """The ``export`` subcommand."""
    p = sub.add_parser(
        "export",
        help="export weights as .pt2 (AOTInductor; default on a recent torch), TorchScript, ONNX, int8 ONNX, or a Triton repository",
    )
    p.add_argument("--weights", help="training checkpoint (default: bundled DeepPCB model)")
    p.add_argument(
        "--format",
        choices=FORMATS,
        help="pt2: torch.export + AOTInductor, for the CPU or CUDA of this machine and its torch (default where it can be built); "
        "torchscript: Jetson and older torch (default with --half, --triton, or without a C++ compiler); onnx: ONNX Runtime, TensorRT",
    )
    p.add_argument("--out", help="output file (default: <weights name>.pt2, .torchscript.pt, .onnx or .int8.onnx in the current folder)")
    p.add_argument("--imgsz", type=int, help="input size (default: the model's)")
    p.add_argument("--half", action="store_true", help="float16 TorchScript for CUDA / Jetson (traced on CUDA when available)")
    p.add_argument(
        "--portable",
        action="store_true",
        help="float32 TorchScript that also runs on CUDA (default when traced on the CPU: faster oneDNN conv+SiLU kernels, CPU only; "
        "implied by --triton)",
    )
    p.add_argument(
        "--int8",
        action="store_true",
        help="int8 ONNX for CPUs (ONNX Runtime static quantization), calibrated on --data; layer statistics stay float",
    )
    p.add_argument("--data", help="--int8: COCO json of training images to calibrate on (golden-template models: with 'reference' entries)")
    p.add_argument(
        "--calib-images",
        type=int,
        default=100,
        help="--int8: calibration frames, spread over --data (default 100; 16 more are held back to check the int8 model's accuracy)",
    )
    p.add_argument(
        "--int8-for",
        choices=["cpu", "tensorrt"],
        default="cpu",
        help="--int8: cpu (ONNX Runtime, uint8 activations; default) or tensorrt (symmetric int8 for trtexec --int8, deploy/JETSON.md)",
    )
    p.add_argument(
        "--accept-loss",
        action="store_true",
        help="--int8: write the int8 model even when it loses more accuracy against float32 than the tolerance on the "
        "held-back images (0.01 mAP or 1%% of their defects; refused by default)",
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


def choose_format(args: argparse.Namespace) -> str:
    """The format to write: ``--format``, else ``onnx`` for ``--int8``, else the one ``--out``'s suffix names
    (:func:`format_from_suffix`), else ``torchscript`` for ``--half``, ``--portable`` or ``--triton`` or where ``.pt2``
    cannot be built (told on stdout), else ``pt2``. ``CliError`` for a contradiction."""
    from defect_detector.export.pt2 import pt2_unavailable_reason

    if args.int8:
        _check_int8_flags(args)
        return "onnx"
    if args.data:
        raise CliError("--data is the --int8 calibration set; add --int8")
    if args.accept_loss:
        raise CliError("--accept-loss applies to --int8 (its accuracy check); add --int8")
    if args.portable and (args.half or args.format not in (None, "torchscript")):
        raise CliError("--portable applies to a float32 TorchScript export (ONNX and --half are always portable; --triton implies it)")
    fmt = args.format or format_from_suffix(args.out)
    if fmt is not None and fmt != "torchscript":
        if args.half:
            raise CliError(
                f"--half applies to TorchScript, not {fmt}; for float16 ONNX build a TensorRT engine: trtexec --onnx=MODEL --fp16"
            )
        if args.triton:
            raise CliError("--triton writes a TorchScript model repository; drop --format")
    if fmt is not None:
        return fmt
    if args.half or args.portable or args.triton:
        return "torchscript"
    reason = pt2_unavailable_reason()
    if reason is not None:
        print(f"exporting TorchScript: .pt2 needs AOTInductor here, and {reason}")
        return "torchscript"
    return "pt2"


def _check_int8_flags(args: argparse.Namespace) -> None:
    """``CliError`` for a flag that contradicts ``--int8`` (another format, no ``--data``, a TorchScript-only flag)."""
    if args.format not in (None, "onnx"):
        raise CliError("--int8 writes an int8 ONNX model; drop --format or use --format onnx")
    if not args.data:
        raise CliError("--int8 needs --data CALIB.json: training images to calibrate on (never the validation set)")
    if args.half or args.triton or args.portable:
        raise CliError("--int8 takes none of --half, --portable, --triton")


def format_from_suffix(out: str | None) -> str | None:
    """The format an ``--out`` name asks for: ``.pt2``, ``.onnx``, ``.torchscript.pt`` (else None)."""
    name = (out or "").lower()
    if name.endswith(".pt2"):
        return "pt2"
    if name.endswith(".onnx"):
        return "onnx"
    if name.endswith(".torchscript.pt") or name.endswith(".torchscript"):
        return "torchscript"
    return None


def _writer_call(args: argparse.Namespace, fmt: str, weights: Path) -> tuple[str, Path, dict[str, Any]]:
    """``(writer, out, options)``: the writer of ``export/exporter.py`` ``FORMATS`` the flags ask for, where it writes
    and its keyword options."""
    common = {"imgsz": args.imgsz, "baseline": args.baseline}  # baseline: a file, or None for the checkpoint's own
    if args.triton:
        return "triton", Path(args.triton), common | {"half": args.half}
    if args.int8:
        options = {"data": args.data, "max_images": args.calib_images, "target": args.int8_for, "accept_loss": args.accept_loss}
        return "int8", Path(args.out or f"{weights.stem}.int8.onnx"), common | options
    if fmt in ("onnx", "pt2"):
        return fmt, Path(args.out or f"{weights.stem}.{fmt}"), common
    out = Path(args.out or f"{weights.stem}{'.fp16' if args.half else ''}.torchscript.pt")
    return "torchscript", out, common | {"half": args.half, "portable": args.portable}


def run(args: argparse.Namespace) -> None:
    from defect_detector import export
    from defect_detector.export.exporter import export_model
    from defect_detector.model.checkpoint import DEFAULT_WEIGHTS, load_checkpoint

    weights = Path(args.weights) if args.weights else DEFAULT_WEIGHTS
    check_imgsz(args.imgsz)
    fmt = choose_format(args)
    if args.calib_images < 1:
        raise CliError(f"--calib-images must be >= 1, got {args.calib_images}")
    loaded = load_checkpoint(weights)
    writer, out, options = _writer_call(args, fmt, weights)
    report = export_model(loaded, writer, out, **options)
    if writer == "triton":
        print(f"wrote Triton model repository {report['repository']} ({report['config']}, {report['path']})")
    elif writer == "int8":
        shift = "n/a (no baseline)" if report["stats_shift"] is None else f"{report['stats_shift']:.3f} baseline spreads"
        if report["meta"]["baseline"] is not None and not args.baseline:
            report["meta"] = _int8_baseline(out, args.data, BASELINE_IMAGES)
            report["baseline_source"] = f"calibration through the int8 model on {args.data}"
        print(
            f"wrote {out} ({report['bytes'] / 1e6:.2f} MB, int8, calibrated on {report['calibration_frames']} frames of {args.data}) "
            f"and {export.onnx_meta_path(out)}"
        )
        check = report["check"]
        print(
            f"accuracy check on {check.frames} held-back frames: the int8 model keeps {check.matched} of the float32 model's "
            f"{check.float_calls} calls at the operating point and adds {check.int8_calls - check.matched} (agreement F {check.f1:.3f})"
        )
        accuracy = report["accuracy"]
        if accuracy is not None:
            over = accuracy.losses()
            verdict = f"OVER THE TOLERANCE, accepted (--accept-loss): {'; '.join(over)}" if over else "within the tolerance"
            print(f"accuracy {accuracy.line()}: {verdict}")
        print(f"layer statistics computed in float on the int8 layer outputs: largest shift from float32 {shift} of the float baseline")
    elif writer == "onnx":
        print(f"wrote {out} ({report['bytes'] / 1e6:.2f} MB, opset {report['opset']}) and {export.onnx_meta_path(out)}")
    elif writer == "pt2":
        print(
            f"wrote {out} ({report['bytes'] / 1e6:.2f} MB, AOTInductor for {report['device']}, compiled in {report['compile_s']:.0f} s, "
            f"torch {report['meta']['torch_version']}: load it with the same torch)"
        )
    else:
        cpu_only = " with CPU-only oneDNN conv+SiLU kernels (--portable for CUDA)" if report["meta"]["cpu_only"] else ""
        print(f"wrote {out} ({report['bytes'] / 1e6:.2f} MB, traced on {report['device']}{cpu_only})")
        opt = report["meta"]["optimize_for_inference"]
        if opt["applied"]:
            print(f"optimize_for_inference: applied ({opt['reason']})")
    _print_summary(report)


def _int8_baseline(out: Path, data: str, max_images: int) -> dict[str, Any]:
    """Calibrate the drift baseline of the int8 model ``out`` on the ``data`` frames (as ``calibrate`` does) and embed it."""
    import tempfile

    from defect_detector.export.int8 import embed_baseline
    from defect_detector.jobs.calibrate import run_calibrate

    with tempfile.TemporaryDirectory() as tmp:
        baseline = run_calibrate(out, data, None, Path(tmp) / "baseline.json", max_images=max_images, progress=False)
    return embed_baseline(out, baseline.to_dict(), f"calibrated through the int8 model on {data}")


def _print_summary(report: dict[str, Any]) -> None:
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
    if "parity_exported" in report:
        exported = report["parity_exported"]
        print(
            f"vs the exported eager deploy model (BatchNorm folded): boxes {exported['boxes']:.3g} px, scores {exported['scores']:.3g}, "
            f"stats {exported['stats']:.3g}"
        )
