"""Typed, validated configuration loaded from YAML.

A config is a tree of frozen pydantic models (``extra="forbid"``; :class:`defect_detector.core.typed_yaml.Section`).
Loading rejects unknown keys and bad values at start, one line naming the offending key and value
(``train.lr: must be finite and > 0, got -1.0``); copies with changes are ``cfg.model_copy(update={...})``.
``key=value`` overrides from the command line use dotted paths
(``train.epochs=3``) and are parsed as YAML scalars.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Annotated, Any, ClassVar

import yaml
from pydantic import Field, model_validator

from defect_detector.core.config_register import RegisterConfig
from defect_detector.core.constants import DEEPPCB_CLASSES, DEFAULT_LAYERS
from defect_detector.core.io import atomic_write_text
from defect_detector.core.limits import ExposureLimits, Limits
from defect_detector.core.typed_yaml import (
    AtLeastOne,
    Bool,
    ConfigError,
    Float,
    Int,
    NonNegative,
    Section,
    Share,
    Str,
    apply_overrides,
    check,
    plain,
    read_yaml_mapping,
)

__all__ = [
    "AugmentConfig",
    "Config",
    "ConfigError",
    "DataConfig",
    "EvalConfig",
    "ModelConfig",
    "MonitorConfig",
    "RETIRED",
    "TrainConfig",
    "apply_overrides",
    "config_from_dict",
    "load_config",
    "read_yaml_mapping",
    "save_config",
    "without_retired",
]

log = logging.getLogger("defect_detector.config")

RETIRED = {
    "data.register_val": "issue 43: validation during training always registers, through the frame pipeline",
    "eval.tta": "v0.8.0: test-time augmentation is asked for per command (val --tta, predict --tta), never stored",
    "monitor": "issue 43: drift thresholds are not a training setting; give them to predict with --monitor-config FILE",
}
"""Dotted keys (or whole sections) older versions had, and why they went. A checkpoint's stored config may still hold
them: they are dropped when it is read (:func:`without_retired`); a YAML config or a ``key=value`` override that names one stops at
start with that reason (:func:`config_from_dict`)."""


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


class DataConfig(Section):
    """Where the COCO annotations and images are, and how images are shaped.

    Reference models (``model.in_channels: 2``) read each image's golden ``reference`` from the json.
    ``register_train``: align each training reference to its image with ``align/register.py`` before augmentation.
    DeepPCB's pairs are not exactly aligned (the golden images are off by 2-7 px), so the bundled
    golden-template recipe registers its training pairs too; off, the pairs are used as given and the
    simulated residual (``augment.ref_shift``, ``augment.ref_rotate``) stands in for registration error.
    Validation during training, ``val``, ``calibrate`` and ``predict`` always register, through the frame pipeline
    (``val --no-register``: as given), whatever this key says. A pair that does not register is a counted skip.
    ``pixel_scale``: model input pixels per original image pixel that the model was trained at (1.0:
    native resolution). ``train`` records it; ``predict`` tiles frames that letterboxing would shrink
    well below it (``data/tiles.py``). None: not recorded (frames are letterboxed).
    ``max_images``: use only this many images of each json, spread evenly over it (a quick run on a subset); null: all."""

    section: ClassVar[str] = "data"

    train: Str = ""
    val: Str = ""
    train_images: Str | None = None
    val_images: Str | None = None
    class_names: tuple[Str, ...] = DEEPPCB_CLASSES
    imgsz: Int = 640
    on_bad_sample: Str = "skip"
    workers: Annotated[Int, Field(ge=0)] = 2
    register_train: Bool = False
    pixel_scale: Annotated[Float, Field(gt=0)] | None = None
    max_images: AtLeastOne | None = None

    @model_validator(mode="after")
    def _check_values(self) -> DataConfig:
        check(self.imgsz % 32 == 0 and self.imgsz >= 64, "imgsz", "must be a multiple of 32 and >= 64", self.imgsz)
        check(len(self.class_names) > 0, "class_names", "must not be empty", self.class_names)
        check(len(set(self.class_names)) == len(self.class_names), "class_names", "must be unique", self.class_names)
        check(self.on_bad_sample in ("skip", "error"), "on_bad_sample", "must be 'skip' or 'error'", self.on_bad_sample)
        return self


FUSIONS = ("early", "diff", "siamese")
"""``model.fusion`` values: how a reference model combines the image and its golden reference."""

BOX_HEADS = ("distance", "dfl")
"""``model.box_head`` values: direct edge distances, or distributions over bins (distribution focal loss)."""

BLOCKS = ("depthwise", "rep")
"""``model.blocks`` values (one per backbone stage): depthwise-separable, or re-parameterisable dense 3x3."""

STEMS = ("conv3", "patch4")
"""``model.stem`` values: a 3x3 stride-2 convolution, or a 4x4 stride-4 one."""


class ModelConfig(Section):
    """TinyDetector size. ``widths`` are the channels at strides 4, 8, 16, 32;
    ``depths`` the number of blocks per stage (``blocks``). ``head_convs``: blocks in each class branch
    of the head, and in each box branch unless ``head_box_convs`` says otherwise (null: the same).
    ``in_channels``: 1 for the single-image model; 2 for golden-template inspection (channel 0 the
    image, channel 1 its registered reference).
    ``fusion`` (reference models only): how the two channels meet. ``early``: both enter the stem's first
    convolution; ``diff``: the same, with a third channel ``|image - reference|`` computed inside the model;
    ``siamese``: one shared-weight trunk (stem, stages 1-3) runs on the image and on the reference, and their
    features are fused (concatenation with their difference, then a 1x1 convolution) at strides 8 and 16; the
    reference's trunk features can be computed once per golden image and reused.
    ``box_head``: ``distance`` regresses each edge distance directly (softplus); ``dfl`` predicts a distribution
    over ``reg_max`` bins per edge (in units of the level's stride), read as its expectation, and trains it with
    distribution focal loss (GFL).
    ``stem``: ``conv3`` (a 3x3 stride-2 convolution to ``stem_channels``, then stage 1 halves to stride 4) or
    ``patch4`` (a 4x4 stride-4 convolution over non-overlapping patches: nothing runs at stride 2).
    ``blocks``: the block of each of the four stages, ``depthwise`` (depthwise 3x3 + pointwise 1x1) or ``rep``
    (3x3 + 1x1 + identity branches while training, one dense 3x3 convolution once re-parameterised for
    inference: ``model/rep.py``). The defaults are the architecture every bundled checkpoint was trained with."""

    section: ClassVar[str] = "model"

    in_channels: Int = 1
    fusion: Str = "early"
    box_head: Str = "distance"
    reg_max: Annotated[Int, Field(ge=2, le=64)] = 16
    widths: tuple[Int, Int, Int, Int] = (32, 64, 128, 192)
    depths: tuple[Int, Int, Int, Int] = (1, 3, 3, 2)
    neck_channels: Int = 64
    head_convs: AtLeastOne = 2
    head_box_convs: AtLeastOne | None = None
    strides: tuple[Int, ...] = (8, 16, 32)
    stem: Str = "conv3"
    stem_channels: Int = 32
    blocks: tuple[Str, Str, Str, Str] = ("depthwise", "depthwise", "depthwise", "depthwise")

    @model_validator(mode="after")
    def _check_values(self) -> ModelConfig:
        check(self.in_channels in (1, 2), "in_channels", "must be 1 (image) or 2 (image + reference)", self.in_channels)
        check(self.fusion in FUSIONS, "fusion", f"must be one of {', '.join(FUSIONS)}", self.fusion)
        check(
            self.fusion == "early" or self.in_channels == 2,
            "fusion",
            "needs model.in_channels: 2 (an image and its reference) unless it is 'early'",
            self.fusion,
        )
        check(self.box_head in BOX_HEADS, "box_head", f"must be one of {', '.join(BOX_HEADS)}", self.box_head)
        check(
            len(self.widths) == 4 and all(w > 0 and w % 8 == 0 for w in self.widths),
            "widths",
            "must be 4 positive multiples of 8",
            self.widths,
        )
        check(len(self.depths) == 4 and all(d >= 1 for d in self.depths), "depths", "must be 4 integers >= 1", self.depths)
        check(
            self.neck_channels > 0 and self.neck_channels % 8 == 0,
            "neck_channels",
            "must be a positive multiple of 8",
            self.neck_channels,
        )
        check(tuple(self.strides) == (8, 16, 32), "strides", "must be [8, 16, 32]", self.strides)
        check(self.stem in STEMS, "stem", f"must be one of {', '.join(STEMS)}", self.stem)
        stem_ok = self.stem_channels > 0 and self.stem_channels % 8 == 0
        check(stem_ok, "stem_channels", "must be a positive multiple of 8", self.stem_channels)
        check(all(b in BLOCKS for b in self.blocks), "blocks", f"must be 4 of {', '.join(BLOCKS)} (one per stage)", self.blocks)
        return self


class TrainConfig(Section):
    """Optimisation. ``amp``: 'auto' = float16 on CUDA, off on CPU; 'bf16' forces
    bfloat16 autocast on CPU; 'off' disables autocast. ``init_weights``: start
    from a checkpoint's (EMA) weights instead of a random initialisation, with a
    fresh optimizer and schedule (fine-tuning, e.g. the bundled model on your line's data); the run adopts the
    architecture of those weights unless the config names a ``model`` section, and stops when fewer than 90% of their
    tensors fit (another class count keeps the class branches fresh); it also takes their ``eval.nms_iou`` and
    cross-class demotion unless the config names them, validates them first (``best.pt`` holds them until an epoch
    beats them) and stores as ``eval.f1_conf`` the F-optimal threshold of its own validation. ``max_minutes``: the
    whole ``train`` command ends within this many minutes (null: run every epoch): an epoch starts only when it, its
    validation and the smallest drift baseline (30 frames) fit, the last epoch is validated, and the baseline takes
    the time left (engine/budget.py); the schedule still spans ``epochs``. ``freeze``: modules of the detector kept as
    they are (no gradient, BatchNorm statistics frozen), by dotted name, e.g. ``[backbone]`` or ``[backbone.stem,
    backbone.stage1]`` (fine-tuning on few boards; ``train`` refuses a name the model does not have)."""

    section: ClassVar[str] = "train"

    epochs: AtLeastOne = 60
    batch_size: AtLeastOne = 8
    accumulate: AtLeastOne = 1
    lr: Float = 4e-3
    weight_decay: Float = 0.05
    warmup_epochs: Float = 1.0
    min_lr_ratio: Share = 0.05
    grad_clip: Annotated[Float, Field(gt=0)] = 10.0
    ema_decay: Annotated[Float, Field(ge=0, lt=1)] = 0.999
    amp: Str = "auto"
    device: Str = "auto"
    val_every: AtLeastOne = 1
    max_bad_steps: Annotated[Int, Field(ge=0)] = 50
    init_weights: Str | None = None
    max_minutes: Annotated[Float, Field(gt=0)] | None = None
    freeze: tuple[Str, ...] = ()

    @model_validator(mode="after")
    def _check_values(self) -> TrainConfig:
        check(self.lr > 0 and math.isfinite(self.lr), "lr", "must be finite and > 0", self.lr)
        for name in ("weight_decay", "warmup_epochs"):
            value = getattr(self, name)
            check(value >= 0 and math.isfinite(value), name, "must be finite and >= 0", value)
        check(self.amp in ("auto", "off", "bf16", "fp16"), "amp", "must be one of auto, off, bf16, fp16", self.amp)
        check(
            self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
            "device",
            "must be auto, cpu, cuda or cuda:N",
            self.device,
        )
        check(all(n for n in self.freeze), "freeze", "must be a list of module names", self.freeze)
        return self


class EvalConfig(Section):
    """Postprocess thresholds. ``conf`` is the low threshold used for mAP;
    ``f1_conf`` the operating point for DeepPCB's F-score. Every evaluation runs one model pass per
    image, as the deployed artifact does; test-time augmentation is asked for per command (``val --tta``,
    ``predict --tta``), never stored with the model. ``cross_class_iou``: after per-class NMS, a detection
    overlapping a higher-scored detection of another class by more than this IoU has its score multiplied by
    ``cross_class_factor`` (one defect, one call at the line's threshold; null: off). ``merge_ios``: then, among calls at or
    above ``f1_conf``, a call absorbs the lower-scored calls of any class whose intersection over the smaller box with it
    exceeds this (model/postprocess.py ``merge_nested``; null: off). ``hidden_max_area``: the largest region of a frame,
    as a share of it, that may be hidden (glare, a shadow, a hand: cells unlike the matched golden image; screens/hidden.py)
    before the frame is not inspected; glare is refused at any size (null: only glare). ``exposure_*``: the exposure
    range the model was validated at (screens/exposure.py; a frame outside it is not inspected; null: not checked). The
    weights carry these and the ``register`` section as one model, ``Limits`` (core/limits.py)."""

    section: ClassVar[str] = "eval"

    conf: Share = 0.001
    nms_iou: Share = 0.6
    max_det: AtLeastOne = 100
    f1_conf: Share = 0.3
    cross_class_iou: Share | None = None
    cross_class_factor: Share = 0.25
    merge_ios: Share | None = None
    hidden_max_area: Share | None = Limits().hidden_max_area
    exposure_min_light: Share = ExposureLimits().min_light
    exposure_min_contrast: Share = ExposureLimits().min_contrast
    exposure_max_clipped: Share = ExposureLimits().max_clipped
    exposure_max_highlights: Share | None = ExposureLimits().max_highlights
    exposure_max_midtones: Share | None = ExposureLimits().max_midtones


class MonitorConfig(Section):
    """Drift detection (algorithm and units: monitor/drift.py).

    ``z_warn`` / ``z_alert`` bound the drift score, a Mahalanobis distance in units of the spread of
    single clean calibration frames; per-statistic z-scores (same units) only explain an alert.
    ``window``: frames averaged (the detector reports ``warming_up`` until it has seen that many); ``reference``:
    clean frames that form the line reference, once at the start and after each deliberate rebaseline, then frozen
    (0 = compare with the calibration baseline only; a change of golden image keeps it); ``z_clear``: an alert is
    recovered only after ``recover`` consecutive frames score below it (hysteresis well below ``z_warn``, so a
    board design on which a fault shows less does not clear it; None: ``0.5 * z_warn``); ``baseline_margin``: z
    allowed against the calibration baseline before it counts (unseen board designs sit away from it; None: 2 for a
    single-image baseline, 0 for one read against golden images, where the design cancels out); ``rel_floor``:
    the scale is at least this fraction of the baseline value; ``shrinkage``: how far the
    calibration correlation between statistics is pulled towards none (0 = as measured, 1 = each
    statistic on its own); ``debounce``: consecutive frames above it before an alert; ``recover``:
    consecutive frames below ``z_clear`` before a recovery event; ``layers``: globs choosing which of the
    baseline's layers are scored (default: ``DEFAULT_LAYERS`` of monitor/hooks.py, the stem and
    backbone stages 1-3; none matching: all are). The first layers measure how the image
    is formed (brightness, contrast, sharpness, noise); deep layers mostly follow what is on the
    board, and a new board design moves them more than a camera fault does.
    """

    section: ClassVar[str] = "monitor"

    window: AtLeastOne = 16
    reference: Annotated[Int, Field(ge=0)] = 256
    z_warn: Float = 5.5
    z_alert: Float = 8.0
    z_clear: Float | None = None
    baseline_margin: NonNegative | None = None
    rel_floor: NonNegative = 0.02
    shrinkage: Share = 0.0
    debounce: AtLeastOne = 3
    recover: AtLeastOne = 12
    layers: tuple[Str, ...] = DEFAULT_LAYERS

    @model_validator(mode="after")
    def _check_values(self) -> MonitorConfig:
        check(0 < self.z_warn <= self.z_alert, "z_warn", "must be > 0 and <= monitor.z_alert", self.z_warn)
        clear_ok = self.z_clear is None or 0 < self.z_clear <= self.z_warn
        check(clear_ok, "z_clear", "must be > 0 and <= monitor.z_warn (or null)", self.z_clear)
        check(all(isinstance(p, str) and p for p in self.layers), "layers", "must be a list of layer names or globs", self.layers)
        return self


class Config(Section):
    """The whole run configuration."""

    name: Str = "run"
    seed: Int = 0
    out_dir: Str = "runs"
    data: DataConfig = Field(default_factory=DataConfig)
    augment: AugmentConfig = Field(default_factory=AugmentConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    register: RegisterConfig = Field(default_factory=RegisterConfig)

    @model_validator(mode="after")
    def _check_values(self) -> Config:
        check(bool(self.name) and "/" not in self.name, "name", "must be a non-empty name without '/'", self.name)
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (tuples as lists) for YAML, JSON and checkpoints."""
        return plain(self.model_dump())


def _retired_in(raw: dict[str, Any]) -> list[str]:
    """The :data:`RETIRED` keys that the nested dict ``raw`` sets."""
    found = []
    for key in RETIRED:
        section, _, name = key.partition(".")
        if (not name and section in raw) or (name and isinstance(raw.get(section), dict) and name in raw[section]):
            found.append(key)
    return found


def without_retired(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """A copy of the stored config ``raw`` (a checkpoint's, read from ``source``) without its :data:`RETIRED` keys,
    each drop logged at debug level: what lets old checkpoints load."""
    out = dict(raw)
    for key in _retired_in(raw):
        section, _, name = key.partition(".")
        if name:
            out[section] = {k: v for k, v in out[section].items() if k != name}
        else:
            del out[section]
        log.debug("%s: dropped the retired config key %s (%s)", source, key, RETIRED[key])
    return out


def config_from_dict(raw: dict[str, Any]) -> Config:
    """Build and validate a :class:`Config` from a nested dict. A :data:`RETIRED` key is a :class:`ConfigError`
    naming it and why it went (a checkpoint's stored config goes through :func:`without_retired` first)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"config: must be a mapping, got {type(raw).__name__}")
    retired = _retired_in(raw)
    if retired:
        raise ConfigError(f"{retired[0]}: retired ({RETIRED[retired[0]]}); remove it")
    return Config.from_raw(raw)


def load_config(path: str | os.PathLike[str] | None, overrides: list[str] | None = None) -> Config:
    """Load a YAML config (or the defaults when ``path`` is None) plus overrides (:func:`read_yaml_mapping`: an
    empty file, a repeated key or a top level that is no mapping is a one-line :class:`ConfigError`).

    Relative data paths stay as written: they are resolved against the current
    working directory when the dataset opens them.
    """
    raw = read_yaml_mapping(path) if path is not None else {}
    return config_from_dict(apply_overrides(raw, overrides or []))


def save_config(cfg: Config, path: str | os.PathLike[str]) -> None:
    """Write the resolved config as YAML, atomically."""
    atomic_write_text(Path(path), yaml.safe_dump(cfg.to_dict(), sort_keys=False))
