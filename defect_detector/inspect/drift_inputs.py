"""What the drift monitor reads from a frame besides its layer statistics: for a golden-template model, the statistics
of the frame's golden image, computed once per design.

The golden image's statistics are what the model reports for it paired with itself, through the same frame pipeline
as its frame (registered into the frame's pixels as the frame's own channel was, letterboxed or tiled alike), once per
design (``inspect/designs.py``: keyed by a fingerprint of the golden image's pixels, never by its file name), and kept
on the design. In the golden view of a model with cached golden features they come from the very pass that computes
those features (``Pipeline.design_stats``: the golden graph returns them), so a new design costs no extra model call;
otherwise (the frame view, or an artifact whose golden graph gives none) each new golden image costs one more model
call. Two copies of one golden image under two names are one. The frame's gray levels and blank check are the prepare
stage's (``inspect/prepare.py``: ``Prepared.levels``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from defect_detector.core.frame_record import Prepared
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.monitor.golden import Golden
from defect_detector.screens.blank import image_levels


def golden_of(pipeline: Pipeline, records: Sequence[Prepared]) -> list[Golden | None]:
    """Per inspected record: its design's :class:`Golden` (named by the golden image's file name, for changeover
    events; with its own drift level when ``teach --good`` learnt one, ``monitor/design_drift.py``), None without a
    design. The statistics of designs met for the first time are kept on the design: read from
    their golden pass in the golden view (``Pipeline.design_stats``), else computed here in one pipeline call."""
    new = {}
    for r in records:
        if r.design is not None and r.design.drift is None and r.design.key not in new:
            new[r.design.key] = r
    paired = []
    for r in new.values():
        seen = r.golden if r.view is None else r.design.image  # what the model pairs the frame with
        stats = pipeline.design_stats(r.design.key, seen, r.plan) if r.view is not None else None
        if stats is None:
            paired.append((r, seen))
        else:
            r.design.drift = Golden(r.design.key, stats.double().numpy(), image_levels(seen), own=pipeline.drifts.get(r.design.key))
    if paired:
        results = pipeline.detect([seen for _, seen in paired], [seen for _, seen in paired], [r.plan for r, _ in paired])
        for (r, seen), result in zip(paired, results):
            r.design.drift = Golden(r.design.key, result.stats.double().numpy(), image_levels(seen), own=pipeline.drifts.get(r.design.key))
    return [dataclasses.replace(r.design.drift, name=r.golden_name or r.design.name) if r.design is not None else None for r in records]
