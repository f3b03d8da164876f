"""What the drift monitor reads from a frame besides its layer statistics: gray levels, the blank check, and for a
golden-template model the statistics of the frame's golden image, cached per golden image.

The golden image goes through the same frame pipeline as its frame (:meth:`Pipeline.detect`, paired with itself,
registered into the frame's pixels as the frame's own channel was, letterboxed or tiled alike), once per golden image:
the cache is keyed by a fingerprint of the golden image's pixels (``data/images.py`` ``pixel_fingerprint``: of the file
``References`` holds, cached there by path and modification time, or of the pixels given to
``Inspector.inspect(..., reference=)``), never by its file name. Its statistics then cost nothing per frame but a
lookup; each new golden image costs one more model call, and two copies of one golden image under two names are one.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from defect_detector.data.images import pixel_fingerprint
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.sources import Frame
from defect_detector.monitor.blank import blank_reason, image_levels
from defect_detector.monitor.golden import Golden

CACHED = 64
"""Golden images whose statistics are kept (least recently used dropped first)."""


class DriftInputs:
    """Per batch of frames: :meth:`check` each frame as it arrives (gray levels, blank reason, which golden image), then
    :meth:`take` the monitor's inputs of the inspected ones."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self._levels: dict[int, np.ndarray] = {}
        self._given: dict[int, np.ndarray | None] = {}
        self._blank: set[int] = set()
        self._batch_blank: set[int] = set()
        self._cache: OrderedDict[str, Golden] = OrderedDict()

    def check(self, frame: Frame, given: np.ndarray | None = None) -> str | None:
        """Read the gray levels of ``frame`` (its ``image``: uint8 ``[H, W]``) and note its golden image ``given`` (None:
        the pipeline's references); the reason it cannot be inspected ("blank frame: ...", ``monitor/blank.py``), or None."""
        levels = image_levels(frame.image)
        self._levels[frame.index], self._given[frame.index] = levels, given
        reason = blank_reason(frame.image, levels)
        if reason is not None:
            self._blank.add(frame.index)
        return reason

    def was_blank(self, index: int) -> bool:
        """Whether frame ``index`` of the batch last :meth:`take`-n was found blank by :meth:`check`."""
        return index in self._batch_blank

    def key(self, frame: Frame) -> tuple[str, str]:
        """``(key, name)`` of the golden image of ``frame``: the fingerprint of its pixels, and its file name (for the
        pixels given: the fingerprint again)."""
        given = self._given.get(frame.index)
        if given is not None:
            key = pixel_fingerprint(given)
            return key, key
        references = self.pipeline.references
        return references.key(frame.file_name), references.lookup(frame.file_name).name

    def take(
        self, frames: Sequence[Frame], golden: Sequence[np.ndarray] | None, relative: bool
    ) -> list[tuple[np.ndarray | None, Golden | None]]:
        """Per inspected frame (``frames``, with ``golden`` their registered golden images or None): its gray levels and,
        when the baseline is ``relative``, its :class:`Golden` (statistics of new golden images computed here, in one
        pipeline call). Forgets what :meth:`check` noted."""
        goldens: list[Golden | None] = [None] * len(frames)
        if relative and golden is not None:
            named = [self.key(f) for f in frames]
            new = {k: g for (k, _), g in zip(named, golden) if k not in self._cache}
            if new:
                results = self.pipeline.detect(list(new.values()), list(new.values()))
                for (k, g), r in zip(new.items(), results):
                    self._cache[k] = Golden(k, r.stats.double().numpy(), image_levels(g))
            for i, (k, name) in enumerate(named):
                self._cache.move_to_end(k)
                goldens[i] = dataclasses.replace(self._cache[k], name=name)
            while len(self._cache) > CACHED:
                self._cache.popitem(last=False)
        out = [(self._levels.get(f.index), g) for f, g in zip(frames, goldens)]
        self._levels.clear()
        self._given.clear()
        self._batch_blank, self._blank = self._blank, set()
        return out
