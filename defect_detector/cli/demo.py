"""``defect-detector demo``: the whole product on bundled data, offline, in a few minutes.

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
from pathlib import Path
from typing import Any

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
CLEAN_FRAMES = 64
FAULT_FRAMES = 40
DEMO_REFERENCE = 32
"""The demo stream is short: its line reference is set from 32 clean frames (the default, 256, suits a live camera)."""


def run_demo(out_dir: str | Path = "out/demo", samples: str | Path = SAMPLES, threads: int | None = None) -> dict:
    """Run the three demo steps, writing under ``out_dir``; returns a summary dict."""
    from defect_detector.inspect.inspector import Inspector
    from defect_detector.inspect.run_summary import summary_line
    from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS

    samples, out = Path(samples), Path(out_dir)
    boards, frames = samples / "deeppcb", samples / "frames"
    if not (boards / "annotations.json").is_file():
        raise FileNotFoundError(f"{boards}: sample boards not found (the demo runs from a clone of the repository)")
    summaries = {}
    with Inspector.load(None, threads=threads) as inspector:
        runtime = inspector.runtime
        conf = inspector.pipeline.conf
        print(f"model: {runtime.path.name} ({runtime.kind}, {runtime.device}), classes: {', '.join(runtime.class_names)}")
        print(f"operating point (stored in the weights): score >= {conf:g}")
        for name, source in (("boards", boards), ("frames", frames)):
            summaries[name] = inspector.run(str(source), batch=4, save_json=str(out / f"{name}.json"), save_dir=str(out / name))
            print(f"[1] {name}: {summary_line(summaries[name])}")
    metrics = _score_boards(boards, None)
    print(
        f"[2] 8 held-out DeepPCB boards vs. their annotations: mAP@0.5 {metrics['map50']:.3f}, DeepPCB F-score at score "
        f"{metrics['f1_conf']:g} {metrics['f1_iou033']:.3f} (precision {metrics['precision']:.3f}, recall {metrics['recall']:.3f})"
    )

    golden = samples / "golden"
    with Inspector.load(None, reference=golden, threads=threads) as inspector:
        summaries["boards_golden"] = inspector.run(
            str(boards), batch=4, save_json=str(out / "boards_golden.json"), save_dir=str(out / "boards_golden")
        )
    print(f"[1] boards against their golden images: {summary_line(summaries['boards_golden'])}")
    golden_metrics = _score_boards(boards, golden)
    print(
        f"[2] the same boards inspected against their golden images ({golden}/, {DEFAULT_REFERENCE_WEIGHTS.name}): "
        f"mAP@0.5 {golden_metrics['map50']:.3f}, F-score at score {golden_metrics['f1_conf']:g} {golden_metrics['f1_iou033']:.3f} "
        f"(precision {golden_metrics['precision']:.3f}, recall {golden_metrics['recall']:.3f})"
    )
    alerts_path = out / "alerts.jsonl"
    events = _replay_dirty_lens(boards, alerts_path, threads)

    print("\noutputs:")
    print(f"  annotated boards     {out / 'boards'}/   detections {out / 'boards.json'}")
    print(f"  annotated frames     {out / 'frames'}/   detections {out / 'frames.json'}")
    print(f"  against golden board {out / 'boards_golden'}/   detections {out / 'boards_golden.json'}")
    print(f"  drift alerts         {alerts_path}")
    print("next:")
    print("  train on your COCO data   defect-detector train --config configs/default.yaml data.train=... data.val=...")
    print("  export for Jetson/CUDA    defect-detector export --half --out model.torchscript.pt   (see deploy/JETSON.md)")
    print("  golden-template line      defect-detector predict frames/ --reference golden.png   (docs/golden.md: capturing a golden image)")
    print("  watch a camera            defect-detector predict rtsp://camera/stream --alerts alerts.jsonl --metrics-port 9100")
    db = out / "station.db"
    print(f"  review the calls          defect-detector predict {boards} --db {db} && defect-detector station --db {db}")
    return {"predict": summaries, "samples_metrics": metrics, "golden_metrics": golden_metrics, "events": events}


def _replay_dirty_lens(boards: Path, alerts_path: Path, threads: int | None) -> list[dict]:
    """Step 3: the sample boards as a camera stream whose lens is blurred (sigma 2) for ``FAULT_FRAMES`` frames,
    monitored against the baseline the bundled weights carry; events go to ``alerts_path`` and are printed."""
    import logging

    from defect_detector.core.config import MonitorConfig
    from defect_detector.data.images import load_image_gray
    from defect_detector.inspect.inspector import Inspector
    from defect_detector.monitor.faults import defocus

    alerts_path.unlink(missing_ok=True)
    images = [load_image_gray(p) for p in sorted(boards.glob("*.jpg"))]
    schedule = [False] * CLEAN_FRAMES + [True] * FAULT_FRAMES + [False] * CLEAN_FRAMES
    print(f"[3] replaying {len(schedule)} frames: lens dirty (blur sigma 2) from frame {CLEAN_FRAMES} to {CLEAN_FRAMES + FAULT_FRAMES - 1}")
    logging.getLogger("defect_detector.monitor").setLevel(logging.WARNING)
    events = []
    cfg = MonitorConfig(reference=DEMO_REFERENCE)
    with Inspector.load(None, threads=threads, monitor_config=cfg, alerts=alerts_path) as inspector:
        for index, dirty in enumerate(schedule):
            image = images[index % len(images)]
            result = inspector.inspect(defocus(image, 2.0) if dirty else image, name=f"frame {index}", source="demo camera")
            for event in result.events:
                events.append(event.to_dict())
                print(f"    frame {index:3d}: {event.event.upper()} ({event.severity}): {event.reason}")
    if not any(e["event"] == "drift" for e in events):
        print("    no drift alert fired: check the baseline and the monitor thresholds")
    return events


def _score_boards(boards: Path, golden: Path | None) -> dict:
    """COCO mAP and DeepPCB F-score (at the weights' operating point) of the bundled model on ``boards/annotations.json``,
    scored as ``val`` scores (``jobs/validate.py``, the frame pipeline); with ``golden``, the bundled golden-template
    model, each board against its golden image there (registered as ``predict`` registers it)."""
    import json
    import os
    import tempfile

    from defect_detector.jobs.validate import validate
    from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS

    ann = boards / "annotations.json"
    if golden is None:
        return validate(None, ann, progress=False).metrics
    coco = json.loads(ann.read_text())
    root = boards.resolve()
    for image in coco["images"]:
        image["reference"] = os.path.relpath((golden / Path(image["file_name"]).name).resolve(), root)
    with tempfile.TemporaryDirectory() as tmp:
        paired = Path(tmp) / "annotations.json"
        coco.setdefault("info", {})["images_root"] = str(root)
        paired.write_text(json.dumps(coco))
        return validate(DEFAULT_REFERENCE_WEIGHTS, paired, progress=False).metrics


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="predict on the bundled samples, then show a drift alert for a simulated dirty lens")
    p.add_argument("--out", default="out/demo", help="output folder")
    p.add_argument("--threads", type=int, help="torch CPU threads")


def run(args: argparse.Namespace) -> None:
    run_demo(args.out, threads=args.threads)
