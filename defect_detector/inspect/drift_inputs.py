"""What the drift monitor reads from a frame besides its layer statistics: gray levels, the blank check, and for a
golden-template model the statistics of the frame's golden image, cached per golden image.

The golden image goes through the same frame pipeline as its frame (:meth:`Pipeline.detect`, paired with itself,
registered into the frame's pixels as the frame's own channel was, letterboxed or tiled alike), once per golden image:
the cache is keyed by the golden image's file (``References``) or by a fingerprint of the pixels given to
``Inspector.inspect(..., reference=)``. Its statistics then cost nothing per frame but a lookup; each new golden image
costs one more model call.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.sources import Frame
from defect_detector.monitor.blank import blank_reason, image_levels
from defect_detector.monitor.golden import Golden

CACHED = 64
"""Golden images whose statistics are kept (least recently used dropped first)."""


def fingerprint(image: np.ndarray) -> str:
    """A short name for a golden image given as pixels: a digest of every 4th pixel of every 4th row, and its shape."""
    digest = hashlib.blake2b(np.ascontiguousarray(image[::4, ::4]).tobytes(), digest_size=8)
    digest.update(repr(image.shape).encode())
    return f"image:{digest.hexdigest()}"


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

    def key(self, frame: Frame) -> str:
        """The name of the golden image of ``frame``: its file, or the fingerprint of the pixels given."""
        given = self._given.get(frame.index)
        if given is not None:
            return fingerprint(given)
        return str(self.pipeline.references.lookup(frame.file_name))

    def take(
        self, frames: Sequence[Frame], golden: Sequence[np.ndarray] | None, relative: bool
    ) -> list[tuple[np.ndarray | None, Golden | None]]:
        """Per inspected frame (``frames``, with ``golden`` their registered golden images or None): its gray levels and,
        when the baseline is ``relative``, its :class:`Golden` (statistics of new golden images computed here, in one
        pipeline call). Forgets what :meth:`check` noted."""
        goldens: list[Golden | None] = [None] * len(frames)
        if relative and golden is not None:
            keys = [self.key(f) for f in frames]
            new = {k: g for k, g in zip(keys, golden) if k not in self._cache}
            if new:
                results = self.pipeline.detect(list(new.values()), list(new.values()))
                for (k, g), r in zip(new.items(), results):
                    self._cache[k] = Golden(k, r.stats.double().numpy(), image_levels(g))
            for i, k in enumerate(keys):
                self._cache.move_to_end(k)
                goldens[i] = self._cache[k]
            while len(self._cache) > CACHED:
                self._cache.popitem(last=False)
        out = [(self._levels.get(f.index), g) for f, g in zip(frames, goldens)]
        self._levels.clear()
        self._given.clear()
        self._batch_blank, self._blank = self._blank, set()
        return out
