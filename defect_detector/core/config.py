"""Typed, validated configuration loaded from YAML.

A config is a tree of frozen dataclasses. Loading rejects unknown keys and bad
values at start, naming the offending key (``train.lr: must be > 0, got -1``).
``key=value`` overrides from the command line use dotted paths
(``train.epochs=3``) and are parsed as YAML scalars.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from defect_detector.core.constants import DEEPPCB_CLASSES, DEFAULT_LAYERS
from defect_detector.core.io import atomic_write_text
from defect_detector.core.typed_yaml import ConfigError, apply_overrides, build, plain, read_yaml_mapping

__all__ = [
    "AugmentConfig",
    "Config",
    "ConfigError",
    "DataConfig",
    "EvalConfig",
    "ModelConfig",
    "MonitorConfig",
    "TrainConfig",
    "apply_overrides",
    "config_from_dict",
    "load_config",
    "read_yaml_mapping",
    "save_config",
]


@dataclass(frozen=True)
class DataConfig:
    """Where the COCO annotations and images are, and how images are shaped.

    Reference models (``model.in_channels: 2``) read each image's golden ``reference`` from the json.
    ``register_train`` / ``register_val``: align each reference to its image with
    ``data/register.py`` before augmentation (training) or inference (validation). Off for training
    data whose pairs are already aligned (DeepPCB's are): the simulated residual
    (``augment.ref_shift``, ``augment.ref_rotate``) then stands in for registration error.
    A pair that does not register is a counted skip.
    ``pixel_scale``: model input pixels per original image pixel that the model was trained at (1.0:
    native resolution). ``train`` records it; ``predict`` tiles frames that letterboxing would shrink
    well below it (``data/tiles.py``). None: not recorded (frames are letterboxed).
    ``max_images``: use only this many images of each json, spread evenly over it (a quick run on a subset); null: all."""

    train: str = ""
    val: str = ""
    train_images: str | None = None
    val_images: str | None = None
    class_names: tuple[str, ...] = DEEPPCB_CLASSES
    imgsz: int = 640
    on_bad_sample: str = "skip"
    workers: int = 2
    register_train: bool = False
    register_val: bool = True
    pixel_scale: float | None = None
    max_images: int | None = None

    def validate(self) -> None:
        _check(self.max_images is None or self.max_images >= 1, "data.max_images", "must be >= 1 or null", self.max_images)
        _check(self.pixel_scale is None or self.pixel_scale > 0, "data.pixel_scale", "must be > 0 or null", self.pixel_scale)
        _check(self.imgsz % 32 == 0 and self.imgsz >= 64, "data.imgsz", "must be a multiple of 32 and >= 64", self.imgsz)
        _check(len(self.class_names) > 0, "data.class_names", "must not be empty", self.class_names)
        _check(len(set(self.class_names)) == len(self.class_names), "data.class_names", "must be unique", self.class_names)
        _check(self.on_bad_sample in ("skip", "error"), "data.on_bad_sample", "must be 'skip' or 'error'", self.on_bad_sample)
        _check(self.workers >= 0, "data.workers", "must be >= 0", self.workers)


@dataclass(frozen=True)
class AugmentConfig:
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
    ``ref_rotate`` degrees, the error left after registration.
    """

    crop_size: int = 0
    crop_focus: float = 1.0

    hflip: float = 0.5
    vflip: float = 0.5
    transpose: float = 0.0
    rotate_deg: float = 5.0
    rotate_p: float = 0.3
    scale: float = 0.1
    translate: float = 0.05
    affine_p: float = 0.5
    brightness: float = 0.2
    contrast: float = 0.2
    gamma: tuple[float, float] = (80.0, 120.0)
    photometric_p: float = 0.5
    blur_p: float = 0.1
    noise_p: float = 0.1
    glare_p: float = 0.1
    invert_negatives: float = 0.0
    min_visibility: float = 0.4
    min_box_size: float = 2.0
    ref_shift: float = 2.0
    ref_rotate: float = 0.3
    ref_p: float = 1.0

    def validate(self) -> None:
        for name in (
            "crop_focus",
            "hflip",
            "vflip",
            "transpose",
            "rotate_p",
            "affine_p",
            "photometric_p",
            "blur_p",
            "noise_p",
            "glare_p",
            "invert_negatives",
            "min_visibility",
            "ref_p",
        ):
            value = getattr(self, name)
            _check(0.0 <= value <= 1.0, f"augment.{name}", "must be in [0, 1]", value)
        for name in ("rotate_deg", "scale", "translate", "brightness", "contrast", "min_box_size", "ref_shift", "ref_rotate"):
            _check(getattr(self, name) >= 0, f"augment.{name}", "must be >= 0", getattr(self, name))
        _check(
            self.crop_size == 0 or (self.crop_size % 32 == 0 and self.crop_size >= 64),
            "augment.crop_size",
            "must be 0 (off) or a multiple of 32 >= 64",
            self.crop_size,
        )
        _check(
            len(self.gamma) == 2 and 0 < self.gamma[0] <= self.gamma[1],
            "augment.gamma",
            "must be [low, high] with 0 < low <= high",
            self.gamma,
        )


FUSIONS = ("early", "diff", "siamese")
"""``model.fusion`` values: how a reference model combines the image and its golden reference."""

BOX_HEADS = ("distance", "dfl")
"""``model.box_head`` values: direct edge distances, or distributions over bins (distribution focal loss)."""


@dataclass(frozen=True)
class ModelConfig:
    """TinyDetector size. ``widths`` are the channels at strides 4, 8, 16, 32;
    ``depths`` the number of depthwise-separable blocks per stage. ``head_convs``: blocks in each class branch
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
    distribution focal loss (GFL)."""

    in_channels: int = 1
    fusion: str = "early"
    box_head: str = "distance"
    reg_max: int = 16
    widths: tuple[int, int, int, int] = (32, 64, 128, 192)
    depths: tuple[int, int, int, int] = (1, 3, 3, 2)
    neck_channels: int = 64
    head_convs: int = 2
    head_box_convs: int | None = None
    strides: tuple[int, ...] = (8, 16, 32)

    def validate(self) -> None:
        _check(self.in_channels in (1, 2), "model.in_channels", "must be 1 (image) or 2 (image + reference)", self.in_channels)
        _check(self.fusion in FUSIONS, "model.fusion", f"must be one of {', '.join(FUSIONS)}", self.fusion)
        _check(
            self.fusion == "early" or self.in_channels == 2,
            "model.fusion",
            "needs model.in_channels: 2 (an image and its reference) unless it is 'early'",
            self.fusion,
        )
        _check(self.box_head in BOX_HEADS, "model.box_head", f"must be one of {', '.join(BOX_HEADS)}", self.box_head)
        _check(2 <= self.reg_max <= 64, "model.reg_max", "must be an integer in [2, 64]", self.reg_max)
        _check(
            len(self.widths) == 4 and all(w > 0 and w % 8 == 0 for w in self.widths),
            "model.widths",
            "must be 4 positive multiples of 8",
            self.widths,
        )
        _check(len(self.depths) == 4 and all(d >= 1 for d in self.depths), "model.depths", "must be 4 integers >= 1", self.depths)
        _check(
            self.neck_channels > 0 and self.neck_channels % 8 == 0,
            "model.neck_channels",
            "must be a positive multiple of 8",
            self.neck_channels,
        )
        _check(self.head_convs >= 1, "model.head_convs", "must be >= 1", self.head_convs)
        _check(self.head_box_convs is None or self.head_box_convs >= 1, "model.head_box_convs", "must be >= 1 or null", self.head_box_convs)
        _check(tuple(self.strides) == (8, 16, 32), "model.strides", "must be [8, 16, 32]", self.strides)


@dataclass(frozen=True)
class TrainConfig:
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

    epochs: int = 30
    batch_size: int = 8
    accumulate: int = 1
    lr: float = 2e-3
    weight_decay: float = 0.05
    warmup_epochs: float = 1.0
    min_lr_ratio: float = 0.05
    grad_clip: float = 10.0
    ema_decay: float = 0.999
    amp: str = "auto"
    device: str = "auto"
    val_every: int = 1
    max_bad_steps: int = 50
    init_weights: str | None = None
    max_minutes: float | None = None
    freeze: tuple[str, ...] = ()

    def validate(self) -> None:
        _check(self.epochs >= 1, "train.epochs", "must be >= 1", self.epochs)
        _check(self.batch_size >= 1, "train.batch_size", "must be >= 1", self.batch_size)
        _check(self.accumulate >= 1, "train.accumulate", "must be >= 1", self.accumulate)
        _check(self.lr > 0 and math.isfinite(self.lr), "train.lr", "must be finite and > 0", self.lr)
        for name in ("weight_decay", "warmup_epochs"):
            value = getattr(self, name)
            _check(value >= 0 and math.isfinite(value), f"train.{name}", "must be finite and >= 0", value)
        _check(0 <= self.min_lr_ratio <= 1, "train.min_lr_ratio", "must be in [0, 1]", self.min_lr_ratio)
        _check(self.grad_clip > 0, "train.grad_clip", "must be > 0", self.grad_clip)
        _check(0 <= self.ema_decay < 1, "train.ema_decay", "must be in [0, 1)", self.ema_decay)
        _check(self.amp in ("auto", "off", "bf16", "fp16"), "train.amp", "must be one of auto, off, bf16, fp16", self.amp)
        _check(
            self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
            "train.device",
            "must be auto, cpu, cuda or cuda:N",
            self.device,
        )
        _check(self.val_every >= 1, "train.val_every", "must be >= 1", self.val_every)
        _check(self.max_bad_steps >= 0, "train.max_bad_steps", "must be >= 0", self.max_bad_steps)
        _check(self.max_minutes is None or self.max_minutes > 0, "train.max_minutes", "must be > 0 or null", self.max_minutes)
        _check(all(isinstance(n, str) and n for n in self.freeze), "train.freeze", "must be a list of module names", self.freeze)


@dataclass(frozen=True)
class EvalConfig:
    """Postprocess thresholds. ``conf`` is the low threshold used for mAP;
    ``f1_conf`` the operating point for DeepPCB's F-score. Every evaluation runs one model pass per
    image, as the deployed artifact does; test-time augmentation is asked for per command (``val --tta``,
    ``predict --tta``), never stored with the model. ``cross_class_iou``: after per-class NMS, a detection
    overlapping a higher-scored detection of another class by more than this IoU has its score multiplied by
    ``cross_class_factor`` (one defect, one call at the line's threshold; null: off)."""

    conf: float = 0.001
    nms_iou: float = 0.6
    max_det: int = 100
    f1_conf: float = 0.3
    cross_class_iou: float | None = None
    cross_class_factor: float = 0.25

    def validate(self) -> None:
        for name in ("conf", "nms_iou", "f1_conf", "cross_class_factor"):
            _check(0.0 <= getattr(self, name) <= 1.0, f"eval.{name}", "must be in [0, 1]", getattr(self, name))
        _check(self.max_det >= 1, "eval.max_det", "must be >= 1", self.max_det)
        ok = self.cross_class_iou is None or 0.0 <= self.cross_class_iou <= 1.0
        _check(ok, "eval.cross_class_iou", "must be in [0, 1] or null", self.cross_class_iou)


@dataclass(frozen=True)
class MonitorConfig:
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

    window: int = 16
    reference: int = 256
    z_warn: float = 5.5
    z_alert: float = 8.0
    z_clear: float | None = None
    baseline_margin: float | None = None
    rel_floor: float = 0.02
    shrinkage: float = 0.0
    debounce: int = 3
    recover: int = 12
    layers: tuple[str, ...] = DEFAULT_LAYERS

    def validate(self) -> None:
        _check(self.window >= 1, "monitor.window", "must be >= 1", self.window)
        _check(self.reference >= 0, "monitor.reference", "must be >= 0", self.reference)
        _check(0 < self.z_warn <= self.z_alert, "monitor.z_warn", "must be > 0 and <= monitor.z_alert", self.z_warn)
        clear_ok = self.z_clear is None or 0 < self.z_clear <= self.z_warn
        _check(clear_ok, "monitor.z_clear", "must be > 0 and <= monitor.z_warn (or null)", self.z_clear)
        margin_ok = self.baseline_margin is None or self.baseline_margin >= 0
        _check(margin_ok, "monitor.baseline_margin", "must be >= 0 (or null)", self.baseline_margin)
        _check(self.rel_floor >= 0, "monitor.rel_floor", "must be >= 0", self.rel_floor)
        _check(0.0 <= self.shrinkage <= 1.0, "monitor.shrinkage", "must be in [0, 1]", self.shrinkage)
        _check(self.debounce >= 1, "monitor.debounce", "must be >= 1", self.debounce)
        _check(self.recover >= 1, "monitor.recover", "must be >= 1", self.recover)
        _check(all(isinstance(p, str) and p for p in self.layers), "monitor.layers", "must be a list of layer names or globs", self.layers)


@dataclass(frozen=True)
class Config:
    """The whole run configuration."""

    name: str = "run"
    seed: int = 0
    out_dir: str = "runs"
    data: DataConfig = field(default_factory=DataConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)

    def validate(self) -> None:
        _check(bool(self.name) and "/" not in self.name, "name", "must be a non-empty name without '/'", self.name)
        for f in fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value):
                value.validate()

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (tuples as lists) for YAML, JSON and checkpoints."""
        return plain(dataclasses.asdict(self))


def _check(ok: bool, key: str, what: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{key}: {what}, got {value!r}")


def config_from_dict(raw: dict[str, Any]) -> Config:
    """Build and validate a :class:`Config` from a nested dict."""
    if not isinstance(raw, dict):
        raise ConfigError(f"config: must be a mapping, got {type(raw).__name__}")
    cfg = build(Config, raw)
    cfg.validate()
    return cfg


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
