"""The prepare stage: every frame's way up to the model is decided here, in one place.

    Frame (gray uint8 [H, W], from a source, ``Inspector.inspect``, ``val``'s or ``calibrate``'s json)
      -> levels and the blank check                      (screens/blank.py)
      -> its design: the golden image, keyed by pixels    (inspect/designs.py; golden-template models)
      -> the design check's note                          (inspect/design_check.py, once per design)
      -> its working scale                                (inspect/design_scale.py, once per design; a single-image
                                                           model's large frames, each)
      -> registration and the golden check                (the design's Registrar: align/register.py)
      -> the photometric fit: golden levels to the board's (align/photometric.py)
      -> coverage and exposure screen                     (screens/frame.py)
      -> the fit within the range the weights were validated for
      -> hidden area: glare, a shadow, a hand, cell by cell   (screens/hidden.py)
      -> the letterbox or tile plan                       (Pipeline.plan)
    = a :class:`Prepared` record, ready for the model (:func:`detect`), or refused with a typed
      :class:`~defect_detector.core.refusal.Refusal`.

The steps are :data:`STAGES`, declared once, in order; each takes the record and hands on a new one, or a refused one.

``predict``, the ``Inspector`` API, the station, ``val``, ``calibrate`` and training-time validation all prepare frames
with :class:`Prepare` and run the model with :func:`detect`, so they see the same golden images, the same refusals and
the same plans. The inspector then finishes each frame's record once (``inspect/record.py``: ``Inspection``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from defect_detector.align.golden_view import GoldenView, boxes_to_frame, centres_valid, warp_into_golden
from defect_detector.align.photometric import Photometric, fit_photometric, is_binarized, photometric_reason
from defect_detector.align.register import Registration
from defect_detector.core.boxes import centres_inside
from defect_detector.core.limits import Limits
from defect_detector.core.refusal import Refusal, RefusalKind
from defect_detector.core.types import Detections, TileRecord
from defect_detector.inspect.design_check import NO_NOTE, DesignCheck
from defect_detector.inspect.design_scale import AS_GIVEN, ScaleCheck, WorkingScale
from defect_detector.inspect.designs import Design, Designs
from defect_detector.inspect.frame import Frame
from defect_detector.inspect.pipeline import Pipeline, check_channels, gray_frame
from defect_detector.inspect.references import ReferenceError
from defect_detector.inspect.tolerance import apply_tolerance
from defect_detector.screens.blank import blank_reason, image_levels
from defect_detector.screens.exposure import histogram, tones
from defect_detector.screens.frame import mask_uncovered, screen_reason, too_small
from defect_detector.screens.hidden import KINDS, HiddenArea, golden_cells, largest_region, level_cells

EXPLAINED = 0.1
"""The largest hidden region (a share of the frame) taken to explain a golden image the golden check called another
design: more is a board unlike its golden image all over, not a spot over it."""
LIGHT_CHANGE = 0.1
"""A single-image model's frame refused for grey levels the calibration frames never show whose bright level lies this
share or more off theirs is refused for the light (underexposed or overexposed), not as hidden area."""
SCALE_CHANGE = 0.1
"""A golden image refused as not matching whose sides both differ from the frame's by this share or more, by one
factor, is named as captured at another scale."""


@dataclass(frozen=True)
class Prepared:
    """What the prepare stage made of one frame (immutable; :class:`Prepare` builds it).

    ``frame``: the frame (``image`` None when it could not be read). ``levels``: float64 ``[4]`` gray levels
    (``screens/blank.py``), None for an unreadable frame. ``refusal``: why it is not inspected, None when it is ready for
    the model. ``design``: its golden image (``inspect/designs.py``: key, name), None without one; ``golden_name``: the
    file name of its golden image (the key for pixels given). ``design_warning``: the golden image looks unlike the
    model's training images (a warning, never a refusal), else None; ``design_taught``: the weights were taught it.
    ``registration``: how its golden image sat in the frame (mapping, score, golden check, photometric fit), None for a
    single-image model or a frame refused before. ``golden``: uint8 ``[H, W]`` its golden image registered into the
    frame's pixels at the frame's levels, ``covered`` bool ``[H, W]`` where that has data, within ``area`` (bool
    ``[H, W]``: its design's inspection area in the frame, ``align/inspection_area.py``; None: the whole frame). ``view``: the frame in its
    golden image's pixels when the model sees it there (``align/golden_view.py``; ``plan`` and the detections' letterbox
    record are then the golden view's), else None. ``plan``: its tile plan (None: letterboxed whole). ``hidden``: its
    largest hidden region (``screens/hidden.py``), None when none or not screened. ``working_scale``: its design shows
    this many times coarser than the weights were validated at, so it is planned at ``pixel_scale / working_scale``
    (``inspect/design_scale.py``; 1.0: as given); ``scale_warning``: its design's features are finer than validated
    (one line, also joined into ``design_warning``, which carries it to the station), else None. Between stages only
    (cleared once the frame is prepared): ``given``, the golden image given with the frame (gray; None: its references'
    one); ``matched``, the registered golden image at the frame's levels (the photometric fit); ``captured``, the
    registered golden image as captured, once ``golden`` is the matched one."""

    frame: Frame
    levels: np.ndarray | None = field(default=None, repr=False)
    refusal: Refusal | None = None
    design: Design | None = None
    golden_name: str | None = None
    design_warning: str | None = None
    design_taught: bool = False
    registration: Registration | None = None
    golden: np.ndarray | None = field(default=None, repr=False)
    covered: np.ndarray | None = field(default=None, repr=False)
    area: np.ndarray | None = field(default=None, repr=False)
    view: GoldenView | None = field(default=None, repr=False)
    plan: TileRecord | None = None
    hidden: HiddenArea | None = None
    working_scale: float = 1.0
    scale_warning: str | None = None
    given: np.ndarray | None = field(default=None, repr=False, compare=False)
    matched: np.ndarray | None = field(default=None, repr=False, compare=False)
    captured: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def refused(self) -> bool:
        """The prepare stage refused the frame (unreadable, blank, no usable golden image, exposure, coverage, hidden)."""
        return self.refusal is not None

    @property
    def golden_key(self) -> str | None:
        """The fingerprint of its golden image's pixels (None without one)."""
        return self.design.key if self.design is not None else None

    def refuse(self, kind: RefusalKind, message: str, values: dict[str, float] | None = None) -> Prepared:
        """This record, refused."""
        return dataclasses.replace(self, refusal=Refusal(kind, message, values or {}))


class Prepare:
    """The prepare stage of one run: ``pipeline`` (model channels, alignment, exposure range, tiling policy),
    ``designs`` (the golden images; None for a single-image model), ``design_check`` (None: no design notes),
    ``calibration``: the calibration frames' levels a single-image model's exposure is read against
    (``screens/frame.py`` ``calibration_levels``; None: absolute limits only). ``screen_hidden``: refuse frames with
    hidden area (``screens/hidden.py``; False: the largest hidden region is still measured and kept, for a ROC).
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

    def __call__(self, frame: Frame, given: Any = None) -> Prepared:
        """The record of ``frame`` (gray uint8 ``[H, W]``, or an unreadable frame) through :data:`STAGES`, in order,
        until one refuses it: refused, or ready for the model. ``given``: this frame's golden image (any OpenCV image;
        None: the one ``designs.references`` holds for it). ``ValueError`` when ``given`` is not an image, or is given to
        a single-image model."""
        if frame.image is None:
            return Prepared(frame, refusal=Refusal(RefusalKind.UNREADABLE, frame.error or f"{frame.file_name}: unreadable"))
        check_channels(self.pipeline.runtime, given is not None, frame.file_name)
        golden = None if given is None else gray_frame(given, f"golden image of {frame.file_name}")
        record = Prepared(frame, given=golden)
        for stage in STAGES:
            record = stage.run(self, record)
            if record.refused:
                break
        return dataclasses.replace(record, given=None, matched=None, captured=None)

    def _hidden(self, record: Prepared, captured: np.ndarray | None) -> Prepared:
        """``record`` with its largest hidden region (``screens/hidden.py``), refused when it hides too much: against the
        matched golden image (``captured``: the registered golden image before matching), or for a single-image model
        the calibration frames' pixel levels (not screened when the baseline records none)."""
        image = record.frame.image
        if record.golden is not None:
            kinds, unlike = golden_cells(image, record.golden, record.covered, captured), KINDS[2]
        elif self.calibration is not None and self.calibration.get("pixel_levels") is not None:
            kinds = level_cells(image, self.calibration["pixel_levels"], self.calibration["bright"])
            unlike = "unlike the calibration frames"
        else:
            return record
        hidden = largest_region(kinds, image.shape, unlike)
        record = dataclasses.replace(record, hidden=hidden)
        if not self.screen_hidden or hidden is None or not hidden.refused(self.pipeline.limits_for(record.golden_key).hidden_max_area):
            return record
        light = self._light(record, hidden)
        if light is not None:
            return dataclasses.replace(record, refusal=light)
        message = f"{hidden.words()}: a defect there cannot be seen ({_hidden_cause(hidden)})"
        return record.refuse(RefusalKind.HIDDEN, message, {"share": hidden.share, "cells": hidden.cells})

    def _light(self, record: Prepared, hidden: HiddenArea) -> Refusal | None:
        """A single-image model's frame whose grey levels the calibration frames never show, read as the light it
        measures: its bright level :data:`LIGHT_CHANGE` or more off the calibration frames' is underexposed (darker) or
        overexposed (brighter), a camera refusal that raises a drift alert at once (``RefusalKind.camera``); else None
        (the hidden area's own words)."""
        if record.golden is not None or hidden.kind == KINDS[0] or record.levels is None:
            return None
        reference = float(self.calibration["bright"])
        light = float(record.levels[2]) / max(reference, 1.0)
        if abs(light - 1.0) < LIGHT_CHANGE:
            return None
        darker = light < 1.0
        message = (
            f"image {abs(light - 1.0):.0%} {'darker' if darker else 'brighter'} than the calibration frames (bright level "
            f"{record.levels[2]:.0f} against {reference:.0f}), {hidden.share:.1%} of the board at grey levels they never "
            "show: check the light and the camera's exposure"
        )
        kind = RefusalKind.UNDEREXPOSED if darker else RefusalKind.OVEREXPOSED
        return Refusal(kind, message, {"light": light, "share": hidden.share})

    def _hidden_behind(self, record: Prepared, exc: ReferenceError) -> Prepared | None:
        """The record refused for hidden area when the golden check called its golden image another design but
        registration found it and the hidden area explains that (glare anywhere, or a region of at most
        :data:`EXPLAINED` of the frame: a glare spot's saturation reads as differences spread over the board), else
        None. An occluder the golden check names keeps its words, and a golden image of another design, unlike the
        board all over, stays "reference does not match"."""
        if exc.registered is None or record.design is None or exc.kind != RefusalKind.REFERENCE_MISMATCH:
            return None
        warped, registration = exc.registered
        trial = self._covered(dataclasses.replace(record, golden=warped, registration=registration))
        matched = self._match(trial)
        trial = dataclasses.replace(trial, golden=matched[0], registration=matched[1])
        trial = self._hidden(trial, warped)
        if not trial.refused or (trial.hidden.kind != KINDS[0] and trial.hidden.share > EXPLAINED):
            return None
        return trial

    def _match(self, record: Prepared) -> tuple[np.ndarray, Registration] | None:
        """The registered golden image at the frame's levels (``Photometric.to_board``) and the registration holding its
        fit; None for a single-image model. A negligible fit (``Photometric.negligible``) is the identity, and so is the
        fit of a binarized design (``is_binarized``, read once per design: a scan of two clipped levels)."""
        if record.golden is None or record.registration is None:
            return None
        design, shape = record.design, record.frame.image.shape
        if design is not None and design.binarized is None:
            design.binarized = is_binarized(design.image)
        binarized = design is not None and design.binarized
        fit = Photometric.identity(shape) if binarized else fit_photometric(record.golden, record.frame.image, record.covered)
        if fit.negligible:
            fit = Photometric.identity(shape)
        return fit.to_board(record.golden), dataclasses.replace(record.registration, photometric=fit)

    def _design(self, record: Prepared, given: np.ndarray | None) -> Prepared:
        """``record`` with its design (``ReferenceError`` when it has no golden image) and the design check's note."""
        frame = record.frame
        design, golden_name = self.designs.of(frame.file_name, given)
        note = self.design_check.note(design, frame.file_name) if self.design_check is not None else NO_NOTE
        record = dataclasses.replace(record, design=design, golden_name=golden_name, design_warning=note.warning, design_taught=note.taught)
        return _scaled(record, self._scale(design, frame.image.shape))

    def own_limits(self, key: str, limits: Limits) -> None:
        """Judge the frames of the design whose golden image has fingerprint ``key`` by ``limits`` from now on, its
        registration included (``teach --good`` reading its good boards at the limits they ask for, as ``predict``
        will from the taught entry)."""
        self.pipeline.design_limits[key] = limits
        if self.designs is not None:
            self.designs.forget(key)

    def _scale(self, design: Design, shape: tuple[int, ...]) -> WorkingScale:
        """``design``'s working scale for a frame of ``shape``: read on its first frame that a reading could change
        (``ScaleCheck.needless``; logged then) and kept on it; as given, unread, before such a frame."""
        if design.scale is None:
            if self.scale_check is not None and self.scale_check.needless(design.image.shape, shape):
                return AS_GIVEN
            design.scale = AS_GIVEN if self.scale_check is None else self.scale_check.read(design.image, design.name)
            if self.scale_check is not None:
                self.scale_check.log(design.scale, design.name)
        return design.scale

    def _register(self, record: Prepared) -> Prepared:
        """``record`` with its design's golden image registered into the frame (``ReferenceError`` if none fits); its
        covered area narrowed to the design's inspection area where the weights store one (``align/inspection_area.py``:
        the screens judge the board only, and calls off it are dropped)."""
        frame = record.frame
        golden, registration = self.designs.register(record.design, frame.image, frame.file_name, self.pipeline.align)
        return self._covered(dataclasses.replace(record, golden=golden, registration=registration))

    def _covered(self, record: Prepared) -> Prepared:
        """``record`` (registered) with ``covered``: where its registered golden image has data, within ``area``, its
        design's inspection area in the frame where the weights store one."""
        shape, registration = record.frame.image.shape[:2], record.registration
        covered, area = registration.covered(shape), self.pipeline.areas.get(record.design.key) if record.design is not None else None
        if area is None or area.shape != record.design.image.shape:
            return dataclasses.replace(record, covered=covered, area=None)
        inside = area.in_frame(registration.mapping, shape)
        return dataclasses.replace(record, covered=covered & inside, area=inside)


