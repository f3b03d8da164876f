"""`defect-detector demo`: the whole product on bundled data, offline, in a few minutes.

1. Predict with the bundled model on the sample boards in ``data/samples/`` (8 DeepPCB boards from board
   groups held out of training, and two synthetic 2048x1536 frames): annotated images + a JSON of detections.
2. Score the DeepPCB samples against their annotations (pycocotools).
   Then inspect the same boards against their golden images (``data/samples/golden/``) with the bundled
   golden-template model, and score that too.
3. Replay the sample boards as a camera stream whose lens gets dirty half-way (Gaussian blur, sigma 2) and
   show the drift alert firing against the bundled baseline, then the recovery when the lens is clean again.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, DEFAULT_WEIGHTS

if TYPE_CHECKING:
    from defect_detector.deploy.runtime import Runtime

SAMPLES = Path(__file__).resolve().parent.parent / "data" / "samples"
DEFAULT_BASELINE = DEFAULT_WEIGHTS.with_name("deeppcb_baseline.json")
CLEAN_FRAMES = 48
FAULT_FRAMES = 40
OPERATING_CONF = 0.4
"""The bundled model's operating point (best DeepPCB F-score on the held-out groups, README)."""
REFERENCE_CONF = 0.4
"""The bundled golden-template model's operating point (best DeepPCB F-score on the held-out groups, README)."""
DEMO_REFERENCE = 32
"""The demo stream is short: its own normal level is learned from 32 frames (the default, 256, suits a live camera)."""


