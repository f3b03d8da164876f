"""One warning per golden image whose look is unlike the model's training images (issue 34: say when a design is
unlike anything the model knows).

The weights carry a design domain (``meta.json`` ``domain``: ``monitor/domain.py``, fitted on the golden images of the
training set and extended by ``teach``). The first frame of each golden image, keyed by a fingerprint of its pixels
(``References.key``, or of the pixels given to ``Inspector.inspect(..., reference=)``), has the golden image's look
measured (:func:`~defect_detector.monitor.domain.design_stats`, a few ms); when it is unlike the domain, one warning
is logged, naming the feature farthest off and the ``teach`` command. Every frame of that golden image carries the
text (``Inspection.design_warning``: the frame's JSON record, the station); later frames cost a dictionary lookup. It
is a warning, never a refusal: the frame is inspected as before. Weights without a domain warn about nothing.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from defect_detector.data.images import pixel_fingerprint
from defect_detector.inspect.pipeline import gray_frame
from defect_detector.inspect.references import ReferenceError, References
from defect_detector.inspect.sources import Frame
from defect_detector.monitor.domain import DomainModel, design_stats

log = logging.getLogger("defect_detector.inspect")

GIVEN = "GOLDEN_IMAGE"
"""What the ``teach`` command of a warning names for a golden image given as pixels (no file)."""

CACHED = 4096
"""Golden images whose verdict is kept (least recently used dropped first; one dropped and met again warns again)."""


def design_warning(name: str, golden: str, weights: str | Path, why: str) -> str:
    """The warning text for golden image ``name`` (file ``golden``, or :data:`GIVEN`) unlike the domain of ``weights``;
    ``why``: the feature farthest off, in words (:meth:`DomainModel.explain`)."""
    stem = Path(golden).stem if golden != GIVEN else "design"
    return (
        f"{name}: this design looks unlike the model's training images ({why}); "
        f"teach it: defect-detector teach --golden {golden} --weights {weights} --out {stem}_taught.pt"
    )


class DesignCheck:
    """The design-domain check of one inspector: ``domain`` (None: never warns) read from ``weights``' meta."""

    def __init__(self, domain: DomainModel | None, weights: str | Path) -> None:
        self.domain = domain
        self.weights = weights
        self._seen: OrderedDict[str, str | None] = OrderedDict()

    @classmethod
    def from_meta(cls, meta: dict, weights: str | Path) -> DesignCheck:
        """The check of weights whose ``meta.json`` is ``meta`` (checked already by ``parse_meta`` for an artifact)."""
        raw = meta.get("domain")
        return cls(DomainModel.from_dict(raw, where=f"{weights}: domain") if raw is not None else None, weights)

    def check(self, key: str, name: str, golden: str, image: Callable[[], np.ndarray]) -> str | None:
        """The warning of the golden image ``key`` (its pixel fingerprint; ``name`` what to call it, ``golden`` its file),
        or None when its look is like the domain's. ``image()`` gives its pixels (uint8 ``[H, W]``) and is called only
        the first time ``key`` is met; the warning is logged then, once."""
        if self.domain is None:
            return None
        if key in self._seen:
            self._seen.move_to_end(key)
            return self._seen[key]
        stats = design_stats(image())
        text = None
        if self.domain.is_unlike(stats):
            text = design_warning(name, golden, self.weights, self.domain.explain(stats))
            log.warning("%s (distance %.1f, threshold %.1f)", text, self.domain.distance(stats), self.domain.threshold)
        self._seen[key] = text
        while len(self._seen) > CACHED:
            self._seen.popitem(last=False)
        return text

    def take(
        self, frames: Sequence[Frame], given: Sequence[np.ndarray | None] | None, references: References | None
    ) -> dict[int, str | None]:
        """``{frame index: warning or None}`` for ``frames`` (each with its golden image ``given``, else the one
        ``references`` holds; a frame without one, or unreadable, gets None: it is refused elsewhere)."""
        out: dict[int, str | None] = {}
        if self.domain is None:
            return out
        for i, frame in enumerate(frames):
            pixels = given[i] if given is not None else None
            if frame.image is None or (pixels is None and references is None):
                continue
            try:
                if pixels is not None:  # a golden image that is not an image is refused by the registration, not here
                    gray = gray_frame(pixels, f"golden image of {frame.file_name}")
                    out[frame.index] = self.check(pixel_fingerprint(gray), f"golden image of {frame.file_name}", GIVEN, lambda g=gray: g)
                    continue
                key, path = references.key(frame.file_name), references.lookup(frame.file_name)
                out[frame.index] = self.check(key, path.name, str(path), lambda f=frame.file_name: references.golden(f))
            except (ReferenceError, ValueError):
                continue
        return out
