"""The look step of pair augmentation: a binarized (board, golden) pair seen at another scale, with painted defects,
as a photograph.

:class:`LookTransform` runs first in :class:`~defect_detector.data.transforms.PairTransform`, in the pair's original
frame, on training pairs only (``augment.render_*``, ``augment.paint_*``):

1. *scale* (with the render): a window of ``1 / s`` of the pair, placed on a random box when there is one, is cut and
   resized back to the pair's size (albumentations ``Crop`` + ``Resize``, the golden image as an additional target,
   boxes moved and dropped below ``min_visibility``), so tracks and defects grow ``s`` times (``render_scale``);
2. *paint* (``paint_p``): 1 to ``paint_max`` defects are painted on the board (``looks/paint.py``), away from its boxes,
   ``paint_scale`` times DeepPCB's sizes (times the zoom; None: read from the board's track width),
   before the render half of the time (they then look rendered) and after it otherwise (with the photograph's
   own levels);
3. *render* (``render_p``): both become a photograph of one random look of ``render_family`` (``looks/render.py``).

Pairs whose images are not binarized layouts (a photograph dataset) should leave ``render_p`` at 0.
"""

from __future__ import annotations

import albumentations as A
import numpy as np

from defect_detector.looks.paint import paint_defects
from defect_detector.looks.render import render_pair, sample_look

_Sample = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class LookTransform:
    """Render / paint / scale a pair (see the module docstring). ``__call__(image, reference, boxes, labels)``: uint8
    ``[H, W]`` each, boxes float32 ``[N, 4]`` xyxy px, labels int64 ``[N]``; returns the same, in the same frame size."""

    def __init__(  # noqa: PLR0913 - one argument per augment key
        self,
        render_p: float = 0.0,
        family: str = "train",
        scale: tuple[float, float] = (1.0, 1.0),
        paint_p: float = 0.0,
        paint_max: int = 4,
        min_visibility: float = 0.4,
        paint_scale: float | None = 1.0,
    ) -> None:
        self.render_p, self.family, self.scale = render_p, family, scale
        self.paint_p, self.paint_max, self.min_visibility, self.paint_scale = paint_p, paint_max, min_visibility, paint_scale
        self.rng = np.random.default_rng()

    def set_random_state(self, rng: np.random.Generator, py_random: object = None) -> None:
        """Draw from ``rng`` from now on (``data/collate.py`` seeds each sample)."""
        self.rng = rng

    def _zoom(self, image: np.ndarray, reference: np.ndarray, boxes: np.ndarray, labels: np.ndarray, s: float) -> _Sample:
        h, w = image.shape
        cw, ch = max(32, round(w / s)), max(32, round(h / s))
        if len(boxes) and self.rng.random() < 0.8:
            x0, y0, x1, y1 = boxes[int(self.rng.integers(len(boxes)))]
            cx, cy = self.rng.uniform(x0, x1), self.rng.uniform(y0, y1)
        else:
            cx, cy = self.rng.uniform(0, w), self.rng.uniform(0, h)
        left, top = int(np.clip(cx - cw / 2, 0, w - cw)), int(np.clip(cy - ch / 2, 0, h - ch))
        step = A.Compose(
            [A.Crop(left, top, left + cw, top + ch), A.Resize(h, w)],
            bbox_params=A.BboxParams(format="pascal_voc", label_fields=["labels"], min_visibility=self.min_visibility),
            additional_targets={"reference": "image"},
        )
        out = step(image=image, reference=reference, bboxes=boxes, labels=labels)
        return out["image"], out["reference"], np.asarray(out["bboxes"], np.float32).reshape(-1, 4), np.asarray(out["labels"], np.int64)

    def _paint(self, image: np.ndarray, boxes: np.ndarray, labels: np.ndarray, size: float | None) -> tuple[np.ndarray, ...]:
        count = int(self.rng.integers(1, self.paint_max + 1))
        try:
            image, new_boxes, new_labels = paint_defects(image, count, self.rng, avoid=boxes, size=size)
        except ValueError:
            return image, boxes, labels
        return image, np.concatenate([boxes, new_boxes]), np.concatenate([labels, new_labels])

    def __call__(self, image: np.ndarray, reference: np.ndarray, boxes: np.ndarray, labels: np.ndarray) -> _Sample:
        render = self.rng.random() < self.render_p
        paint = self.rng.random() < self.paint_p
        s = float(self.rng.uniform(*self.scale)) if render else 1.0
        if s > 1.0:
            image, reference, boxes, labels = self._zoom(image, reference, boxes, labels, s)
        paint_first = paint and (not render or self.rng.random() < 0.5)
        size = None if self.paint_scale is None else self.paint_scale * s
        if paint_first:
            image, boxes, labels = self._paint(image, boxes, labels, size)
        if render:
            image, reference = render_pair(image, reference, sample_look(self.rng, self.family), self.rng, scale=s)
        if paint and not paint_first:
            image, boxes, labels = self._paint(image, boxes, labels, size)
        return image, reference, boxes, labels
