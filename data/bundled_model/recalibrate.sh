#!/usr/bin/env bash
# Recalibrate the drift baselines the bundled weights carry, and nothing else: after a change of baseline format, or
# when a retrained model replaces defect_detector/weights/deeppcb.pt or deeppcb_ref.pt. Run from the repository root:
#
#     bash data/bundled_model/recalibrate.sh                      # both bundled models
#     bash data/bundled_model/recalibrate.sh deeppcb_ref          # one of them
#
# Each model is calibrated on the same 300 training boards (`--max-images 300`, spread evenly over
# deeppcb_train.json, every board with its golden image): the single-image model on the boards, the golden-template
# model on each board against its golden image (a relative baseline). `strip --baseline` then writes the baseline into
# the weights and keeps every tensor as it was. Then check the drift targets with
# `python -m benchmarks.evaluate_drift --threads 1` and update the drift section of the model cards.
#
# DEEPPCB: DeepPCB's training split (default ../shared/datasets/deeppcb); DD: the CLI (default `defect-detector`,
# e.g. DD="python -m defect_detector.cli").
set -euo pipefail
DEEPPCB=${DEEPPCB:-../shared/datasets/deeppcb}
DD=${DD:-defect-detector}
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(deeppcb deeppcb_ref)
if [ ! -f data/deeppcb/deeppcb_train.json ]; then
    $DD convert deeppcb "$DEEPPCB" --split trainval.txt --out data/deeppcb/deeppcb.json --val-groups 50600,92000
fi
for model in "${models[@]}"; do
    weights=defect_detector/weights/$model.pt
    $DD calibrate --weights "$weights" --data data/deeppcb/deeppcb_train.json --max-images 300 --out "data/deeppcb/${model}_baseline.json"
    $DD strip "$weights" --baseline "data/deeppcb/${model}_baseline.json" --out "$weights"
done
