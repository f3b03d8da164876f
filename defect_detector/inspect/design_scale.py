"""The working scale: a design shown to the model at the scale its weights were validated at (issue 44 item 4, issue 46
item 3: a DeepPCB board and its golden image upscaled 2x were tiled at 1 model pixel per pixel, their defects twice the
trained size: recall 97% -> 80%, without a word).

The weights record their training ``pixel_scale`` (model-input pixels per original pixel) and, with their design
domain, the scale of their training golden images (``meta.json`` ``domain.scale_range``: ``monitor/scale.py``
``ScaleRange``). A golden image is read once per design (``monitor/scale.py`` ``image_scale``, on its first frame that
a reading could change, :meth:`ScaleCheck.needless`; the result is kept on its
:class:`~defect_detector.inspect.designs.Design`):

- **coarser**: its ``detail`` is at least :data:`WORK_DOWN` times the validated one (it spends that many more pixels
  on its finest detail: an upscaled board). The design is inspected downscaled by ``factor`` = its detail over the
  validated: its frames are planned at ``pixel_scale / factor`` (``Pipeline.plan``: fewer, larger tiles, or the frame
  letterboxed whole), and each model input, frame and golden image together, is shrunk to the validated scale by its
  letterbox. The geometry is the detections' own records (``LetterboxMeta.scale``, ``TileRecord.tile``), which map the
  calls back to the frame's pixels as for any frame; the frame record says ``working_scale`` (the factor). Logged
  once per design.
- **finer**: its narrowest tracks and gaps, at the model input under its plan, are narrower than the narrowest the
  weights were validated on (``ScaleRange.fine_width`` at ``pixel_scale``) by :data:`FINER` or more. Nothing is
  resized (enlarging adds no detail): the design is named, one line with the factor and the widths, in the frame
  record's ``design_warning`` (so a frame with no call is ``pass_suspect``), the station's design runs and the run
  summary, as an untaught look is (``inspect/design_check.py``).
- otherwise as given (``working_scale`` 1.0).

A single-image model has no golden image: a frame is read itself, and only a frame its plan shrinks below
``pixel_scale`` or tiles (larger than the model input at the training scale: the frames a working scale can change),
every such frame (15-25 ms on its central 640 px crop, where inspecting a 1280 px frame takes 116 ms letterboxed whole,
575 ms as nine tiles, on a shared 2-core CPU; ``docs/golden.md`` "Scale"). Weights without a recorded
``pixel_scale`` or scale range read nothing: every frame is inspected as before.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from defect_detector.inspect.pipeline import Pipeline
from defect_detector.monitor.domain import DomainModel
from defect_detector.monitor.scale import MIN_RIDGE, ImageScale, ScaleRange, image_scale

log = logging.getLogger("defect_detector.inspect")

WORK_DOWN = 1.5
"""A design whose detail reads this many times the validated one, or more, is inspected downscaled to it."""

FINER = 1.5
"""A design whose narrowest features reach the model input this many times narrower than validated, or more, is named."""


@dataclass(frozen=True)
class WorkingScale:
    """How one design (or single-image frame) is shown to the model: ``factor`` (>= 1; its frames are planned at
    ``pixel_scale / factor``, 1.0: as given), ``warning`` (its features are finer than validated, one line; None: not),
    ``measured`` (its readings; None: not read)."""

    factor: float = 1.0
    warning: str | None = None
    measured: ImageScale | None = None


AS_GIVEN = WorkingScale()


class ScaleCheck:
    """The working-scale rule of one pipeline: its weights' validated ``ScaleRange`` and ``pixel_scale``, its plans."""

    def __init__(self, validated: ScaleRange, pipeline: Pipeline) -> None:
        self.validated = validated
        self.pipeline = pipeline
        self.pixel_scale = float(pipeline.runtime.pixel_scale)
        self._frame_warned = False

    @classmethod
    def of(cls, pipeline: Pipeline) -> ScaleCheck | None:
        """The check of ``pipeline``'s weights, or None when they record no ``pixel_scale`` or no scale range."""
        raw = pipeline.runtime.meta.get("domain")
        if pipeline.runtime.pixel_scale is None or raw is None:
            return None
        validated = DomainModel.from_dict(raw, where=f"{pipeline.runtime.path}: domain").scale_range
        return cls(validated, pipeline) if validated is not None else None

    def needless(self, *shapes: tuple[int, ...]) -> bool:
        """Whether no reading could change how images of these ``(H, W)`` shapes (a golden image's, its frame's) are
        inspected, so none is taken: none is tiled at the weights' ``pixel_scale`` (a factor only plans larger tiles, and
        a frame letterboxed whole stays so, at its own letterbox scale), and a design's narrowest features, read at
        :data:`~defect_detector.monitor.scale.MIN_RIDGE` px or more, reach the model input more than 1/:data:`FINER` as
        wide as the validated ones, so none is named finer. A 640 px design for the bundled weights: 3 px x 1.5 > 4 px."""
        least, plan, at_input = self.validated.fine_width * self.pixel_scale, self.pipeline.plan, self.pipeline.input_scale
        return all(plan(*shape[:2]) is None and MIN_RIDGE * at_input(*shape[:2]) * FINER > least for shape in shapes)

    def read(self, image: np.ndarray, name: str) -> WorkingScale:
        """The :class:`WorkingScale` of a design whose golden image (or a frame) is uint8 ``[H, W]`` ``image``,
        ``name`` what a line engineer calls it. Its finest features are judged under the plan its frames get (frames
        of the image's size)."""
        measured = image_scale(image)
        if measured.flat:
            return AS_GIVEN
        factor = measured.detail / self.validated.detail
        factor = factor if factor >= WORK_DOWN else 1.0
        at_input = measured.fine_width * self.pipeline.input_scale(*image.shape, factor)
        least = self.validated.fine_width * self.pixel_scale
        if measured.fine_width <= 0 or at_input * FINER > least:
            return WorkingScale(factor, None, measured)
        warning = (
            f"{name}: its narrowest tracks and gaps are {measured.fine_width:.1f} px, {at_input:.1f} px at the model input: "
            f"{at_input / least:.2f}x the narrowest the weights were validated on ({least:.1f} px), features finer than "
            "trained; no call on it passes as pass_suspect (a camera with more pixels per mm, or teach the design)"
        )
        return WorkingScale(factor, warning, measured)

    def frame(self, image: np.ndarray, name: str) -> WorkingScale:
        """The :class:`WorkingScale` of a single-image model's frame: read only when its plan at ``pixel_scale`` shows
        it below the training scale (shrunk or tiled), else :data:`AS_GIVEN`. The first frame off scale is logged."""
        height, width = image.shape
        if self.pipeline.plan(height, width) is None and self.pipeline.input_scale(height, width) >= self.pixel_scale:
            return AS_GIVEN
        scale = self.read(image, name)
        if (scale.factor > 1.0 or scale.warning is not None) and not self._frame_warned:
            self._frame_warned = True
            self.log(scale, name)
        return scale

    def log(self, scale: WorkingScale, name: str) -> None:
        """Log what ``scale`` does to ``name``: downscaled (INFO), features finer than validated (WARNING)."""
        if scale.factor > 1.0:
            log.info(
                "%s: its finest detail spans %.2gx the pixels the weights were validated at: inspected downscaled, at %.3g "
                "model px per px (its frames shrunk to it, with their golden image; calls in their own pixels)",
                name,
                scale.factor,
                self.pixel_scale / scale.factor,
            )
        if scale.warning is not None:
            log.warning("%s", scale.warning)
