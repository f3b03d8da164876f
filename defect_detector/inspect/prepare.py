"""The prepare stage and the frame record: every frame's way up to the model is decided here, in one place.

    Frame (gray uint8 [H, W], from a source, ``Inspector.inspect``, ``val``'s or ``calibrate``'s json)
      -> levels and the blank check                      (screens/blank.py)
      -> its design: the golden image, keyed by pixels    (inspect/designs.py; golden-template models)
      -> the design check's note                          (inspect/design_check.py, once per design)
      -> registration and the golden check                (the design's Registrar: align/register.py)
      -> the photometric fit: golden levels to the board's (align/photometric.py)
      -> coverage and exposure screen                     (screens/frame.py)
      -> the fit within the range the weights were validated for
      -> hidden area: glare, a shadow, a hand, cell by cell   (screens/hidden.py)
      -> the letterbox or tile plan                       (Pipeline.plan)
    = an :class:`Inspection` with ``refused`` False, ready for the model (``Pipeline.detect_records``), or with the
      frame's ``error`` / ``error_kind`` saying why it is not inspected.

``predict``, the ``Inspector`` API, the station, ``val``, ``calibrate`` and training-time validation all prepare frames
with :class:`Prepare`, so they see the same golden images, the same refusals and the same plans. The record then
gathers the rest of the frame's way: detections, drift events and flag, and its verdict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from defect_detector.align.golden_view import GoldenView, boxes_to_frame, centres_valid, warp_into_golden
from defect_detector.align.photometric import Photometric, PhotometricRange, fit_photometric, is_binarized
from defect_detector.align.register import Registration
from defect_detector.core.types import Detections, TileRecord
from defect_detector.inspect.design_check import NO_NOTE, DesignCheck
from defect_detector.inspect.designs import Design, Designs
from defect_detector.inspect.pipeline import Pipeline, gray_frame
from defect_detector.inspect.references import ReferenceError
from defect_detector.inspect.sources import Frame
from defect_detector.monitor.drift import DriftEvent
from defect_detector.screens.blank import blank_reason, image_levels
from defect_detector.screens.frame import LIGHT_UNLIKE, mask_uncovered, screen_reason
from defect_detector.screens.hidden import KINDS, HiddenArea, golden_cells, largest_region, level_cells

HIDDEN = "hidden area"
"""Refusal kind of a frame with glare, a shadow or a hand over part of the board (``screens/hidden.py``)."""
EXPLAINED = 0.1
"""The largest hidden region (a share of the frame) taken to explain a golden image the golden check called another
design: more is a board unlike its golden image all over, not a spot over it."""


@dataclass
class Inspection:
    """The record of one frame, built once (:class:`Prepare`) and completed by the stages after it.

    ``frame``: the frame (its ``error`` / ``error_kind`` say why it is not inspected). ``detections``: boxes in the
    frame's original pixels (:class:`Detections`), None when not inspected. ``events``: drift events this frame
    raised. ``drift``: the monitor's flag after it (``DriftDetector.flag``; ``"off"`` without monitoring), ``score``
    its drift score (None without monitoring). ``design_warning``: the frame's golden image looks unlike the model's
    training images (a warning, never a refusal), else None; ``design_taught``: the weights were taught it.
    ``registration``: how its golden image sat in the frame (matrix, score, golden check), None for a single-image
    model or a frame refused before. ``levels``: float64 ``[4]`` gray levels (``screens/blank.py``), None for an
    unreadable frame. ``design``: its golden image (``inspect/designs.py``: key, name), None without one;
    ``golden_name``: the file name of its golden image (the key for pixels given). ``golden``:
    uint8 ``[H, W]`` its golden image registered into the frame's pixels, ``covered`` bool ``[H, W]`` where that has
    data. ``plan``: its tile plan (None: letterboxed whole; see ``Detections.letterbox`` for the letterbox record).
    ``view``: the frame in its golden image's pixels when the model sees it there (``align/golden_view.py``: the
    golden view, the golden image's features cached per design; ``plan`` and the detections' letterbox record are then
    the golden view's), None when the model sees the frame with its golden image registered into it. ``hidden``: its
    largest hidden region (``screens/hidden.py``: glare, a shadow, a hand), None when none or not screened.
    ``weights``: the file name of the weights that inspected it (set by the inspector: with the bundled weights chosen
    per design, not always the same).

    ``verdict``: ``fail`` (at least one call at the operating point), ``pass`` (none), ``pass_suspect`` (none, but a
    critical drift alert is raised: the camera may not have seen the board; or its golden image draws the design
    warning: an untaught look, the weights were not validated on it; the ``reason`` says which), or
    ``not_inspected`` with the ``reason``: never count such a board as clean.
    """

    frame: Frame
    detections: Detections | None = None
    events: list[DriftEvent] = field(default_factory=list)
    drift: str = "off"
    score: float | None = None
    design_warning: str | None = None
    design_taught: bool = False
    registration: Registration | None = None
    levels: np.ndarray | None = field(default=None, repr=False)
    design: Design | None = None
    golden: np.ndarray | None = field(default=None, repr=False)
    covered: np.ndarray | None = field(default=None, repr=False)
    plan: TileRecord | None = None
    golden_name: str | None = None
    view: GoldenView | None = field(default=None, repr=False)
    hidden: HiddenArea | None = None
    weights: str | None = None

    @property
    def error(self) -> str | None:
        return self.frame.error

    @property
    def refused(self) -> bool:
        """The prepare stage refused the frame (unreadable, blank, no usable golden image, exposure, coverage)."""
        return self.frame.image is None or self.frame.error is not None

    @property
    def golden_key(self) -> str | None:
        """The fingerprint of its golden image's pixels (None without one)."""
        return self.design.key if self.design is not None else None

    @property
    def verdict(self) -> str:
        if self.detections is None:
            return "not_inspected"
        if len(self.detections):
            return "fail"
        return "pass_suspect" if self.drift == "critical" or self.design_warning is not None else "pass"

    @property
    def reason(self) -> str | None:
        """Why the frame was not inspected, or why its pass is suspect (None otherwise)."""
        if self.detections is None:
            return self.frame.error
        if self.verdict == "pass_suspect" and self.drift == "critical":
            score = f"score {self.score:.1f}" if self.score is not None else "alert raised"
            return f"drift critical: {score}; no call, but the camera may not show the board as validated: check the camera and the light"
        if self.verdict == "pass_suspect":
            return f"untaught look: no call, but {self.design_warning}"
        return None


