"""One warning per golden image whose look is unlike the model's training images (issue 34: say when a design is
unlike anything the model knows).

The weights carry a design domain (``meta.json`` ``domain``: ``monitor/domain.py``, fitted on the golden images of the
training set and extended by ``teach``). The first frame of each golden image, keyed by a fingerprint of its pixels
(its :class:`~defect_detector.inspect.designs.Design`), has the golden image's look
measured (:func:`~defect_detector.monitor.domain.design_stats`, a few ms); when it is unlike the domain, one warning
is logged, naming the feature farthest off and the ``teach`` command. Every frame of that golden image carries the
text (``Inspection.design_warning``: the frame's JSON record, the station); later frames cost a dictionary lookup. It
is a warning, never a refusal: the frame is inspected as before, but a frame of it with no call is ``pass_suspect``
(an untaught look: the weights were not validated on it; issue 42), never a plain ``pass``. The warning names first
the bundled weights whose domain lies nearest the look (:func:`covering_weights`), then ``teach``. Weights without a
domain warn about nothing.

A golden image the weights were taught (``meta.json`` ``taught``: the fingerprints ``teach`` lists) is never warned
about, whatever the domain says, and its frames are marked taught (``Inspection.design_taught``: the frame's JSON
record, the station's frames and design runs).
"""

from __future__ import annotations

import functools
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from defect_detector.inspect.designs import GIVEN, Design
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, DEFAULT_WEIGHTS, PHOTO_REFERENCE_WEIGHTS, read_checkpoint
from defect_detector.monitor.domain import DomainModel, design_stats

log = logging.getLogger("defect_detector.inspect")

CACHED = 4096
"""Golden images whose verdict is kept (least recently used dropped first; one dropped and met again warns again)."""


@dataclass(frozen=True)
class DesignNote:
    """What the design check says of one frame's golden image: its warning (None: none), whether the weights were
    taught it, and the bundled weights whose domain lies nearer its look when the weights' own does not cover it
    (:func:`covering_weights`; None: none)."""

    warning: str | None = None
    taught: bool = False
    covering: Path | None = None


NO_NOTE = DesignNote()
"""The note of a frame without a golden image, or of weights with neither a domain nor a taught design."""


def design_warning(name: str, golden: str, weights: str | Path, why: str, covering: Path | None = None) -> str:
    """The warning text for golden image ``name`` (file ``golden``, or :data:`GIVEN`) unlike the domain of ``weights``;
    ``why``: the feature farthest off, in words (:meth:`DomainModel.explain`). ``covering``: the bundled weights whose
    domain lies nearest the look (:func:`covering_weights`), named first (None: only ``teach`` is offered)."""
    stem = Path(golden).stem if golden != GIVEN else "design"
    use = f"inspect it with --weights {covering} (bundled, trained on looks nearer this one), or " if covering is not None else ""
    return (
        f"{name}: this design looks unlike the model's training images ({why}); no call on it passes as pass_suspect; "
        f"{use}teach it: defect-detector teach --golden {golden} --weights {weights} --out {stem}_taught.pt"
    )


def covering_weights(stats: np.ndarray, weights: str | Path, channels: int, own: DomainModel | None = None) -> Path | None:
    """The bundled weights (other than ``weights``) of ``channels`` input channels whose design domain lies nearest a
    golden image of look ``stats`` (:func:`design_stats`; distance over each domain's threshold), when nearer than
    ``own`` (the domain of ``weights``; None: only a domain that covers the look counts), or None. A photograph that
    neither domain covers still goes to the photograph weights: it is nearer their looks than DeepPCB's binarized
    scans. Domains are read from their files when a warning asks for them."""
    bundled = (PHOTO_REFERENCE_WEIGHTS, DEFAULT_REFERENCE_WEIGHTS) if channels == 2 else (DEFAULT_WEIGHTS,)
    mine = Path(weights).resolve()
    limit = own.distance(stats) / own.threshold if own is not None else 1.0
    best: tuple[float, Path] | None = None
    for path in bundled:
        if path.resolve() == mine or not path.is_file():
            continue
        domain = _bundled_domain(path)
        ratio = domain.distance(stats) / domain.threshold if domain is not None else float("inf")
        if ratio <= limit and (best is None or ratio < best[0]):
            best = (ratio, path)
    return None if best is None else best[1]


@functools.cache
def _bundled_domain(path: Path) -> DomainModel | None:
    """The design domain a bundled checkpoint carries (None: none)."""
    raw = read_checkpoint(path).get("domain")
    return DomainModel.from_dict(raw, where=f"{path}: domain") if raw is not None else None


class DesignCheck:
    """The design-domain check of one inspector: ``domain`` (None: never warns) read from ``weights``' meta, and the
    pixel fingerprints of the golden images the weights were ``taught`` (never warned about)."""

    def __init__(
        self, domain: DomainModel | None, weights: str | Path, taught: Sequence[str] = (), channels: int = 2, routes: bool = False
    ) -> None:
        self.domain = domain
        self.weights = weights
        self.channels = channels
        self.taught = frozenset(taught)
        self.routes = routes  # the inspector sends a design its weights do not cover to the covering bundled weights
        self._seen: OrderedDict[str, tuple[str | None, Path | None]] = OrderedDict()

    @classmethod
    def from_meta(cls, meta: dict, weights: str | Path, routes: bool = False) -> DesignCheck:
        """The check of weights whose ``meta.json`` is ``meta`` (checked already by ``parse_meta`` for an artifact);
        ``routes``: its inspector sends a design the weights do not cover to the covering bundled weights."""
        raw = meta.get("domain")
        taught = [d["key"] for d in meta.get("taught") or []]
        domain = DomainModel.from_dict(raw, where=f"{weights}: domain") if raw is not None else None
        return cls(domain, weights, taught, int(meta.get("channels", 1)), routes)

    def check(self, key: str, name: str, golden: str, image: Callable[[], np.ndarray]) -> str | None:
        """The warning of the golden image ``key`` (its pixel fingerprint; ``name`` what to call it, ``golden`` its file),
        or None when its look is like the domain's, or the weights were taught it. ``image()`` gives its pixels (uint8
        ``[H, W]``) and is called only the first time ``key`` is met; the warning is logged then, once."""
        return self._verdict(key, name, golden, image)[0]

    def _verdict(self, key: str, name: str, golden: str, image: Callable[[], np.ndarray]) -> tuple[str | None, Path | None]:
        if self.domain is None or key in self.taught:
            return None, None
        if key in self._seen:
            self._seen.move_to_end(key)
            return self._seen[key]
        stats = design_stats(image())
        text, covering = None, None
        if self.domain.is_unlike(stats):
            covering = covering_weights(stats, self.weights, self.channels, self.domain)
            text = design_warning(name, golden, self.weights, self.domain.explain(stats), covering)
            if covering is None or not self.routes:  # routed: the inspector says where it goes, and those weights judge it
                log.warning("%s (distance %.1f, threshold %.1f)", text, self.domain.distance(stats), self.domain.threshold)
        self._seen[key] = (text, covering)
        while len(self._seen) > CACHED:
            self._seen.popitem(last=False)
        return text, covering

    def note(self, design: Design, file_name: str) -> DesignNote:
        """The note of ``design`` (first met with frame ``file_name``), computed once per design and kept on it."""
        if design.note is None:
            given = design.file == GIVEN
            name = f"golden image of {file_name}" if given else design.name
            text, covering = self._verdict(design.key, name, design.file, lambda: design.image)
            design.note = DesignNote(text, design.key in self.taught, covering)
        return design.note
