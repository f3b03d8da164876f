"""False-warning rate of the design-domain check (``monitor/domain.py``) and its distances on photograph-like goldens.

Fits a :class:`~defect_detector.monitor.domain.DomainModel` on the golden images (``reference`` entries) of one COCO
json, then prints the distance distribution and the share called unlike on: those goldens (each against the model, so
a reference is at distance 0), the goldens of other jsons (DeepPCB's held-out groups: target 0), and photograph-like
renders of the held-out goldens (:func:`photograph`: three levels, soft edges, light gradient, noise, texture; target
all), also at 3x scale (1920 px: the binarized goldens should stay silent, their photographs not)::

    python -m benchmarks.domain_warnings --fit data/deeppcb/deeppcb_train.json --check data/deeppcb/deeppcb_val.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import cv2
import numpy as np

from defect_detector.engine.domain import golden_paths, read_gray
from defect_detector.monitor.domain import DomainModel, design_stats


def photograph(golden: np.ndarray, seed: int, levels: tuple[float, float, float] = (30.0, 57.0, 140.0), sigma: float = 1.2) -> np.ndarray:
    """A photograph-like uint8 ``[H, W]`` of a DeepPCB golden (copper dark): substrate, copper under the mask and pads
    (the copper's opening by a 15 px disc) at ``levels``, Gaussian-blurred edges (``sigma`` px), a smooth light
    gradient (+-15%), a low-frequency mask texture (+-3 levels) and sensor noise (sigma 3)."""
    rng = np.random.default_rng(seed)
    copper = (golden < 128).astype(np.uint8)
    pads = cv2.morphologyEx(copper, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (15, 15)))
    image = np.where(copper > 0, levels[1], levels[0]).astype(np.float32)
    image[pads > 0] = levels[2]
    image = cv2.GaussianBlur(image, (0, 0), sigma)
    h, w = image.shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    ramp = (np.cos(angle) * xx / w + np.sin(angle) * yy / h).astype(np.float32)
    image *= 1.0 + 0.3 * (ramp - ramp.mean())
    texture = cv2.GaussianBlur(rng.normal(0, 1, (h, w)).astype(np.float32), (0, 0), 3.0)
    image += 3.0 * texture / max(float(texture.std()), 1e-6)
    image += rng.normal(0, 3.0, (h, w)).astype(np.float32)
    return np.clip(image, 0, 255).round().astype(np.uint8)


def _report(name: str, model: DomainModel, images: list[np.ndarray]) -> None:
    distances = np.array([model.distance(design_stats(im)) for im in images])
    unlike = int((distances > model.threshold).sum())
    print(
        f"{name}: {len(images)} goldens, called unlike {unlike} ({unlike / max(1, len(images)):.1%}); distance min {distances.min():.2f} "
        f"median {np.median(distances):.2f} max {distances.max():.2f} (threshold {model.threshold:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", required=True, help="COCO json whose reference images the domain is fitted on")
    parser.add_argument("--check", nargs="*", default=[], help="COCO jsons whose reference images are checked")
    parser.add_argument("--photos", type=int, default=40, help="photograph-like renders of the checked goldens")
    args = parser.parse_args()
    fit = [read_gray(p) for p in golden_paths(args.fit)]
    start = time.perf_counter()
    stats = [design_stats(im) for im in fit]
    print(f"design_stats: {1e3 * (time.perf_counter() - start) / len(fit):.2f} ms per golden ({fit[0].shape[1]}x{fit[0].shape[0]})")
    model = DomainModel.fit(stats)
    print(f"fitted on {model.fitted_on} goldens ({len(fit) - model.fitted_on} flat), {len(model.references)} references")
    _report(f"fit {Path(args.fit).name}", model, fit)
    checked: list[np.ndarray] = []
    for path in args.check:
        images = [read_gray(p) for p in golden_paths(path)]
        _report(f"check {Path(path).name}", model, images)
        checked += images
    pool = checked or fit
    picks = [pool[i] for i in np.linspace(0, len(pool) - 1, min(args.photos, len(pool))).round().astype(int)]
    photos = [photograph(g, i) for i, g in enumerate(picks)]
    _report("photograph-like renders", model, photos)
    faint = [photograph(g, i, levels=(60.0, 75.0, 90.0), sigma=0.6) for i, g in enumerate(picks)]
    _report("photograph-like renders, 15-level contrast, sharp", model, faint)
    big = [cv2.resize(g, None, fx=3, fy=3, interpolation=cv2.INTER_NEAREST) for g in picks[:10]]
    _report("goldens at 3x scale (1920 px, binarized)", model, big)
    _report("photograph-like renders at 3x scale (1920 px)", model, [photograph(g, i) for i, g in enumerate(big)])
    print("e.g.", model.explain(design_stats(photos[0])))
    print("e.g.", model.explain(design_stats(faint[0])))


if __name__ == "__main__":
    main()