class Prepare:
    """The prepare stage of one run: ``pipeline`` (model channels, alignment, exposure range, tiling policy),
    ``designs`` (the golden images; None for a single-image model), ``design_check`` (None: no design notes),
    ``calibration``: the calibration frames' levels a single-image model's exposure is read against
    (``screen.calibration_levels``; None: absolute limits only). ``screen_hidden``: refuse frames with hidden area
    (``screens/hidden.py``; False: the largest hidden region is still measured and kept in the record, for a ROC)."""

    def __init__(
        self,
        pipeline: Pipeline,
        designs: Designs | None = None,
        design_check: DesignCheck | None = None,
        calibration: dict[str, float] | None = None,
    ) -> None:
        if pipeline.runtime.channels == 2 and designs is None:
            designs = Designs(pipeline.references, pipeline.register_cfg)
        self.pipeline, self.designs, self.design_check, self.calibration = pipeline, designs, design_check, calibration
        self.photometric_range = PhotometricRange()
        self.screen_hidden = True

    def __call__(self, frame: Frame, given: Any = None) -> Inspection:
        """The record of ``frame`` (gray uint8 ``[H, W]``, or an error frame): refused (``frame.error`` set, its image
        kept for drawing) or ready for the model. ``given``: this frame's golden image (any OpenCV image; None: the
        one ``designs.references`` holds for it). ``ValueError`` when ``given`` is not an image, or is given to a
        single-image model."""
        if frame.image is None:
            return Inspection(frame)
        record = Inspection(frame, levels=image_levels(frame.image))
        blank = blank_reason(frame.image, record.levels)
        if blank is not None:
            return _refuse(record, "blank frame", blank)
        if self.pipeline.runtime.channels == 1:
            if given is not None:
                raise ValueError(f"{frame.file_name}: a golden image was given, but this model takes 1 input channel (no reference)")
        else:
            try:
                self._register(record, None if given is None else gray_frame(given, f"golden image of {frame.file_name}"))
            except ReferenceError as exc:
                hidden = self._hidden_behind(record, exc)
                return _refuse(record, HIDDEN, hidden) if hidden is not None else _refuse(record, exc.reason, str(exc))
        matched = self._match(record)
        refused = screen_reason(frame.image, record.golden, record.covered, self.pipeline.exposure, self.calibration, matched)
        if refused is not None:
            return _refuse(record, *refused)
        fit = record.registration.photometric if record.registration is not None else None
        captured = record.golden
        if fit is not None:
            light = self.photometric_range.reason(fit)
            if light:
                return _refuse(record, LIGHT_UNLIKE, light)
            record.golden = matched
        hidden = self._hidden(record, captured)
        if hidden is not None:
            return _refuse(record, HIDDEN, hidden)
        if self.pipeline.golden_view and record.design is not None:
            record.view = warp_into_golden(frame.image, record.design.image, record.registration.matrix, fit)
        record.plan = self.pipeline.plan(*(record.view.board if record.view is not None else frame.image).shape)
        return record

    def _hidden(self, record: Inspection, captured: np.ndarray | None) -> str | None:
        """Why the frame is refused for hidden area (``screens/hidden.py``), or None; its largest hidden region is kept
        in the record. Against the matched golden image (``captured``: the registered golden image before matching), or
        for a single-image model the calibration frames' pixel levels (not screened when the baseline records none)."""
        image = record.frame.image
        if record.golden is not None:
            kinds, unlike = golden_cells(image, record.golden, record.covered, captured), KINDS[2]
        elif self.calibration is not None and self.calibration.get("pixel_levels") is not None:
            kinds = level_cells(image, self.calibration["pixel_levels"], self.calibration["bright"])
            unlike = "unlike the calibration frames"
        else:
            return None
        record.hidden = largest_region(kinds, image.shape, unlike)
        if not self.screen_hidden or record.hidden is None or not record.hidden.refused(self.pipeline.hidden_max_area):
            return None
        return f"{record.hidden.words()}: a defect there cannot be seen (shade the light, clear the camera's view)"

    def _hidden_behind(self, record: Inspection, exc: ReferenceError) -> str | None:
        """Why the frame is refused for hidden area when the golden check called its golden image another design but
        registration found it and the hidden area explains that (glare anywhere, or a region of at most
        :data:`EXPLAINED` of the frame: a glare spot's saturation reads as differences spread over the board), else
        None; the record keeps the registration only then. An occluder the golden check names keeps its words, and a
        golden image of another design, unlike the board all over, stays "reference does not match"."""
        if exc.registered is None or record.design is None or exc.reason != "reference does not match":
            return None
        warped, registration = exc.registered
        trial = dataclasses.replace(record, golden=warped, registration=registration, covered=registration.covered(warped.shape))
        trial.golden = self._match(trial)
        words = self._hidden(trial, warped)
        if trial.hidden is not None and trial.hidden.kind != KINDS[0] and trial.hidden.share > EXPLAINED:
            words = None
        if words is not None:
            record.golden, record.registration = trial.golden, trial.registration
            record.covered, record.hidden = trial.covered, trial.hidden
        return words

    def _match(self, record: Inspection) -> np.ndarray | None:
        """The registered golden image at the frame's levels (``Photometric.to_board``), its fit kept in the record's
        registration; None for a single-image model. A negligible fit (``Photometric.negligible``) is the identity, and
        so is the fit of a binarized design (``is_binarized``, read once per design: a scan of two clipped levels)."""
        if record.golden is None or record.registration is None:
            return None
        design = record.design
        if design is not None and design.binarized is None:
            design.binarized = is_binarized(design.image)
        shape = record.frame.image.shape
        binarized = design is not None and design.binarized
        fit = Photometric.identity(shape) if binarized else fit_photometric(record.golden, record.frame.image, record.covered)
        if fit.negligible:
            fit = Photometric.identity(record.frame.image.shape)
        record.registration = dataclasses.replace(record.registration, photometric=fit)
        return fit.to_board(record.golden)

    def _register(self, record: Inspection, given: np.ndarray | None) -> None:
        """Find the frame's design, note it, register its golden image into the frame (``ReferenceError`` if none fits)."""
        frame = record.frame
        record.design, record.golden_name = self.designs.of(frame.file_name, given)
        note = self.design_check.note(record.design, frame.file_name) if self.design_check is not None else NO_NOTE
        record.design_warning, record.design_taught = note.warning, note.taught
        record.golden, record.registration = self.designs.register(record.design, frame.image, frame.file_name, self.pipeline.align)
        record.covered = record.registration.covered(frame.image.shape)


