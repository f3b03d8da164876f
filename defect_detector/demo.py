"""`defect-detector demo`: the whole product on bundled data, offline, in a few minutes.

1. Predict with the bundled model on the sample boards in ``data/samples/`` (8 DeepPCB boards from board
   groups held out of training, and two synthetic 2048x1536 frames): annotated images + a JSON of detections.
2. Score the DeepPCB samples against their annotations (pycocotools).
3. Replay the sample boards as a camera stream whose lens gets dirty half-way (Gaussian blur, sigma 2) and
   show the drift alert firing against the bundled baseline, then the recovery when the lens is clean again.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from defect_detector.model.checkpoint import DEFAULT_WEIGHTS

if TYPE_CHECKING:
    from defect_detector.deploy.runtime import Runtime

SAMPLES = Path(__file__).resolve().parent.parent / "data" / "samples"
DEFAULT_BASELINE = DEFAULT_WEIGHTS.with_name("deeppcb_baseline.json")
CLEAN_FRAMES = 48
FAULT_FRAMES = 40
OPERATING_CONF = 0.4
"""The bundled model's operating point (best DeepPCB F-score on the held-out groups, README)."""
DEMO_REFERENCE = 32
"""The demo stream is short: its own normal level is learned from 32 frames (the default, 256, suits a live camera)."""


def run_demo(out_dir: str | Path = "out/demo", samples: str | Path = SAMPLES, threads: int | None = None) -> dict:
    """Run the three demo steps, writing under ``out_dir``; returns a summary dict."""
    from defect_detector.config import MonitorConfig
    from defect_detector.data.dataset import load_image_gray
    from defect_detector.deploy.predict import run_predict, summary_line
    from defect_detector.deploy.runtime import Runtime
    from defect_detector.monitor.alerts import AlertRouter, JsonlSink
    from defect_detector.monitor.drift import Baseline, DriftDetector
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
    print(f"  drift alerts         {alerts_path}")
    print("next:")
    print("  train on your COCO data   defect-detector train --config configs/default.yaml data.train=... data.val=...")
    print("  export for Jetson/CUDA    defect-detector export --half --out model.torchscript.pt   (see deploy/JETSON.md)")
    print("  watch a camera            defect-detector predict rtsp://camera/stream --alerts alerts.jsonl --metrics-port 9100")
    return {"predict": summaries, "samples_metrics": metrics, "events": events}


def _score_boards(boards: Path, runtime: Runtime, f1_conf: float) -> dict:
    """COCO mAP (from all detections down to score 0.001, as pycocotools expects) and DeepPCB F-score at
    ``f1_conf`` of ``runtime`` on the images of ``boards/annotations.json``."""
    from defect_detector.data.dataset import CocoDetectionDataset, load_image_gray
    from defect_detector.engine.evaluate import evaluate_predictions

    dataset = CocoDetectionDataset(boards / "annotations.json", None, runtime.class_names, runtime.imgsz)
    predictions = {}
    for image_id in dataset.image_ids:
        frame = load_image_gray(dataset.images_root / dataset.coco.imgs[image_id]["file_name"])
        (det,) = runtime.predict([frame], conf=0.001)
        predictions[image_id] = {"boxes": det.boxes, "scores": det.scores, "labels": det.labels}
    return evaluate_predictions(dataset.coco, predictions, dataset.label_to_cat_id, runtime.class_names, f1_conf=f1_conf)