def run_demo(out_dir: str | Path = "out/demo", samples: str | Path = SAMPLES, threads: int | None = None) -> dict:
    """Run the three demo steps, writing under ``out_dir``; returns a summary dict."""
    from defect_detector.config import MonitorConfig
    from defect_detector.data.dataset import load_image_gray
    from defect_detector.deploy.predict import run_predict, summary_line
    from defect_detector.deploy.runtime import Runtime
    from defect_detector.monitor.alerts import AlertRouter, JsonlSink
    from defect_detector.monitor.baseline import Baseline
    from defect_detector.monitor.drift import DriftDetector
    from defect_detector.monitor.faults import defocus

    samples, out = Path(samples), Path(out_dir)
    boards, frames = samples / "deeppcb", samples / "frames"
    if not (boards / "annotations.json").is_file():
        raise FileNotFoundError(f"{boards}: sample boards not found (the demo runs from a clone of the repository)")
    runtime = Runtime.load(None, device="auto", threads=threads)
    print(f"model: {runtime.path.name} ({runtime.kind}, {runtime.device}), classes: {', '.join(runtime.class_names)}")

    summaries = {}
    for name, source in (("boards", boards), ("frames", frames)):
        args = argparse.Namespace(
            source=str(source),
            weights=None,
            conf=OPERATING_CONF,
            iou=0.5,
            max_det=100,
            save_json=str(out / f"{name}.json"),
            save_dir=str(out / name),
            device="auto",
            threads=threads,
            batch=4,
            latest_only=False,
            max_frames=None,
        )
        summaries[name] = run_predict(args, runtime=runtime)
        print(f"[1] {name}: {summary_line(summaries[name])}")

    metrics = _score_boards(boards, runtime, OPERATING_CONF)
    print(
        f"[2] 8 held-out DeepPCB boards vs. their annotations: mAP@0.5 {metrics['map50']:.3f}, DeepPCB F-score at score "
        f"{OPERATING_CONF} {metrics['f1_iou033']:.3f} (precision {metrics['precision']:.3f}, recall {metrics['recall']:.3f})"
    )

    golden = samples / "golden"
    reference_runtime = Runtime.load(DEFAULT_REFERENCE_WEIGHTS, device="auto", threads=threads)
    args = argparse.Namespace(**{**vars(args), "source": str(boards), "reference": str(golden), "conf": REFERENCE_CONF})
    args.save_json, args.save_dir = str(out / "boards_golden.json"), str(out / "boards_golden")
    summaries["boards_golden"] = run_predict(args, runtime=reference_runtime)
    print(f"[1] boards against their golden images: {summary_line(summaries['boards_golden'])}")
    golden_metrics = _score_boards(boards, reference_runtime, REFERENCE_CONF, golden)
    print(
        f"[2] the same boards inspected against their golden images ({golden}/, {reference_runtime.path.name}): "
        f"mAP@0.5 {golden_metrics['map50']:.3f}, F-score at score {REFERENCE_CONF} {golden_metrics['f1_iou033']:.3f} "
        f"(precision {golden_metrics['precision']:.3f}, recall {golden_metrics['recall']:.3f})"
    )

    baseline = Baseline.load(DEFAULT_BASELINE)
    alerts_path = out / "alerts.jsonl"
    alerts_path.unlink(missing_ok=True)
    detector = DriftDetector(baseline, MonitorConfig(reference=DEMO_REFERENCE))
    router = AlertRouter(detector, [JsonlSink(alerts_path)], runtime.layer_names)
    images = [load_image_gray(p) for p in sorted(boards.glob("*.jpg"))]
    schedule = [("clean", False)] * CLEAN_FRAMES + [("dirty lens", True)] * FAULT_FRAMES + [("clean", False)] * CLEAN_FRAMES
    print(f"[3] replaying {len(schedule)} frames: lens dirty (blur sigma 2) from frame {CLEAN_FRAMES} to {CLEAN_FRAMES + FAULT_FRAMES - 1}")
    events = []
    logging.getLogger("defect_detector.monitor").setLevel(logging.WARNING)
    for index, (_, dirty) in enumerate(schedule):
        image = images[index % len(images)]
        result = runtime.predict([defocus(image, 2.0) if dirty else image])[0]
        for event in router.on_frame(index, "demo camera", result.stats, None, len(result)):
            events.append(event.to_dict())
            print(f"    frame {index:3d}: {event.event.upper()} ({event.severity}): {event.reason}")
    router.close()
    if not any(e["event"] == "drift" for e in events):
        print("    no drift alert fired: check the baseline and the monitor thresholds")

    print("\noutputs:")
    print(f"  annotated boards     {out / 'boards'}/   detections {out / 'boards.json'}")
    print(f"  annotated frames     {out / 'frames'}/   detections {out / 'frames.json'}")
    print(f"  against golden board {out / 'boards_golden'}/   detections {out / 'boards_golden.json'}")
    print(f"  drift alerts         {alerts_path}")
    print("next:")
    print("  train on your COCO data   defect-detector train --config configs/default.yaml data.train=... data.val=...")
    print("  export for Jetson/CUDA    defect-detector export --half --out model.torchscript.pt   (see deploy/JETSON.md)")
    print("  golden-template line      defect-detector predict frames/ --reference golden.png   (README: capturing a golden image)")
    print("  watch a camera            defect-detector predict rtsp://camera/stream --alerts alerts.jsonl --metrics-port 9100")
    return {"predict": summaries, "samples_metrics": metrics, "golden_metrics": golden_metrics, "events": events}


def _score_boards(boards: Path, runtime: Runtime, f1_conf: float, golden: Path | None = None) -> dict:
    """COCO mAP (from all detections down to score 0.001, as pycocotools expects) and DeepPCB F-score at
    ``f1_conf`` of ``runtime`` on the images of ``boards/annotations.json``; with ``golden``, each board is
    inspected against its golden image there, registered as ``predict --reference`` does."""
    from defect_detector.data.dataset import CocoDetectionDataset, load_image_gray
    from defect_detector.deploy.references import References
    from defect_detector.engine.evaluate import evaluate_predictions

    dataset = CocoDetectionDataset(boards / "annotations.json", None, runtime.class_names, runtime.imgsz)
    references = References(golden) if golden is not None else None
    predictions = {}
    for image_id in dataset.image_ids:
        name = dataset.coco.imgs[image_id]["file_name"]
        frame = load_image_gray(dataset.images_root / name)
        refs = [references.align(frame, name)[0]] if references is not None else None
        (det,) = runtime.predict([frame], conf=0.001, references=refs)
        predictions[image_id] = {"boxes": det.boxes, "scores": det.scores, "labels": det.labels}
    return evaluate_predictions(dataset.coco, predictions, dataset.label_to_cat_id, runtime.class_names, f1_conf=f1_conf)
