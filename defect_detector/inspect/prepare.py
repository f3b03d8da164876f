"""The frame path up to the model: every frame's way is the one list of stages declared here, :data:`STAGES`.

    Frame (gray uint8 [H, W], from a source, ``Inspector.inspect``, ``val``'s or ``calibrate``'s json)
      -> frame size and blank                             (screens/frame.py, screens/blank.py)
      -> its design: the golden image, keyed by pixels,   (inspect/designs.py, here; golden-template models)
         its note and working scale                       (inspect/design_check.py, inspect/design_scale.py)
      -> registration and the golden check                (align/register.py: the design's Registrar)
      -> the photometric fit: golden levels to the board's (align/photometric.py)
      -> coverage and exposure                            (screens/frame.py)
      -> the fit within the range the weights were validated for (align/photometric.py)
      -> hidden area: glare, a shadow, a hand, cell by cell   (screens/hidden.py)
      -> the golden view                                  (align/golden_view.py)
      -> a single-image model's working scale, the letterbox or tile plan (here)
    = a :class:`~defect_detector.core.frame_record.Prepared` record, ready for the model (:func:`detect`), or refused
      with a typed :class:`~defect_detector.core.refusal.Refusal`.

Each stage is a function ``(context, record) -> record`` in the module of the room that owns its measure
(``core/frame_record.py`` ``Stage``); :class:`Prepare` is the context every stage reads (limits, calibration, the
designs). A new screen is its module, its test and one line in :data:`STAGES`.

``predict``, the ``Inspector`` API, the station, ``val``, ``calibrate`` and training-time validation all prepare frames
with :class:`Prepare` and run the model with :func:`detect`, so they see the same golden images, the same refusals and
the same plans. The inspector then finishes each frame's record once (``inspect/record.py``: ``Inspection``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from defect_detector.align.golden_view import GoldenView, boxes_to_frame, centres_valid, golden_view, warp_into_golden
from defect_detector.align.photometric import light_range, photometric_fit
from defect_detector.align.register import registration
from defect_detector.core.boxes import centres_inside
from defect_detector.core.errors import ReferenceError
from defect_detector.core.frame import Frame
from defect_detector.core.frame_record import Prepared, Stage
from defect_detector.core.limits import Limits
from defect_detector.core.refusal import Refusal, RefusalKind
from defect_detector.core.types import Detections
from defect_detector.inspect.design_check import NO_NOTE, DesignCheck
from defect_detector.inspect.design_scale import AS_GIVEN, ScaleCheck, WorkingScale
from defect_detector.inspect.designs import Design, Designs
from defect_detector.inspect.pipeline import Pipeline, check_channels, gray_frame
from defect_detector.inspect.tolerance import apply_tolerance
from defect_detector.screens.blank import blank
from defect_detector.screens.frame import exposure, frame_size, mask_uncovered
from defect_detector.screens.hidden import hidden_area


class Prepare:
    """The context of one run's stages (``core/frame_record.py`` ``StageContext``): ``pipeline`` (model channels,
    alignment, limits, tiling policy), ``designs`` (the golden images; None for a single-image model), ``design_check``
    (None: no design notes), ``calibration``: the calibration frames' levels a single-image model's exposure is read
    against (``screens/frame.py`` ``calibration_levels``; None: absolute limits only). ``screen_hidden``: refuse frames
    with hidden area (``screens/hidden.py``; False: the largest hidden region is still measured and kept, for a ROC).
    ``scale_check``: the working-scale rule of the weights (``inspect/design_scale.py``; None when they record none)."""

    def __init__(
        self,
        pipeline: Pipeline,
        designs: Designs | None = None,
        design_check: DesignCheck | None = None,
        calibration: dict[str, float] | None = None,
    ) -> None:
        if pipeline.runtime.channels == 2 and designs is None:
            designs = Designs(pipeline.references, pipeline.limits.register, cfg_for=lambda key: pipeline.limits_for(key).register)
        self.pipeline, self.designs, self.design_check, self.calibration = pipeline, designs, design_check, calibration
        self.screen_hidden = True
        self.scale_check = ScaleCheck.of(pipeline)

    def __call__(self, frame: Frame, given: Any = None, found: tuple[Design, str] | None = None) -> Prepared:
        """The record of ``frame`` (gray uint8 ``[H, W]``, or an unreadable frame) through :data:`STAGES`, in order,
        until one refuses it: refused, or ready for the model. ``given``: this frame's golden image (any OpenCV image;
        None: the one ``designs.references`` holds for it). ``found``: its design and golden image name, when they were
        already found in :attr:`designs` (``Inspector`` routing a frame by its design: one lookup per frame).
        ``ValueError`` when ``given`` is not an image, or is given to a single-image model."""
        if frame.image is None:
            return Prepared(frame, refusal=Refusal(RefusalKind.UNREADABLE, frame.error or f"{frame.file_name}: unreadable"))
        check_channels(self.pipeline.runtime, given is not None, frame.file_name)
        golden = None if given is None else gray_frame(given, f"golden image of {frame.file_name}")
        record = Prepared(frame, given=golden, found=found)
        for stage in STAGES:
            record = stage.run(self, record)
            if record.refused:
                break
        if record.mismatch is not None and not record.refused:  # no stage decided the golden check's refusal
            record = dataclasses.replace(record, refusal=record.mismatch)
        return dataclasses.replace(record, given=None, matched=None, captured=None, found=None, mismatch=None)

    @property
    def align(self) -> bool:
        """Register the golden image (False: it is given aligned)."""
        return self.pipeline.align

    @property
    def golden_view(self) -> bool:
        """The model sees frames in their golden image's pixels (``align/golden_view.py``)."""
        return self.pipeline.golden_view

    def limits_for(self, key: str | None) -> Limits:
        """The limits a frame of the design keyed ``key`` is judged by (``Pipeline.limits_for``)."""
        return self.pipeline.limits_for(key)

    def area_of(self, key: str) -> Any:
        """The inspection area the weights store for design ``key`` (``align/inspection_area.py``), else None."""
        return self.pipeline.areas.get(key)

    def own_limits(self, key: str, limits: Limits) -> None:
        """Judge the frames of the design whose golden image has fingerprint ``key`` by ``limits`` from now on, its
        registration included (``teach --good`` reading its good boards at the limits they ask for, as ``predict``
        will from the taught entry)."""
        self.pipeline.design_limits[key] = limits
        if self.designs is not None:
            self.designs.forget(key)

    def scale_of(self, design: Design, shape: tuple[int, ...]) -> WorkingScale:
        """``design``'s working scale for a frame of ``shape``: read on its first frame that a reading could change
        (``ScaleCheck.needless``; logged then) and kept on it; as given, unread, before such a frame."""
        if design.scale is None:
            if self.scale_check is not None and self.scale_check.needless(design.image.shape, shape):
                return AS_GIVEN
            design.scale = AS_GIVEN if self.scale_check is None else self.scale_check.read(design.image, design.name)
            if self.scale_check is not None:
                self.scale_check.log(design.scale, design.name)
        return design.scale


