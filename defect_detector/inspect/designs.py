"""A design is prepared once: per golden image, keyed by a fingerprint of its pixels, never by its file name.

A :class:`Design` holds what every frame of one golden image shares, computed on its first frame and reused after:

- its registration pyramid (the :class:`~defect_detector.align.register.Registrar`, which also keeps the last good
  matrix of a fixed fixture and, with it, the golden check's golden side: the warped golden image at its two levels,
  their dilation and erosion, its covered cells and whole features, prepared once per design and matrix);
- its design-domain note (``inspect/design_check.py``) and its working scale (``inspect/design_scale.py``), set by the
  prepare stage;
- its drift statistics (``monitor/golden.py`` :class:`Golden`), set by ``inspect/drift_inputs.py``;
- its trunk features for a siamese model, kept by the frame pipeline under the design's key (``Pipeline.design_features``).

:class:`Designs` finds a frame's design: from the pixels given with the frame, else from ``References`` (a file or a
folder, looked up once per frame), and keeps the most recently used :data:`CACHED` designs. Two copies of one golden
image under two names are one design; a file rewritten with new pixels is a new one.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from defect_detector.align.photometric import blur_golden
from defect_detector.align.register import Registrar, Registration
from defect_detector.core.config_register import RegisterConfig
from defect_detector.core.errors import ReferenceError
from defect_detector.core.refusal import RefusalKind
from defect_detector.data.images import pixel_fingerprint
from defect_detector.inspect.references import References
from defect_detector.screens.frame import too_small

log = logging.getLogger("defect_detector.inspect")

CACHED = 64
"""Designs kept (least recently used dropped first; one dropped and met again is prepared again)."""

GIVEN = "GOLDEN_IMAGE"
"""The ``file`` of a design whose golden image was given as pixels (no file)."""

_MAX_WARNINGS = 10


@dataclass(eq=False)
class Design:
    """One golden image, prepared once. ``key``: the fingerprint of its gray pixels (``data/images.py``
    ``pixel_fingerprint``); ``name``: what a line engineer calls it (its file name; the key for pixels given);
    ``file``: its path, or :data:`GIVEN`; ``image``: uint8 ``[H, W]`` as given (not registered); ``registrar``: its
    registration pyramid. The other fields are filled by the stages that need them, once per design: ``note`` (the
    design check's ``DesignNote``), ``scale`` (its ``WorkingScale``), ``drift`` (its ``Golden`` statistics) and
    ``binarized`` (``align/photometric.py`` ``is_binarized``: a scan of two levels has no light to match) and ``tones``
    (``screens/exposure.py`` ``tones`` of ``image``: the exposure screen reads its saturation from them). Its siamese
    trunk features are kept by the frame pipeline that computed them (``Pipeline.design_features``: they belong to
    that pipeline's model)."""

    key: str
    name: str
    file: str
    image: np.ndarray = field(repr=False)
    registrar: Registrar = field(repr=False)
    note: Any = None
    scale: Any = None
    drift: Any = None
    binarized: bool | None = None
    tones: dict[str, float] | None = None
    _blurred: dict[float, np.ndarray] = field(default_factory=dict, repr=False)

    def blurred(self, blur: float) -> tuple[str, np.ndarray]:
        """The design's golden image blurred by a relative defocus ``blur`` (``align/photometric.py`` ``blur_golden``;
        sigma px, read in steps, so a line's steady focus keeps one) and the key of its model features: the design's own
        key and image for ``blur`` <= 0."""
        if blur <= 0:
            return self.key, self.image
        if blur not in self._blurred:
            self._blurred[blur] = blur_golden(self.image, blur)
        return f"{self.key}~blur{blur:g}", self._blurred[blur]


class Designs:
    """The designs of one inspector (or ``val`` / ``calibrate`` run): ``references`` (None: every frame brings its own
    golden image), registration settings ``cfg`` (``cfg_for``: a design's own, by its key: ``Pipeline.limits_for``).
    ``skipped`` counts the frames refused, by kind (``no golden image``, ``no reference``, ``unreadable reference``,
    ``reference does not match``, ``occluded or not this board``); the first few refusals are logged as warnings."""

    def __init__(
        self,
        references: References | None,
        cfg: RegisterConfig | None = None,
        cached: int = CACHED,
        cfg_for: Callable[[str], RegisterConfig] | None = None,
    ) -> None:
        self.references = references
        self.cfg = cfg or RegisterConfig()
        self.cfg_for = cfg_for
        self.cached = cached
        self.skipped: Counter[RefusalKind] = Counter()
        self._designs: OrderedDict[str, Design] = OrderedDict()

    def of(self, file_name: str, given: np.ndarray | None = None) -> tuple[Design, str]:
        """``(design, name)`` of frame ``file_name``'s golden image: of ``given`` (gray uint8 ``[H, W]``; its name is
        the key), else of the file ``references`` holds for it (looked up once; its name is that file's name, which
        may differ from the design's first name: two copies of one golden image are one design).
        :class:`ReferenceError` (counted) when there is none or it cannot be read."""
        try:
            return self.find(file_name, given)
        except ReferenceError as exc:
            self._count(exc)
            raise

    def find(self, file_name: str, given: np.ndarray | None = None) -> tuple[Design, str]:
        """:meth:`of` without counting or logging a refusal (the inspector's look at a frame's design before the
        prepare stage, which counts it once)."""
        if given is not None:
            key = pixel_fingerprint(given)
            return self._keep(key, lambda k: Design(k, k, GIVEN, given, self._registrar(given, file_name, k))), key
        if self.references is None:
            raise ReferenceError(f"{file_name}: no golden image (this is a golden-template model)", RefusalKind.NO_GOLDEN)
        path = self.references.lookup(file_name)
        return self._keep(self.references.key_at(path), lambda k: self._from_file(k, file_name, path)), path.name

    def register(self, design: Design, image: np.ndarray, file_name: str, align: bool = True) -> tuple[np.ndarray, Registration]:
        """``design``'s golden image registered into the frame ``image`` (uint8 ``[H, W]``; ``align`` False: used as given,
        already aligned, the golden check still runs): ``(warped uint8 [H, W], Registration)``. :class:`ReferenceError`
        (counted) when the golden check or the registration refuses it."""
        if align:
            try:
                warped, reg = design.registrar(image)
            except ValueError as exc:  # a frame too small for register.scale
                error = ReferenceError(f"{file_name}: {exc}", RefusalKind.TOO_SMALL)
                self._count(error)
                raise error from exc
        else:
            if design.image.shape != image.shape:
                exc = ReferenceError(
                    f"{file_name}: its golden image is {design.image.shape[1]}x{design.image.shape[0]}, the frame "
                    f"{image.shape[1]}x{image.shape[0]}; an unaligned golden image must have the frame's size",
                    RefusalKind.REFERENCE_MISMATCH,
                )
                self._count(exc)
                raise exc
            warped, reg = design.image, design.registrar.as_given(image)  # its golden side prepared once
        if not reg.ok:
            kind = reg.kind or RefusalKind.REFERENCE_MISMATCH
            exc = ReferenceError(f"{file_name} against golden image {design.name}: {reg.reason}", kind, (warped, reg))
            self._count(exc)
            raise exc
        return warped, reg

    def forget(self, key: str) -> None:
        """Drop design ``key`` (prepared again, at its registration settings, when next met)."""
        self._designs.pop(key, None)

    def _from_file(self, key: str, file_name: str, path: Path) -> Design:
        image = self.references.image_at(path)
        return Design(key, path.name, str(path), image, self._registrar(image, file_name, key))

    def _registrar(self, golden: np.ndarray, file_name: str, key: str) -> Registrar:
        """The registration pyramid of the golden image of design ``key``, at its registration settings
        (:class:`ReferenceError` when it is too small to inspect or to register at ``register.scale``)."""
        small = too_small(golden.shape, f"{file_name}: its golden image")
        if small is not None:
            raise ReferenceError(small.message, small.kind)
        try:
            return Registrar(golden, self.cfg if self.cfg_for is None else self.cfg_for(key))
        except ValueError as exc:
            raise ReferenceError(f"{file_name}: its golden image: {exc}", RefusalKind.TOO_SMALL) from exc

    def _keep(self, key: str, make: Any) -> Design:
        design = self._designs.get(key)
        if design is None:
            design = self._designs[key] = make(key)
        self._designs.move_to_end(key)
        while len(self._designs) > self.cached:
            self._designs.popitem(last=False)
        return design

    def _count(self, exc: ReferenceError) -> None:
        self.skipped[exc.kind] += 1
        if sum(self.skipped.values()) <= _MAX_WARNINGS:
            log.warning("not inspected: %s", exc)
