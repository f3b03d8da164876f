"""What the drift monitor reads from a frame besides its layer statistics: for a golden-template model, the statistics
of the frame's golden image, computed once per design.

The golden image goes through the same frame pipeline as its frame (:meth:`Pipeline.detect`, paired with itself,
registered into the frame's pixels as the frame's own channel was, letterboxed or tiled alike), once per design
(``inspect/designs.py``: keyed by a fingerprint of the golden image's pixels, never by its file name), and is kept on
the design. Its statistics then cost nothing per frame; each new golden image costs one more model call, and two
copies of one golden image under two names are one. The frame's gray levels and blank check are the prepare stage's
(``inspect/prepare.py``: ``Prepared.levels``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.prepare import Prepared
from defect_detector.monitor.golden import Golden
from defect_detector.screens.blank import image_levels


def golden_of(pipeline: Pipeline, records: Sequence[Prepared]) -> list[Golden | None]:
    """Per inspected record: its design's :class:`Golden` (named by the golden image's file name, for changeover
    events), None without a design. The statistics of designs met for the first time are computed here, in one
    pipeline call, and kept on the design."""
    new = {}
    for r in records:
        if r.design is not None and r.design.drift is None and r.design.key not in new:
            new[r.design.key] = r
    if new:
        firsts = list(new.values())
        seen = [r.golden if r.view is None else r.design.image for r in firsts]  # what the model pairs the frame with
        results = pipeline.detect(seen, seen, [r.plan for r in firsts])
        for r, image, result in zip(firsts, seen, results):
            r.design.drift = Golden(r.design.key, result.stats.double().numpy(), image_levels(image))
    return [dataclasses.replace(r.design.drift, name=r.golden_name or r.design.name) if r.design is not None else None for r in records]