def design(prepare: Prepare, record: Prepared) -> Prepared:
    """The design stage (golden-template models): the frame's design, its golden image found by its pixels
    (``inspect/designs.py``; ``record.found`` when the caller found it already), with the design check's note and its working scale;
    refused when it has no golden image."""
    if prepare.pipeline.runtime.channels != 2:
        return record
    frame = record.frame
    try:
        found, golden_name = record.found or prepare.designs.of(frame.file_name, record.given)
    except ReferenceError as exc:
        return record.refuse(exc.kind, str(exc))
    note = prepare.design_check.note(found, frame.file_name) if prepare.design_check is not None else NO_NOTE
    record = dataclasses.replace(record, design=found, golden_name=golden_name, design_warning=note.warning, design_taught=note.taught)
    return _scaled(record, prepare.scale_of(found, frame.image.shape))


def frame_scale(prepare: Prepare, record: Prepared) -> Prepared:
    """The working-scale stage of a single-image model's frame: its working scale, read on the frame itself."""
    if record.design is not None or prepare.scale_check is None:
        return record
    return _scaled(record, prepare.scale_check.frame(record.frame.image, record.frame.file_name))


def plan(prepare: Prepare, record: Prepared) -> Prepared:
    """The plan stage: how the frame (or its golden view) is placed on the model input (``Pipeline.plan``)."""
    board = record.view.board if record.view is not None else record.frame.image
    return dataclasses.replace(record, plan=prepare.pipeline.plan(*board.shape, record.working_scale))


STAGES: tuple[Stage, ...] = (
    Stage("frame size", frame_size),
    Stage("blank", blank),
    Stage("design", design),
    Stage("registration", registration),
    Stage("photometric fit", photometric_fit),
    Stage("coverage and exposure", exposure),
    Stage("light range", light_range),
    Stage("hidden area", hidden_area),
    Stage("golden view", golden_view),
    Stage("working scale", frame_scale),
    Stage("plan", plan),
)
"""The frame path up to the model, in order: a frame goes through each stage until one refuses it. Each stage lives
in the room that owns its measure (``Stage.owner``). A new screen is its module, its test and one line here."""