def _frame_size(prepare: Prepare, record: Prepared) -> Prepared:
    small = too_small(record.frame.image.shape, f"{record.frame.file_name}: the frame")
    return record if small is None else dataclasses.replace(record, refusal=small)


def _blank(prepare: Prepare, record: Prepared) -> Prepared:
    record = dataclasses.replace(record, levels=image_levels(record.frame.image))
    blank = blank_reason(record.frame.image, record.levels)
    if blank is None:
        return record
    return record.refuse(RefusalKind.BLANK, blank, dict(zip(("median", "bright", "detail"), record.levels[1:])))


def _golden_image(prepare: Prepare, record: Prepared) -> Prepared:
    """A golden-template model's frame: its design (the golden image by its pixels, its note and working scale) and its
    golden image registered into it, within the design's inspection area; refused when it has none that fits (unless
    hidden area explains the golden check's refusal: ``Prepare._hidden_behind``)."""
    if prepare.pipeline.runtime.channels != 2:
        return record
    try:
        record = prepare._design(record, record.given)  # kept when registration refuses: the refusal names its design
        return prepare._register(record)
    except ReferenceError as exc:
        design, shape = record.design, record.frame.image.shape
        hint = _scale_hint(design, shape) if exc.kind == RefusalKind.REFERENCE_MISMATCH and design else ""
        return prepare._hidden_behind(record, exc) or record.refuse(exc.kind, f"{exc}{hint}")


