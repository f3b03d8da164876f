#!/usr/bin/env bash
# Write the design domain (monitor/domain.py: which golden images look like the training ones) into both bundled
# weights: fitted on the golden images (reference entries) of the DeepPCB training split, the groups the models were
# trained on; every tensor, the config and the drift baseline kept. The domain carries the scale the weights were
# validated at (domain.scale_range, monitor/scale.py: detail 1.0, fine_width 4.0 px): a golden image (or a single-image
# model's large frame) whose finest detail spans 1.5x that or more is inspected downscaled to it, one finer than it is
# named (inspect/design_scale.py). Predictions at DeepPCB's scale are unchanged; the domain also decides when predict
# warns that a golden image looks unlike the training images. Measured with
#
#     python -m benchmarks.domain_warnings --fit data/deeppcb/deeppcb_train.json --check data/deeppcb/deeppcb_val.json
#
# Run from the repository root, with DeepPCB where data/deeppcb/deeppcb_train.json's images_root says;
# DD: the CLI (default `defect-detector`).
set -euo pipefail
DD=${DD:-defect-detector}
for weights in defect_detector/weights/deeppcb_ref.pt defect_detector/weights/deeppcb.pt; do
    $DD strip "$weights" --domain data/deeppcb/deeppcb_train.json --out "$weights"
done
