"""The ``augment`` section of the config: box-aware augmentation, and the look step of pairs (``looks/looks.py``)."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, model_validator

from defect_detector.core.typed_yaml import Float, Int, NonNegative, Section, Share, Str, check


class AugmentConfig(Section):
    """Box-aware augmentation, applied in the original image frame (training only).

    Probabilities are in [0, 1]; a probability of 0 removes the transform.
    ``crop_size`` > 0 trains on random full-resolution crops of that size
    (defects are small, so crops keep their pixels while making each step
    cheaper); a fraction ``crop_focus`` of them must contain a box, the rest
    are placed anywhere so defect-free areas are seen too. ``transpose`` swaps
    rows and columns; with both flips it reaches all 8 right-angle orientations,
    which suits layouts with no preferred direction (PCBs). ``invert_negatives``
    is the probability of inverting (``255 - x``) a sample that holds no box
    after cropping: copper and substrate swap grey levels, and a defect-free
    image stays defect-free, so the model sees normal structures of the opposite
    polarity (holes and gaps in large copper areas) as negatives. Validation
    always uses ``data.imgsz``.

    Pairs (reference models): geometric transforms move the image and its reference together;
    photometric ones (brightness, contrast, gamma, blur, noise, glare) are drawn independently for
    each, since the golden image was captured under other light. With probability ``ref_p`` the
    reference alone is then moved by a random rigid residual of up to ``ref_shift`` pixels and
    ``ref_rotate`` degrees, the error left after registration. With probability ``capture_p`` the board is first
    captured as a line's day delivers it, every factor of the capture model together (``core/capture.py``: move,
    scale, perspective, lens distortion, bow, gain, gamma, offset, light gradient, defocus, noise, JPEG), seen back in
    the pair's frame through the capture's exact inverse and matched to the golden image's levels by the photometric
    registration (``data/line_capture.py``), as inspection does; boxes stay where they are. Of those captures,
    ``capture_seam_p`` show the golden image in the band the moved board leaves uncovered (when clear of the boxes),
    and ``capture_hidden_p`` carry an unlabelled glare spot or dark occluder clear of the boxes.

    Looks (pairs only, ``looks/looks.py``): with probability ``render_p`` a binarized pair becomes a photograph of
    one random look of ``render_family`` (``train`` or ``holdout``, ``looks/render.py``), first zoomed by a factor
    drawn from ``render_scale``; with probability ``paint_p`` 1 to ``paint_max`` defects are painted on the board
    (``looks/paint.py``), ``paint_scale`` times DeepPCB's sizes (times the zoom; null: from each board's track width).
    """

    section: ClassVar[str] = "augment"

    crop_size: Int = 0
    crop_focus: Share = 1.0

    hflip: Share = 0.5
    vflip: Share = 0.5
    transpose: Share = 0.0
    rotate_deg: NonNegative = 5.0
    rotate_p: Share = 0.3
    scale: NonNegative = 0.1
    translate: NonNegative = 0.05
    affine_p: Share = 0.5
    brightness: NonNegative = 0.2
    contrast: NonNegative = 0.2
    gamma: tuple[Float, Float] = (80.0, 120.0)
    photometric_p: Share = 0.5
    blur_p: Share = 0.1
    noise_p: Share = 0.1
    glare_p: Share = 0.1
    invert_negatives: Share = 0.0
    min_visibility: Share = 0.4
    min_box_size: NonNegative = 2.0
    ref_shift: NonNegative = 2.0
    ref_rotate: NonNegative = 0.3
    ref_p: Share = 1.0
    capture_p: Share = 0.0
    capture_seam_p: Share = 0.0
    capture_hidden_p: Share = 0.0
    render_p: Share = 0.0
    render_family: Str = "train"
    render_scale: tuple[Float, Float] = (1.0, 1.0)
    paint_p: Share = 0.0
    paint_max: Annotated[Int, Field(ge=1, le=32)] = 4
    paint_scale: Annotated[Float, Field(ge=0.25, le=8)] | None = 1.0

    @model_validator(mode="after")
    def _check_values(self) -> AugmentConfig:
        check(self.render_family in ("train", "holdout"), "render_family", "must be 'train' or 'holdout'", self.render_family)
        low, high = self.render_scale
        check(1.0 <= low <= high <= 8.0, "render_scale", "must be [low, high] with 1 <= low <= high <= 8", list(self.render_scale))
        check(
            self.crop_size == 0 or (self.crop_size % 32 == 0 and self.crop_size >= 64),
            "crop_size",
            "must be 0 (off) or a multiple of 32 >= 64",
            self.crop_size,
        )
        check(
            len(self.gamma) == 2 and 0 < self.gamma[0] <= self.gamma[1],
            "gamma",
            "must be [low, high] with 0 < low <= high",
            self.gamma,
        )
        return self