def _photometric_fit(prepare: Prepare, record: Prepared) -> Prepared:
    matched = prepare._match(record)
    if matched is None:
        return record
    return dataclasses.replace(record, matched=matched[0], registration=matched[1])


def _exposure(prepare: Prepare, record: Prepared) -> Prepared:
    """Coverage, exposure and content against the registered golden image (or the calibration levels)."""
    design = record.design
    if design is not None and design.tones is None:
        design.tones = tones(histogram(design.image))
    own = design.tones if design is not None else None
    limits = (prepare.pipeline.limits_for(record.golden_key).exposure, prepare.calibration)
    refusal = screen_reason(record.frame.image, record.golden, record.covered, *limits, record.matched, own, area=record.area)
    return record if refusal is None else dataclasses.replace(record, refusal=refusal)


def _light_range(prepare: Prepare, record: Prepared) -> Prepared:
    """The photometric fit within the range the weights were validated for; then the golden image is the matched one."""
    if record.matched is None:
        return dataclasses.replace(record, captured=record.golden)
    fit = record.registration.photometric
    light = photometric_reason(fit, prepare.pipeline.limits_for(record.golden_key).photometric)
    if light:
        return record.refuse(RefusalKind.LIGHT_UNLIKE, light, {"gain": fit.gain, "gamma": fit.gamma, "offset": fit.offset})
    return dataclasses.replace(record, golden=record.matched, captured=record.golden)