def _scaled(record: Prepared, scale: WorkingScale) -> Prepared:
    """``record`` at its working ``scale``: its factor, and its warning joined to the design note's."""
    warnings = [w for w in (record.design_warning, scale.warning) if w is not None]
    return dataclasses.replace(
        record, working_scale=scale.factor, scale_warning=scale.warning, design_warning="; ".join(warnings) or None
    )


def reframed(record: Prepared, image: np.ndarray) -> Prepared:
    """A copy of a prepared ``record`` whose frame shows uint8 ``image`` (the frame's size: the same frame under a
    simulated fault, ``calibrate``), its design, registration and plan kept, its golden view warped anew."""
    frame = dataclasses.replace(record.frame, image=image)
    view = None
    if record.view is not None:
        view = warp_into_golden(image, record.design.image, record.registration.mapping, record.registration.photometric)
    return dataclasses.replace(record, frame=frame, view=view)


def _on_board(result: Detections, record: Prepared) -> Detections:
    """``result`` without the calls whose centre lies off ``record``'s covered area (``mask_uncovered``); those off its
    design's inspection area counted in ``Detections.off_area``."""
    kept = mask_uncovered(result, record.covered)
    if record.area is None or len(kept) == len(result):
        return kept
    off = int((~centres_inside(result.boxes, record.area)).sum())
    return dataclasses.replace(kept, off_area=result.off_area + off)


def detect(pipeline: Pipeline, records: Sequence[Prepared]) -> list[Detections | None]:
    """The model on every record the prepare stage accepted, in one pipeline call (its plan, its registered golden
    image): per record, in order, its detections in frame pixels, without calls where the golden image has no data or
    off its design's inspection area (``screens/frame.py`` ``mask_uncovered``; counted in ``Detections.off_area``),
    below its design's threshold (``Pipeline.conf_for``) or dropped by its design's tolerance map
    (``inspect/tolerance.py``, counted in ``Detections.tolerated``), or None for a refused record."""
    out: list[Detections | None] = [None] * len(records)
    framed = [i for i, r in enumerate(records) if not r.refused and r.view is None]
    viewed = [i for i, r in enumerate(records) if not r.refused and r.view is not None]
    if framed:
        chosen = [records[i] for i in framed]
        golden = [r.golden for r in chosen] if pipeline.runtime.channels == 2 else None
        results = pipeline.detect([r.frame.image for r in chosen], golden, [r.plan for r in chosen])
        for i, result in zip(framed, results):
            out[i] = _on_board(result, records[i])
    if viewed:
        chosen = [records[i] for i in viewed]
        keyed = [r.design.blurred(_view_blur(r)) for r in chosen]  # the golden image at the board's focus
        features = [pipeline.design_features(key, image, r.plan) for (key, image), r in zip(keyed, chosen)]
        golden = [image for _, image in keyed]  # the golden view's golden image: for the tiled frames' difference gate
        results = pipeline.detect([r.view.board for r in chosen], golden, [r.plan for r in chosen], features)
        for i, result in zip(viewed, results):
            out[i] = _in_frame(result, records[i].view)
            if records[i].area is not None:  # no call off the board
                out[i] = _on_board(out[i], records[i])
    if pipeline.design_conf:  # a taught design's own threshold (the pipeline kept calls down to the lowest)
        for i, result in enumerate(out):
            if result is not None:
                out[i] = result.keep(result.scores >= pipeline.conf_for(records[i].golden_key))
    if pipeline.tolerances:  # a design's tolerance map, in its golden image's pixels (inspect/tolerance.py)
        for i, result in enumerate(out):
            tolerance = pipeline.tolerances.get(records[i].golden_key)
            if result is not None and tolerance is not None and records[i].registration is not None:
                out[i] = apply_tolerance(result, records[i].registration.mapping, tolerance)
    return out


def _view_blur(record: Prepared) -> float:
    """The sigma (px) the golden view's golden image is blurred by to the board's focus (``Photometric.blur`` > 0), else 0."""
    fit = record.registration.photometric if record.registration is not None else None
    return max(fit.blur, 0.0) if fit is not None else 0.0


def _in_frame(result: Detections, view: GoldenView) -> Detections:
    """Golden-view detections in the frame's pixels: calls whose centre lies where the frame has no data dropped, boxes
    mapped through the registration (``boxes_to_frame``)."""
    kept = centres_valid(result.boxes, view)
    return result.keep(kept, boxes_to_frame(result.boxes[kept], view))
