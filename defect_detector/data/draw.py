"""Drawing detections on images with OpenCV: annotated ``predict`` outputs, the demo, the notebook and the
prediction grid of the evaluation plots.

Boxes are xyxy in the pixels of the image they are drawn on; images come back as new BGR uint8 arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import cv2
import numpy as np

GT_COLOR_BGR = (0, 200, 0)
PRED_COLOR_BGR = (0, 0, 255)
CLASS_COLORS_BGR = ((0, 0, 230), (230, 110, 0), (0, 160, 240), (200, 60, 200), (0, 200, 200), (150, 120, 0), (60, 60, 160), (90, 90, 90))
"""One colour per class (by label, cycling): red, blue, orange, purple, yellow, teal, brown, grey; distinct on gray boards."""
STAMP_COLOR_BGR = (0, 0, 200)
VERDICT_COLORS_BGR = {"PASS": (0, 140, 0), "FAIL": (0, 0, 200), "PASS SUSPECT": (0, 120, 230), "NOT INSPECTED": STAMP_COLOR_BGR}
"""The badge colour of each verdict stamp: green, red, orange, red."""
HIDDEN_COLOR_BGR = (230, 0, 230)
"""Magenta: the outline of a hidden area (glare, a shadow, a hand), a colour no board and no class shows."""


def to_numpy(x: Any) -> np.ndarray:
    """Convert a torch tensor, list or array to a numpy array (``None`` becomes an empty array)."""
    if x is None:
        return np.zeros((0,), dtype=np.float64)
    if hasattr(x, "detach"):  # torch.Tensor, without importing torch here
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _class_name(label: int, class_names: Sequence[str]) -> str:
    """Name of class ``label``; its number when it is outside ``class_names``."""
    return class_names[label] if 0 <= label < len(class_names) else str(label)


def to_bgr_uint8(image: np.ndarray) -> np.ndarray:
    """Return a new BGR uint8 copy of a grayscale ``[H,W]``/``[H,W,1]`` or BGR ``[H,W,3]`` image.

    Float images with values in [0, 1] are scaled to [0, 255]; other values are clipped to [0, 255].
    """
    img = to_numpy(image)
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    if img.ndim not in (2, 3) or (img.ndim == 3 and img.shape[2] != 3):
        raise ValueError(f"expected a grayscale [H,W] or BGR [H,W,3] image, got shape {img.shape}")
    if img.dtype != np.uint8:
        is_float = np.issubdtype(img.dtype, np.floating)
        img = img.astype(np.float64)
        if img.size and is_float and img.max() <= 1.0:
            img = img * 255.0
        img = np.clip(np.round(img), 0, 255).astype(np.uint8)
    if img.ndim == 2:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    return img.copy()


def _line_thickness(height: int, width: int) -> int:
    """Box line thickness that stays visible from small tiles up to 2048x1536 images (2 px at 640, 5 px at 1536)."""
    return max(1, round(min(height, width) / 320))


def _font_scale(height: int, width: int) -> float:
    """OpenCV font scale proportional to image size (0.64 at 640, 1.5 at 1536), never below 0.4."""
    return max(0.4, min(height, width) / 1000.0)


def _text_color(color: tuple[int, int, int]) -> tuple[int, int, int]:
    """Black or white, whichever reads better on a filled background of BGR ``color``."""
    b, g, r = color
    return (0, 0, 0) if 0.114 * b + 0.587 * g + 0.299 * r > 150 else (255, 255, 255)


def class_color(label: int) -> tuple[int, int, int]:
    """The BGR colour of class ``label`` (:data:`CLASS_COLORS_BGR`)."""
    return CLASS_COLORS_BGR[int(label) % len(CLASS_COLORS_BGR)]


def _free_spot(rect: tuple[int, int, int, int], taken: list[tuple[int, int, int, int]], height: int) -> tuple[int, int, int, int]:
    """``rect`` (x1, y1, x2, y2) moved down, then up, in steps of its height until it overlaps no rect of ``taken``
    (at most 8 steps each way; the original place if none is free)."""
    x1, y1, x2, y2 = rect
    step = y2 - y1

    def free(ty: int) -> bool:
        return 0 <= ty and ty + step <= height and all(x2 <= a1 or x1 >= a2 or ty + step <= b1 or ty >= b2 for a1, b1, a2, b2 in taken)

    for k in range(9):
        for ty in (y1 + k * step, y1 - k * step):
            if free(ty):
                return x1, ty, x2, ty + step
    return rect


def draw_boxes(
    canvas: np.ndarray,
    boxes: Any,
    scores: Any,
    labels: Any,
    class_names: Sequence[str],
    color: tuple[int, int, int] | None = None,
    label_at_bottom: bool = False,
) -> None:
    """Draw xyxy ``boxes`` with "name score" tags on BGR ``canvas`` in place.

    ``color``: one BGR colour for every box, or None for each class's own (:func:`class_color`). Tags sit above the
    box top-left corner (or below its bottom-left corner when ``label_at_bottom``), moved inside the image, and moved
    off tags already drawn so that crowded calls on large frames stay readable. ``scores`` may be ``None``.
    """
    boxes_np = to_numpy(boxes).reshape(-1, 4).astype(np.float64)
    labels_np = to_numpy(labels).reshape(-1).astype(np.int64)
    scores_np = None if scores is None else to_numpy(scores).reshape(-1).astype(np.float64)
    if len(labels_np) != len(boxes_np) or (scores_np is not None and len(scores_np) != len(boxes_np)):
        raise ValueError(
            f"boxes ({len(boxes_np)}), labels ({len(labels_np)}) and scores "
            f"({'None' if scores_np is None else len(scores_np)}) must have the same length"
        )
    height, width = canvas.shape[:2]
    thickness = _line_thickness(height, width)
    font_scale = _font_scale(height, width)
    font_thickness = max(1, thickness // 2)
    font = cv2.FONT_HERSHEY_SIMPLEX
    taken: list[tuple[int, int, int, int]] = []
    for i, box in enumerate(boxes_np):
        if not np.all(np.isfinite(box)):
            continue
        bgr = tuple(int(c) for c in (color if color is not None else class_color(int(labels_np[i]))))
        x1, y1, x2, y2 = (int(round(v)) for v in box)
        x1, x2 = sorted((min(max(x1, 0), width - 1), min(max(x2, 0), width - 1)))
        y1, y2 = sorted((min(max(y1, 0), height - 1), min(max(y2, 0), height - 1)))
        cv2.rectangle(canvas, (x1, y1), (x2, y2), bgr, thickness, lineType=cv2.LINE_AA)
        text = _class_name(int(labels_np[i]), class_names)
        if scores_np is not None:
            text = f"{text} {scores_np[i]:.2f}"
        (tw, th), baseline = cv2.getTextSize(text, font, font_scale, font_thickness)
        tag_h = th + baseline + 2
        if label_at_bottom:
            ty = y2 if y2 + tag_h <= height else max(y2 - tag_h, 0)
        else:
            ty = y1 - tag_h if y1 - tag_h >= 0 else min(y1, max(height - tag_h, 0))
        tx = min(x1, max(width - tw - 2, 0))
        tx, ty, tx2, ty2 = _free_spot((tx, ty, tx + tw + 2, ty + tag_h), taken, height)
        taken.append((tx, ty, tx2, ty2))
        cv2.rectangle(canvas, (tx, ty), (tx2, ty2), bgr, thickness=-1)
        cv2.putText(canvas, text, (tx + 1, ty + th + 1), font, font_scale, _text_color(bgr), font_thickness, lineType=cv2.LINE_AA)


_STAMP_MARGIN = 8  # px left free at each side of a stamp's text


def _pieces(word: str, fits: Callable[[str], bool]) -> list[str]:
    """``word`` split into the longest leading pieces that ``fits`` (one character at least)."""
    pieces = []
    while word and not fits(word):
        cut = next((k for k in range(len(word) - 1, 1, -1) if fits(word[:k])), 1)
        pieces.append(word[:cut])
        word = word[cut:]
    return [*pieces, word] if word else pieces


def _wrap(text: str, font: int, scale: float, thickness: int, width: int) -> list[str]:
    """``text`` broken at spaces into lines at most ``width`` px wide in this font; a word wider than that is split."""

    def fits(line: str) -> bool:
        return cv2.getTextSize(line, font, scale, thickness)[0][0] <= width

    lines: list[str] = []
    for word in text.split():
        for piece in _pieces(word, fits):
            if lines and fits(f"{lines[-1]} {piece}"):
                lines[-1] = f"{lines[-1]} {piece}"
            else:
                lines.append(piece)
    return lines


def stamp(canvas: np.ndarray, title: str, detail: str = "", avoid: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """Write ``title`` (e.g. ``NOT INSPECTED``) and ``detail`` (the reason) across BGR ``canvas`` in place, on a band
    across its middle, so a frame that was not inspected can never pass for a clean one. Both are wrapped at word
    boundaries to fit inside the frame's width (the font shrinks until the band fits its height). ``avoid``: a box
    ``(x1, y1, x2, y2)`` the band must leave visible (the hidden area it names): the band then goes to the top or the
    bottom edge, whichever is farther from the box. Returns ``canvas``."""
    height, width = canvas.shape[:2]
    font, scale = cv2.FONT_HERSHEY_SIMPLEX, max(0.6, min(height, width) / 400.0)
    room = max(1, width - 2 * _STAMP_MARGIN)
    while True:
        styles = ((title, scale * 1.6, max(2, round(scale * 2.5))), (detail, scale * 0.7, max(1, round(scale))))
        lines = [(text, s, th) for words, s, th in styles for text in _wrap(words, font, s, th, room)]
        sizes = [cv2.getTextSize(text, font, s, th)[0] for text, s, th in lines]
        gap = max(4, round(10 * scale))
        band = sum(h for _, h in sizes) + gap * (len(lines) + 1)
        if band <= height or scale <= 0.2:
            break
        scale *= 0.8
    top = max(0, (height - band) // 2)
    if avoid is not None:
        top = max(0, height - band) if (avoid[1] + avoid[3]) / 2 < height / 2 else 0
    cv2.rectangle(canvas, (0, top), (width - 1, min(height - 1, top + band)), STAMP_COLOR_BGR, thickness=-1)
    y = top
    for (text, s, th), (tw, h) in zip(lines, sizes):
        y += gap + h
        cv2.putText(canvas, text, (max(_STAMP_MARGIN, (width - tw) // 2), y), font, s, (255, 255, 255), th, lineType=cv2.LINE_AA)
    return canvas


def _corners(width: int, height: int, w: int, h: int) -> list[tuple[int, int, int, int]]:
    """The four corner places (top-left, top-right, bottom-left, bottom-right) of a ``w`` x ``h`` badge in the frame."""
    right, bottom = max(0, width - w), max(0, height - h)
    return [(x, y, x + w, y + h) for y in (0, bottom) for x in (0, right)]


def badge(canvas: np.ndarray, title: str, detail: str = "", avoid: Sequence[Sequence[float]] = ()) -> tuple[int, int, int, int]:
    """Write the verdict ``title`` (a key of :data:`VERDICT_COLORS_BGR`) large on a filled badge in its colour, with
    ``detail`` (one line, cut to the frame's width) below it, at the first corner of BGR ``canvas`` that overlaps no
    box of ``avoid`` (xyxy: the calls, so the stamp never hides one; the top-left when none is free). In place; returns
    the badge's ``(x1, y1, x2, y2)``."""
    height, width = canvas.shape[:2]
    font, scale = cv2.FONT_HERSHEY_SIMPLEX, _font_scale(height, width)
    lines = [(title, scale * 1.4, max(2, round(scale * 2.5)))] + ([(detail, scale * 0.8, max(1, round(scale * 1.5)))] if detail else [])
    room = max(1, width - 2 * _STAMP_MARGIN)
    lines = [(_cut(text, font, s, th, room), s, th) for text, s, th in lines]
    sizes = [cv2.getTextSize(text, font, s, th)[0] for text, s, th in lines]
    gap = max(3, round(6 * scale))
    w = min(width, max(tw for tw, _ in sizes) + 2 * _STAMP_MARGIN)
    h = min(height, sum(th for _, th in sizes) + gap * (len(lines) + 1))
    places = _corners(width, height, w, h)
    boxes = [tuple(float(v) for v in b) for b in avoid]
    free = [p for p in places if all(b[2] <= p[0] or b[0] >= p[2] or b[3] <= p[1] or b[1] >= p[3] for b in boxes)]
    x1, y1, x2, y2 = (free or places)[0]
    color = VERDICT_COLORS_BGR.get(title, STAMP_COLOR_BGR)
    cv2.rectangle(canvas, (x1, y1), (x2 - 1, y2 - 1), color, thickness=-1)
    y = y1
    for (text, s, th), (_, h_text) in zip(lines, sizes):
        y += gap + h_text
        cv2.putText(canvas, text, (x1 + _STAMP_MARGIN, y), font, s, _text_color(color), th, lineType=cv2.LINE_AA)
    return x1, y1, x2, y2


def _cut(text: str, font: int, scale: float, thickness: int, width: int) -> str:
    """``text`` cut (with "...") to at most ``width`` px in this font."""
    if cv2.getTextSize(text, font, scale, thickness)[0][0] <= width:
        return text
    while len(text) > 1 and cv2.getTextSize(text + "...", font, scale, thickness)[0][0] > width:
        text = text[:-1]
    return text + "..."


def outline(canvas: np.ndarray, box: Sequence[float], label: str, color: tuple[int, int, int] = HIDDEN_COLOR_BGR) -> None:
    """Draw ``box`` (xyxy in the canvas's pixels) as a thick frame in ``color`` with ``label`` on a tag at its top-left
    corner (inside the image), on BGR ``canvas`` in place: where a hidden area lies."""
    height, width = canvas.shape[:2]
    thickness = 2 * _line_thickness(height, width)
    x1, y1, x2, y2 = (int(round(v)) for v in box)
    x1, x2 = min(max(x1, 0), width - 1), min(max(x2, 0), width - 1)
    y1, y2 = min(max(y1, 0), height - 1), min(max(y2, 0), height - 1)
    cv2.rectangle(canvas, (x1, y1), (x2, y2), color, thickness, lineType=cv2.LINE_AA)
    font, scale = cv2.FONT_HERSHEY_SIMPLEX, _font_scale(height, width)
    (tw, th), baseline = cv2.getTextSize(label, font, scale, max(1, thickness // 4))
    ty = y1 - th - baseline - 2 if y1 - th - baseline - 2 >= 0 else min(y2 + 1, height - th - baseline - 2)
    tx = min(x1, max(width - tw - 2, 0))
    cv2.rectangle(canvas, (tx, ty), (tx + tw + 2, ty + th + baseline + 2), color, thickness=-1)
    cv2.putText(canvas, label, (tx + 1, ty + th + 1), font, scale, _text_color(color), max(1, thickness // 4), lineType=cv2.LINE_AA)


def draw_detections(
    image: np.ndarray,
    boxes: Any,
    scores: Any,
    labels: Any,
    class_names: Sequence[str],
    color: tuple[int, int, int] | None = None,
) -> np.ndarray:
    """Return a BGR uint8 copy of ``image`` with detections drawn on it (the input is not modified).

    Args:
        image: grayscale ``[H,W]`` (or ``[H,W,1]``) or BGR ``[H,W,3]`` image, uint8 (float in [0,1] also accepted).
        boxes: ``[N,4]`` xyxy boxes in the image's pixels (torch tensor, numpy array or nested list).
        scores: ``[N]`` confidences shown as "name 0.87", or ``None`` to show only the class name (e.g. ground truth).
        labels: ``[N]`` integer class indices into ``class_names`` (unknown indices are shown as numbers).
        class_names: class names, indexed by label.
        color: BGR colour of boxes and tag backgrounds; None (default): each class its own (:func:`class_color`).

    Line thickness and font scale grow with the image's smaller side so tags stay readable on both
    640x640 inputs and 2048x1536 originals.
    """
    canvas = to_bgr_uint8(image)
    draw_boxes(canvas, boxes, scores, labels, class_names, color)
    return canvas