def _hidden_area(prepare: Prepare, record: Prepared) -> Prepared:
    return prepare._hidden(record, record.captured)


def _golden_view(prepare: Prepare, record: Prepared) -> Prepared:
    if not prepare.pipeline.golden_view or record.design is None:
        return record
    reg = record.registration
    return dataclasses.replace(record, view=warp_into_golden(record.frame.image, record.design.image, reg.mapping, reg.photometric))


def _frame_scale(prepare: Prepare, record: Prepared) -> Prepared:
    """A single-image model's frame: its working scale, read on the frame itself."""
    if record.design is not None or prepare.scale_check is None:
        return record
    return _scaled(record, prepare.scale_check.frame(record.frame.image, record.frame.file_name))


def _plan(prepare: Prepare, record: Prepared) -> Prepared:
    board = record.view.board if record.view is not None else record.frame.image
    return dataclasses.replace(record, plan=prepare.pipeline.plan(*board.shape, record.working_scale))


@dataclass(frozen=True)
class Stage:
    """One stage of the prepare stage: its ``name``, the module that owns its measure, and ``run``: ``(Prepare,
    record) -> record``, refused (``Prepared.refusal``) or handed on."""

    name: str
    owner: str
    run: Callable[[Prepare, Prepared], Prepared]


STAGES: tuple[Stage, ...] = (
    Stage("frame size", "screens/frame.py", _frame_size),
    Stage("blank", "screens/blank.py", _blank),
    Stage("golden image", "inspect/designs.py, align/register.py", _golden_image),
    Stage("photometric fit", "align/photometric.py", _photometric_fit),
    Stage("coverage and exposure", "screens/frame.py, screens/exposure.py", _exposure),
    Stage("light range", "align/photometric.py", _light_range),
    Stage("hidden area", "screens/hidden.py", _hidden_area),
    Stage("golden view", "align/golden_view.py", _golden_view),
    Stage("working scale", "inspect/design_scale.py", _frame_scale),
    Stage("plan", "inspect/pipeline.py", _plan),
)
"""The prepare stage, in order: a frame goes through each until one refuses it. A new screen is its module, its test and
one line here."""


