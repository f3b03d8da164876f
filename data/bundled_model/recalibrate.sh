#!/usr/bin/env bash
# Recalibrate the drift baselines the bundled weights carry, and nothing else: after a change of baseline format, or
# when a retrained model replaces defect_detector/weights/deeppcb.pt or deeppcb_ref.pt. Run from the repository root:
#
#     bash data/bundled_model/recalibrate.sh                      # both bundled models
#     bash data/bundled_model/recalibrate.sh deeppcb_ref          # one of them
#
# Each model is calibrated on the same 300 training boards (`--max-images 300`, spread evenly over the boards of
# deeppcb_train.json, every board with its golden image): the single-image model on the boards, the golden-template
# model on each board against its golden image (a relative baseline). deeppcb_train.json also lists each golden image
# as an image of its own, paired with itself (the siamese model learns "no difference" from them); they are left out
# here (data/deeppcb/deeppcb_train_boards.json), since a golden image against itself has a ratio of exactly 1: half the
# 300 frames would be such pairs, the baseline's level would sit halfway to 1, and real boards of an unseen design or
# look would score far higher (measured: up to 4.3 on DeepPCB boards, alerts on rendered looks, against 2.8 and none).
# `strip --baseline` then writes the baseline into the weights and keeps every tensor as it was. Then check the drift
# targets with `python -m benchmarks.evaluate_drift --threads 1` and `python -m benchmarks.drift_unseen --threads 1`
# (designs left out of calibration), and update the drift section of the model cards.
#
# DEEPPCB: DeepPCB's training split (default ../shared/datasets/deeppcb); DD: the CLI (default `defect-detector`,
# e.g. DD="python -m defect_detector.cli"); PYTHON: the interpreter that writes the boards json (default `python`).
set -euo pipefail
DEEPPCB=${DEEPPCB:-../shared/datasets/deeppcb}
DD=${DD:-defect-detector}
PYTHON=${PYTHON:-python}
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(deeppcb deeppcb_ref)
if [ ! -f data/deeppcb/deeppcb_train.json ]; then
    $DD convert deeppcb "$DEEPPCB" --split trainval.txt --out data/deeppcb/deeppcb.json --val-groups 50600,92000
fi
$PYTHON - data/deeppcb/deeppcb_train.json data/deeppcb/deeppcb_train_boards.json <<'EOF'
import json, sys
raw = json.load(open(sys.argv[1], encoding="utf-8"))
boards = [e for e in raw["images"] if e.get("reference") != e["file_name"]]
ids = {e["id"] for e in boards}
raw.update(images=boards, annotations=[a for a in raw["annotations"] if a["image_id"] in ids])
json.dump(raw, open(sys.argv[2], "w", encoding="utf-8"))
print(f"{sys.argv[2]}: {len(boards)} boards (golden images paired with themselves left out)")
EOF
for model in "${models[@]}"; do
    weights=defect_detector/weights/$model.pt
    $DD calibrate --weights "$weights" --data data/deeppcb/deeppcb_train_boards.json --max-images 300 --out "data/deeppcb/${model}_baseline.json"
    $DD strip "$weights" --baseline "data/deeppcb/${model}_baseline.json" --out "$weights"
done
