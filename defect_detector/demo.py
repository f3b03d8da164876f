"""`defect-detector demo`: the whole product on bundled data, offline, in a few minutes.

1. Predict with the bundled model on the sample boards in ``data/samples/`` (8 DeepPCB boards from board
   groups held out of training, and two synthetic 2048x1536 frames): annotated images + a JSON of detections.
2. Score the DeepPCB samples against their annotations (pycocotools).
3. Replay the sample boards as a camera stream whose lens gets dirty half-way (Gaussian blur, sigma 2) and
   show the drift alert firing against the bundled baseline, then the recovery when the lens is clean again.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from defect_detector.model.checkpoint import DEFAULT_WEIGHTS

SAMPLES = Path(__file__).resolve().parent.parent / "data" / "samples"
DEFAULT_BASELINE = DEFAULT_WEIGHTS.with_name("deeppcb_baseline.json")
CLEAN_FRAMES = 40
FAULT_FRAMES = 40


def run_demo(out_dir: str | Path = "out/demo", samples: str | Path = SAMPLES, threads: int | None = None) -> dict:
    """Run the three demo steps, writing under ``out_dir``; returns a summary dict."""
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
            conf=0.3,
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

    metrics = _score_boards(boards, out / "boards.json", runtime.class_names)
    print(
        f"[2] 8 held-out DeepPCB boards vs. their annotations: mAP@0.5 {metrics['map50']:.3f}, "
        f"DeepPCB F-score {metrics['f1_iou033']:.3f} (precision {metrics['precision']:.3f}, recall {metrics['recall']:.3f})"
    )

    baseline = Baseline.load(DEFAULT_BASELINE)
    alerts_path = out / "alerts.jsonl"
    alerts_path.unlink(missing_ok=True)
    router = AlertRouter(DriftDetector(baseline), [JsonlSink(alerts_path)], runtime.layer_names)
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


def _score_boards(boards: Path, detections_json: Path, class_names: tuple[str, ...]) -> dict:
    """COCO mAP and DeepPCB F-score of the saved detections against ``boards/annotations.json``."""
    import torch

    from defect_detector.boxes import xywh_to_xyxy
    from defect_detector.data.dataset import CocoDetectionDataset
    from defect_detector.engine.evaluate import evaluate_predictions

    dataset = CocoDetectionDataset(boards / "annotations.json", None, class_names, 640)
    by_name = {info["file_name"]: image_id for image_id, info in dataset.coco.imgs.items()}
    rows: dict[int, list[dict]] = {image_id: [] for image_id in dataset.coco.imgs}
    for det in json.loads(detections_json.read_text()):
        rows[by_name[det["file_name"]]].append(det)
    predictions = {
        image_id: {
            "boxes": xywh_to_xyxy(torch.tensor([d["bbox"] for d in dets], dtype=torch.float32).reshape(-1, 4)),
            "scores": torch.tensor([d["score"] for d in dets], dtype=torch.float32),
            "labels": torch.tensor([class_names.index(d["category_name"]) for d in dets], dtype=torch.int64),
        }
        for image_id, dets in rows.items()
    }
    return evaluate_predictions(dataset.coco, predictions, dataset.label_to_cat_id, class_names, f1_conf=0.3)
