#!/usr/bin/env bash
# Write the exposure range the bundled models were validated at into their weights (eval.exposure_*; the config only,
# every tensor and the drift baseline kept). The range comes from the ROC on the held-out groups 50600 and 92000:
#
#     python -m benchmarks.exposure_roc --root "$DEEPPCB" --groups 50600 92000 --max-highlights 0.9995 --max-midtones 0.2
#
# min_light, min_contrast and max_clipped are the defaults (0.6, 0.6, 0.2: read against the golden image or the
# calibration levels, they hold for any look). max_midtones (0.2) and max_highlights (0.9995) hold for the look the
# models were validated on, DeepPCB's binarized scans: the single-image model records no highlights limit, since a
# board without a golden image whose whites are all saturated (the bundled synthetic frames) is a clean binarized scan
# as often as an overexposed one. Run from the repository root; DD: the CLI (default `defect-detector`).
set -euo pipefail
DD=${DD:-defect-detector}
$DD strip defect_detector/weights/deeppcb_ref.pt --set eval.exposure_max_highlights=0.9995 --set eval.exposure_max_midtones=0.2 \
    --out defect_detector/weights/deeppcb_ref.pt
$DD strip defect_detector/weights/deeppcb.pt --set eval.exposure_max_midtones=0.2 --out defect_detector/weights/deeppcb.pt