def _hidden_cause(hidden: HiddenArea) -> str:
    """What a hidden region's kind (``screens/hidden.py`` ``KINDS``) and size say to do: the light only for glare; a
    region unlike the golden image over more than :data:`EXPLAINED` of the frame is another design more likely than an
    object over it."""
    if hidden.kind == KINDS[0]:
        return "glare: shade the light or move it off the camera's axis"
    if hidden.kind == KINDS[1]:
        return "a hand, a cover or a shadow: clear the camera's view"
    if hidden.kind == KINDS[2] and hidden.share > EXPLAINED:
        return "another design, or a golden image that does not match this board: check the golden image"
    if hidden.kind == KINDS[2]:
        return "an object over the board: clear the camera's view"
    return "an object over the board, or a board unlike the calibration frames: clear the camera's view"


def _scale_hint(design: Design, shape: tuple[int, ...]) -> str:
    """``"; the golden image is 1.50x the frame's size: captured at another scale?"`` when both sides of ``design``'s
    golden image differ from a frame of ``shape`` ``(H, W)`` by one factor, :data:`SCALE_CHANGE` or more; else ``""``."""
    high, wide = design.image.shape[0] / shape[0], design.image.shape[1] / shape[1]
    if abs(high / wide - 1.0) > SCALE_CHANGE / 2 or abs(high - 1.0) < SCALE_CHANGE:
        return ""
    return f"; the golden image is {(high * wide) ** 0.5:.2f}x the frame's size: captured at another scale?"


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