def reframed(record: Inspection, image: np.ndarray) -> Inspection:
    """A copy of a prepared ``record`` whose frame shows uint8 ``image`` (the frame's size: the same frame under a
    simulated fault, ``calibrate``), its design, registration and plan kept, its golden view warped anew; no detections."""
    frame = dataclasses.replace(record.frame, image=image)
    view = None
    if record.view is not None:
        view = warp_into_golden(image, record.design.image, record.registration.matrix, record.registration.photometric)
    return dataclasses.replace(record, frame=frame, view=view, detections=None, events=[])


def _refuse(record: Inspection, kind: str, reason: str) -> Inspection:
    record.frame = dataclasses.replace(record.frame, error=reason, error_kind=kind)
    return record


def detect_records(pipeline: Pipeline, records: Sequence[Inspection]) -> list[Inspection]:
    """The model on every record the prepare stage accepted, in one pipeline call (its plan, its registered golden
    image): ``detections`` filled in frame pixels, without calls where the golden image has no data
    (``screen.mask_uncovered``). Returns the inspected records, in order."""
    good = [r for r in records if not r.refused]
    framed, viewed = [r for r in good if r.view is None], [r for r in good if r.view is not None]
    if framed:
        golden = [r.golden for r in framed] if pipeline.runtime.channels == 2 else None
        results = pipeline.detect([r.frame.image for r in framed], golden, [r.plan for r in framed])
        for record, result in zip(framed, results):
            record.detections = mask_uncovered(result, record.covered)
    if viewed:
        features = [pipeline.design_features(r.design.key, r.design.image, r.plan) for r in viewed]
        golden = [r.design.image for r in viewed]  # the golden view's golden image: for the tiled frames' difference gate
        results = pipeline.detect([r.view.board for r in viewed], golden, [r.plan for r in viewed], features)
        for record, result in zip(viewed, results):
            record.detections = _in_frame(result, record.view)
    return good


def _in_frame(result: Detections, view: GoldenView) -> Detections:
    """Golden-view detections in the frame's pixels: calls whose centre lies where the frame has no data dropped, boxes
    mapped through the registration (``boxes_to_frame``)."""
    keep = centres_valid(result.boxes, view).nonzero(as_tuple=True)[0]
    return dataclasses.replace(
        result,
        boxes=boxes_to_frame(result.boxes[keep], view),
        scores=result.scores[keep],
        labels=result.labels[keep],
        names=[result.names[i] for i in keep.tolist()],
    )
