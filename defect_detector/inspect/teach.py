"""``teach``: learn a new board design from its golden images alone.

No annotated defect is needed. Per golden image (any look, any size) ``teach`` writes, under ``<out>_teach/``:

- ``train/``: clean second captures of the golden image (gain, noise, defocus, JPEG, a small move), each paired with
  the golden image; training paints 1-4 defects on 80% of them, new ones each epoch (``augment.paint_p``,
  ``looks/paint.py``, sizes from the design's track width);
- ``select/``: boards with painted defects that choose ``best.pt``;
- ``held/``: other painted boards, never trained on nor chosen on, scored before and after.

It fine-tunes a golden-template model on them (:data:`RECIPE`) within ``minutes`` (``train.max_minutes``, which also
keeps time for the drift baseline, calibrated on the captures), and writes the best weights to ``out``: a checkpoint
that ``predict``, ``Inspector`` and the station take as they are. ``meta``/checkpoint ``taught`` lists the designs
taught (golden image name and pixel fingerprint).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from defect_detector.core.config import Config, config_from_dict, without_retired
from defect_detector.core.io import atomic_torch_save
from defect_detector.data.dataset import evenly_spaced
from defect_detector.data.images import load_image_gray, pixel_fingerprint
from defect_detector.data.photo_sets import golden_files, moved, painted_pairs, write_pairs
from defect_detector.engine.budget import Budget
from defect_detector.engine.domain import extend_domain
from defect_detector.engine.trainer import fit
from defect_detector.inspect.calibrate import calibrate_run
from defect_detector.inspect.validate import TrainingValidation, validate
from defect_detector.looks.render import capture
from defect_detector.model.checkpoint import PHOTO_REFERENCE_WEIGHTS, load_checkpoint, strip_checkpoint

log = logging.getLogger("defect_detector.inspect")

RECIPE: dict[str, dict[str, Any]] = {
    "augment": {
        "crop_size": 320, "crop_focus": 0.8, "hflip": 0.5, "vflip": 0.5, "transpose": 0.5, "rotate_deg": 3.0, "rotate_p": 0.2,
        "scale": 0.15, "translate": 0.0, "affine_p": 0.5, "brightness": 0.1, "contrast": 0.1, "photometric_p": 0.3,
        "blur_p": 0.05, "noise_p": 0.05, "glare_p": 0.0, "invert_negatives": 0.0, "ref_shift": 1.0, "ref_rotate": 0.2,
        "ref_p": 1.0, "render_p": 0.0, "paint_p": 0.8, "paint_max": 4, "paint_scale": None,
    },
    "train": {
        "freeze": ["backbone.stem", "backbone.stage1", "backbone.stage2", "backbone.stage3"], "epochs": 12, "batch_size": 16,
        "lr": 1e-4, "warmup_epochs": 1.0,
        "min_lr_ratio": 0.1, "ema_decay": 0.99, "val_every": 2,
    },
}  # fmt: skip
"""The fine-tune ``teach`` runs (on top of the starting weights' own config): the augmentation of
``configs/finetune_ref.yaml`` with defects painted on the fly, and its recipe: the shared trunk (stem to stage 3) kept,
the rest at 1/40 of the from-scratch learning rate. Painted defects are not the line's defects: a model that learns
them too freely forgets the real ones (see the README's measurements)."""

CAPTURES = 256
"""Training pairs (clean captures that training paints on), spread over the golden images."""

EPOCHS_PER_MINUTE = 2.0
"""Epochs of :data:`CAPTURES` pairs the schedule spans per minute of training time (at least 3; fewer for more pairs,
e.g. 4 captures each of 161 golden images): on 2 CPU cores such an epoch took 20-25 s, its validation every second
epoch 10 s (644 pairs of 640 px: 50 s), so the schedule ends within the time; ``train.max_minutes`` still caps it."""


SELECT_MAX = 24
"""Painted boards that choose ``best.pt`` at most (each validation scores them all)."""

HELD_MAX = 64
"""Held-back painted boards at most (scored before and after)."""


@dataclass
class TeachReport:
    """What ``teach`` measured: ``before`` / ``after`` (``engine.evaluate.calls_at`` at each weights' operating point,
    plus ``map50``) on the held-back painted boards, ``minutes`` spent, the designs taught and the weights written."""

    before: dict[str, Any]
    after: dict[str, Any]
    minutes: float
    designs: list[dict[str, str]]
    weights: Path
    work: Path


def _captures(golden: np.ndarray, stem: str, n: int, rng: np.random.Generator) -> Iterator[tuple]:
    for k in range(n):
        board = capture(golden.astype(np.float32), rng, strength=0.6)
        yield f"{stem}_c{k:03d}", moved(board, rng, 3.0, 0.3), golden, np.zeros((0, 4), np.float32), np.zeros(0, np.int64)


def _painted(images: list[tuple[str, np.ndarray]], tag: str, total: int, rng: np.random.Generator) -> Iterator[tuple]:
    """``total`` painted boards spread evenly over the golden ``images`` (whole rounds first, the rest evenly spaced)."""
    rounds, rest = divmod(total, len(images))
    extra = set(evenly_spaced(len(images), rest)) if rest else set()
    for k, (stem, golden) in enumerate(images):
        yield from painted_pairs(golden, f"{stem}_{tag}", rounds + (k in extra), 4, rng)


def write_teach_sets(goldens: list[Path], work: Path, held: int, seed: int, captures: int = CAPTURES) -> dict[str, Path]:
    """The ``train`` (``captures`` clean captures, at least 4 per golden image), ``select`` (4 painted boards per golden
    image, at most :data:`SELECT_MAX`) and ``held`` (``held`` per golden image, at most :data:`HELD_MAX`) COCO sets of
    ``goldens`` under ``work``."""
    images = [(p.stem, load_image_gray(p)) for p in goldens]
    per_design = max(4, captures // len(images))
    rng = np.random.default_rng(seed)
    sets = {
        "train": (pair for stem, g in images for pair in _captures(g, stem, per_design, rng)),
        "select": _painted(images, "s", min(4 * len(images), SELECT_MAX), rng),
        "held": _painted(images, "h", min(held * len(images), HELD_MAX), rng),
    }
    return {name: write_pairs(work / name, pairs, f"teach {name}: {len(images)} golden images") for name, pairs in sets.items()}


def teach_config(weights: Path, start: dict[str, Any], sets: dict[str, Path], work: Path, minutes: float, pairs: int = CAPTURES) -> Config:
    """The fine-tune of ``weights`` (its checkpoint ``start``, as ``torch.load`` reads it) on the teach ``sets`` (``pairs``
    training pairs) within ``minutes``: the weights' own config with :data:`RECIPE` over it."""
    raw = without_retired(start["config"], str(weights))
    raw["augment"] = RECIPE["augment"]
    raw["train"] = {k: v for k, v in raw.get("train", {}).items() if k in ("amp", "device", "weight_decay")} | RECIPE["train"]
    epochs = max(3, round(minutes * EPOCHS_PER_MINUTE * CAPTURES / pairs))
    raw["train"] |= {"init_weights": str(weights), "max_minutes": float(minutes), "epochs": epochs}
    raw["data"] = raw.get("data", {}) | {
        "train": str(sets["train"]), "val": str(sets["select"]), "train_images": None, "val_images": None,
        "register_train": True, "workers": 1, "max_images": None, "pixel_scale": None,
    }  # fmt: skip
    raw |= {"name": "run", "out_dir": str(work)}
    return config_from_dict(raw)


def _score(weights: Path, data: Path) -> dict[str, Any]:
    result = validate(weights, data, progress=False)
    return result.metrics["at_conf"] | {"map50": result.metrics["map50"]}


def _taught(weights_out: Path, run_weights: Path, goldens: list[Path], start: dict[str, Any]) -> list[dict[str, str]]:
    """Write the inference copy of ``run_weights`` (``strip_checkpoint``) to ``weights_out`` with ``taught``: the designs
    the starting checkpoint ``start`` was taught before and ``goldens``, one entry per golden image fingerprint; and
    the starting design domain extended by the goldens' looks (``engine/domain.py``), so they raise no warning.
    Returns the new entries."""
    images = [load_image_gray(p) for p in goldens]
    designs = [{"name": p.name, "key": pixel_fingerprint(image)} for p, image in zip(goldens, images)]
    out = strip_checkpoint(torch.load(run_weights, map_location="cpu", weights_only=True))
    known = {d["key"] for d in designs}
    out["taught"] = [d for d in start.get("taught", []) if d["key"] not in known] + designs
    domain = extend_domain(start.get("domain"), images)
    if domain is not None:
        out["domain"] = domain
    atomic_torch_save(out, weights_out)
    return designs


def teach(  # noqa: PLR0913 - the Python twin of the teach command's flags
    golden: str | Path,
    out: str | Path,
    weights: str | Path | None = None,
    minutes: float = 20.0,
    held: int = 8,
    seed: int = 0,
    captures: int = CAPTURES,
    threads: int | None = None,
) -> TeachReport:
    """Teach the design(s) of ``golden`` (a folder of golden images or one image) to ``weights`` (None: the bundled
    golden-template model for photographs, ``photo_ref.pt``) in at most ``minutes``, writing the taught checkpoint to
    ``out``; ``held`` painted boards per golden image are scored before and after. Raises ``ValueError`` naming the
    problem (no golden image, a blank one, a single-image model, too little time). ``threads``: torch CPU threads (None: the default)."""
    started = time.perf_counter()
    if minutes < 1.5:
        raise ValueError(f"--minutes must be at least 1.5 (painting, scoring before and after, a few epochs), got {minutes:g}")
    weights = Path(weights) if weights else PHOTO_REFERENCE_WEIGHTS
    out = Path(out)
    goldens = golden_files(golden)
    if load_checkpoint(weights).config.model.in_channels != 2:  # also checks the weights load into their model
        raise ValueError(f"{weights}: teach needs a golden-template model (model.in_channels 2); this one inspects single images")
    work = out.with_name(out.stem + "_teach")
    if work.exists():
        shutil.rmtree(work)
    start = torch.load(weights, map_location="cpu", weights_only=True)
    sets = write_teach_sets(goldens, work, held, seed, captures)
    before = _score(weights, sets["held"])
    left = max(0.3, minutes - (time.perf_counter() - started) / 60 - 0.5 - 0.02 * min(held * len(goldens), HELD_MAX))
    cfg = teach_config(weights, start, sets, work, left, max(4, captures // len(goldens)) * len(goldens))
    budget = Budget.start(cfg.train.max_minutes, time.perf_counter(), 30, True)
    run_dir = fit(cfg, threads=threads, budget=budget, validator=TrainingValidation())
    log.info("%s", calibrate_run(run_dir, str(sets["train"]), None, progress=False, budget=budget))
    designs = _taught(out, run_dir / "weights" / "best.pt", goldens, start)
    after = _score(out, sets["held"])
    return TeachReport(before, after, (time.perf_counter() - started) / 60, designs, out, work)
