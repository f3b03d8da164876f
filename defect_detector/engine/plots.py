"""Training and evaluation plots, written as PNG files.

Every ``plot_*`` function renders a bare matplotlib ``Figure`` (no pyplot, so notebooks keep their
backend) and writes the PNG bytes atomically with :func:`defect_detector.core.io.atomic_write_bytes`
(parent folders are created), then returns the :class:`~pathlib.Path` written.
The prediction grid draws its boxes with :mod:`defect_detector.data.draw`. :func:`write_eval_plots` writes a validation's
three (PR curves, confusion matrix, prediction grid), for ``train`` and ``val --plots``.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np
import torch
from matplotlib.figure import Figure

from defect_detector.core.boxes import boxes_to_letterbox
from defect_detector.core.io import atomic_write_bytes
from defect_detector.data.draw import GT_COLOR_BGR, PRED_COLOR_BGR, draw_boxes, to_numpy
from defect_detector.data.letterbox import letterbox

if TYPE_CHECKING:
    from defect_detector.data.dataset import CocoDetectionDataset

DPI = 150
GRID_TILE_SIZE = 480  # side, in pixels, of each square (letterboxed) tile of the prediction grid
GRID_MAX_COLUMNS = 4
GRID_CAPTION_HEIGHT = 28
GRID_GAP = 6

LOSS_KEYS = (("train_loss", "total loss"), ("train_box", "box loss"), ("train_cls", "cls loss"))
MAP_KEYS = (("map50", "mAP@0.5"), ("map50_95", "mAP@0.5:0.95"))


# --------------------------------------------------------------------------------------------------------------------
# helpers


def _save_figure(fig: Figure, path: str | os.PathLike[str], dpi: int = DPI) -> Path:
    """Render ``fig`` (a bare ``Figure``: no pyplot state to close) to PNG in memory and write the bytes atomically to ``path``."""
    path = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buf.getvalue())
    return path


def _finite_or_none(value: Any) -> float | None:
    """Return ``value`` as a float, or ``None`` when it is missing or not finite."""
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def plot_training_curves(metrics: list[dict], path: str | os.PathLike[str]) -> Path:
    """Plot per-epoch training curves to a PNG and return its path.

    Args:
        metrics: one dict per epoch, as in ``metrics.jsonl``: ``epoch`` (int), ``train_loss``, ``train_box``,
            ``train_cls`` (floats) and optionally ``map50``, ``map50_95`` (absent or ``None`` on epochs without
            validation) and ``lr``. Entries are sorted by epoch; missing or non-finite values are skipped.
        path: destination PNG.

    Left panel: the three training losses vs epoch (with the learning rate on a secondary axis when present).
    Right panel: mAP@0.5 and mAP@0.5:0.95 vs epoch, on the epochs that have them. Both panels share the run's
    epoch axis (epochs counted from 0, as the training log and ``metrics.jsonl`` count them), so a validation every few epochs shows
    where it fell; markers keep a single epoch visible.
    """
    if not metrics:
        raise ValueError("metrics is empty: nothing to plot")
    rows = sorted(metrics, key=lambda m: m.get("epoch", 0))
    epochs = [int(m.get("epoch", i)) for i, m in enumerate(rows)]  # counted from 0, as the training log counts them

    fig = Figure(figsize=(12, 4.5))
    ax_loss, ax_map = fig.subplots(1, 2, sharex=True)
    _plot_losses(ax_loss, rows, epochs)
    _plot_map(ax_map, rows, epochs)
    ax_map.tick_params(labelbottom=True)
    ax_loss.xaxis.get_major_locator().set_params(integer=True)
    ax_loss.set_xlim(min(epochs) - 0.5, max(epochs) + 0.5)

    fig.tight_layout()
    return _save_figure(fig, path)


def _series(rows: list[dict], epochs: list[int], key: str) -> tuple[list[int], list[float]]:
    """``(epochs, values)`` of ``key`` over ``rows`` (one metrics dict per epoch), missing and non-finite values left out."""
    xs, ys = [], []
    for epoch, row in zip(epochs, rows):
        value = _finite_or_none(row.get(key))
        if value is not None:
            xs.append(epoch)
            ys.append(value)
    return xs, ys


def _plot_losses(ax_loss: Any, rows: list[dict], epochs: list[int]) -> None:
    """The training losses of :data:`LOSS_KEYS` over ``rows`` on ``ax_loss``, the learning rate on a secondary axis when
    the rows have one."""
    for key, name in LOSS_KEYS:
        xs, ys = _series(rows, epochs, key)
        if xs:
            ax_loss.plot(xs, ys, marker="o", markersize=3, label=name)
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("loss")
    ax_loss.set_title("training losses")
    ax_loss.grid(True, alpha=0.3)
    handles, names = ax_loss.get_legend_handles_labels()

    lr_x, lr_y = _series(rows, epochs, "lr")
    if lr_x:
        ax_lr = ax_loss.twinx()
        ax_lr.plot(lr_x, lr_y, color="gray", linestyle="--", linewidth=1, label="learning rate")
        ax_lr.set_ylabel("learning rate", color="gray")
        ax_lr.tick_params(axis="y", colors="gray")
        ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
        lr_handles, lr_names = ax_lr.get_legend_handles_labels()
        handles, names = handles + lr_handles, names + lr_names
    if handles:
        ax_loss.legend(handles, names, loc="upper right", fontsize=8)


def _plot_map(ax_map: Any, rows: list[dict], epochs: list[int]) -> None:
    """The validation mAP of :data:`MAP_KEYS` over ``rows`` on ``ax_map`` (a note instead when no epoch has one)."""
    plotted_map = False
    for key, name in MAP_KEYS:
        xs, ys = _series(rows, epochs, key)
        if xs:
            ax_map.plot(xs, ys, marker="o", markersize=3, label=name)
            plotted_map = True
    if plotted_map:
        ax_map.legend(loc="lower right", fontsize=8)
        ax_map.set_ylim(0.0, 1.0)
    else:
        ax_map.text(0.5, 0.5, "no validation results yet", ha="center", va="center", transform=ax_map.transAxes)
    ax_map.set_xlabel("epoch")
    ax_map.set_ylabel("mAP")
    ax_map.set_title("validation mAP")
    ax_map.grid(True, alpha=0.3)


def plot_pr_curves(precision: np.ndarray, class_names: Sequence[str], path: str | os.PathLike[str]) -> Path:
    """Plot per-class precision-recall curves at IoU 0.5 to a PNG and return its path.

    Args:
        precision: pycocotools ``COCOeval.eval["precision"][0, :, :, 0, 2]`` (IoU=0.5, all areas, maxDets=100):
            shape ``[R, K]`` with ``R`` recall thresholds (101 in COCO, recall = ``np.linspace(0, 1, R)``) and ``K``
            classes. Values are in [0, 1], or -1 where undefined; classes that are -1 everywhere (no ground truth)
            are skipped.
        class_names: the ``K`` class names.
        path: destination PNG.

    Each class's AP (mean precision over recall thresholds, ignoring -1) is shown in its legend label; the
    mean curve over the plotted classes is drawn bold, labelled with mAP@0.5.
    """
    prec = to_numpy(precision).astype(np.float64)
    if prec.ndim != 2:
        raise ValueError(f"precision must be [recall thresholds, classes], got shape {prec.shape}")
    num_recall, num_classes = prec.shape
    if num_classes != len(class_names):
        raise ValueError(f"precision has {num_classes} classes but {len(class_names)} class names were given")
    recall = np.linspace(0.0, 1.0, num_recall)
    valid = prec > -1  # COCO marks undefined precision with -1

    fig = Figure(figsize=(7, 6))
    ax = fig.subplots()
    curves = []
    for k in range(num_classes):
        if not valid[:, k].any():
            continue
        curve = np.where(valid[:, k], prec[:, k], np.nan)
        ap = float(prec[valid[:, k], k].mean())
        ax.plot(recall, curve, linewidth=1, label=f"{class_names[k]} AP={ap:.3f}")
        curves.append(curve)

    if curves:
        stack = np.stack(curves, axis=1)
        counts = np.isfinite(stack).sum(axis=1)
        sums = np.where(np.isfinite(stack), stack, 0.0).sum(axis=1)
        mean_curve = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        mean_ap = float(np.nanmean(mean_curve)) if np.isfinite(mean_curve).any() else 0.0
        ax.plot(recall, mean_curve, color="black", linewidth=3, label=f"all classes mAP@0.5={mean_ap:.3f}")
        ax.legend(loc="lower left", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no classes with ground truth", ha="center", va="center", transform=ax.transAxes)

    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.05)
    ax.set_xlabel("recall")
    ax.set_ylabel("precision")
    ax.set_title("precision-recall @ IoU 0.5")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return _save_figure(fig, path)


def plot_confusion_matrix(
    matrix: np.ndarray, class_names: Sequence[str], path: str | os.PathLike[str], conf: float | None = None, iou: float = 0.5
) -> Path:
    """Plot a detection confusion matrix to a PNG and return its path.

    Args:
        matrix: integer counts of shape ``[K+1, K+1]``. Rows are the PREDICTED class, columns the TRUE class;
            index ``K`` (the last) is "background":

            - ``matrix[p, t]`` (p, t < K): predictions of class ``p`` matched to a ground-truth box of class ``t``;
            - last row ``matrix[K, t]``: ground-truth boxes of class ``t`` that no prediction matched (false negatives);
            - last column ``matrix[p, K]``: predictions of class ``p`` that matched no ground truth (false positives);
            - ``matrix[K, K]`` has no meaning and is normally 0.
        class_names: the ``K`` class names (``"background"`` is appended).
        path: destination PNG.
        conf, iou: the score threshold of the detections counted and the IoU of a match, written in the title.

    Cells show the raw counts; colours show each cell as a fraction of its column (i.e. of that true class),
    so the diagonal reads as per-class recall. All-zero columns are drawn as 0.
    """
    counts = to_numpy(matrix)
    num_classes = len(class_names)
    if counts.shape != (num_classes + 1, num_classes + 1):
        raise ValueError(f"matrix must have shape [{num_classes + 1}, {num_classes + 1}] for {num_classes} classes, got {counts.shape}")
    counts = np.rint(counts.astype(np.float64)).astype(np.int64)
    col_sums = counts.sum(axis=0, keepdims=True)
    normalised = np.divide(counts, col_sums, out=np.zeros(counts.shape, dtype=np.float64), where=col_sums > 0)
    names = [*class_names, "background"]

    side = max(5.0, 0.7 * len(names) + 2.5)
    fig = Figure(figsize=(side + 1.0, side))
    ax = fig.subplots()
    image = ax.imshow(normalised, cmap="Blues", vmin=0.0, vmax=1.0)
    cbar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    cbar.set_label("fraction of true class (column)")

    font_size = 9 if len(names) <= 10 else 7
    for p in range(len(names)):
        for t in range(len(names)):
            text_color = "white" if normalised[p, t] > 0.5 else "black"
            ax.text(t, p, str(counts[p, t]), ha="center", va="center", color=text_color, fontsize=font_size)

    ticks = np.arange(len(names))
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.set_xticklabels(names, rotation=45, ha="right")
    ax.set_yticklabels(names)
    ax.set_xlabel("true class (background = false positive)")
    ax.set_ylabel("predicted class (background = missed ground truth)")
    ax.set_title("confusion matrix" + (f" (detections scoring >= {conf:g}, match IoU > {iou:g})" if conf is not None else ""))
    fig.tight_layout()
    return _save_figure(fig, path)


def _grid_tile(image: np.ndarray, prediction: dict, ground_truth: dict, class_names: Sequence[str]) -> np.ndarray:
    """One BGR ``GRID_TILE_SIZE`` square tile: the gray uint8 ``image`` letterboxed (``data/letterbox.py``) with boxes drawn.

    Boxes are mapped into the tile before drawing, so lines and text keep a readable size whatever the original resolution.
    """
    canvas, meta = letterbox(image, GRID_TILE_SIZE)
    tile = cv2.cvtColor(canvas, cv2.COLOR_GRAY2BGR)
    gt_boxes = boxes_to_letterbox(torch.as_tensor(to_numpy(ground_truth.get("boxes")), dtype=torch.float64).reshape(-1, 4), meta)
    pred_boxes = boxes_to_letterbox(torch.as_tensor(to_numpy(prediction.get("boxes")), dtype=torch.float64).reshape(-1, 4), meta)
    draw_boxes(tile, gt_boxes.numpy(), None, ground_truth.get("labels"), class_names, GT_COLOR_BGR, label_at_bottom=True)
    draw_boxes(tile, pred_boxes.numpy(), prediction.get("scores"), prediction.get("labels"), class_names, PRED_COLOR_BGR)
    return tile


def _short(name: str, width: int = 34) -> str:
    """A file name cut from the left to fit a caption (the end of a path tells images apart)."""
    return name if len(name) <= width else "..." + name[-(width - 3) :]


def _caption(text: str, width: int, height: int = GRID_CAPTION_HEIGHT) -> np.ndarray:
    """A white BGR strip ``height`` x ``width`` with black ``text`` at its left."""
    strip = np.full((height, width, 3), 255, dtype=np.uint8)
    cv2.putText(strip, text, (6, height - 8), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, lineType=cv2.LINE_AA)
    return strip


def _legend_strip(width: int) -> np.ndarray:
    """The grid's header: a white BGR caption strip ``width`` wide with the ground-truth and prediction colour keys."""
    header = _caption("", width)
    x = 6
    for text, color in (("ground truth", GT_COLOR_BGR), ("prediction (name score)", PRED_COLOR_BGR)):
        cv2.rectangle(header, (x, 8), (x + 24, GRID_CAPTION_HEIGHT - 8), color, thickness=-1)
        cv2.putText(header, text, (x + 30, GRID_CAPTION_HEIGHT - 8), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, lineType=cv2.LINE_AA)
        x += 30 + cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)[0][0] + 24
    return header


def plot_prediction_grid(
    images: Sequence[np.ndarray],
    predictions: Sequence[dict],
    ground_truths: Sequence[dict],
    class_names: Sequence[str],
    path: str | os.PathLike[str],
    max_images: int = 16,
    names: Sequence[str] | None = None,
) -> Path:
    """Draw up to ``max_images`` images with ground truth and predictions in a grid of up to 4 columns; write a PNG.

    Args:
        images: grayscale uint8 ``[H,W]`` images in original pixels; sizes may differ.
        predictions: per image, a dict with ``boxes`` (float ``[N,4]`` xyxy in original pixels), ``scores`` ``[N]`` and
            ``labels`` (int ``[N]``); torch tensors or numpy arrays.
        ground_truths: per image, a dict with ``boxes`` and ``labels`` in the same format.
        class_names: class names, indexed by label.
        path: destination PNG.
        max_images: the first this many images are drawn.
        names: the images' file names, written in their captions (default: their index).

    Each image is letterboxed into a ``GRID_TILE_SIZE`` square tile; ground truth is drawn in green (class name under
    the box) and predictions in red ("name score" above the box), each tile captioned with its index and box counts.
    The mosaic is built with OpenCV at its final resolution (no resampling by matplotlib) and PNG-encoded with
    ``cv2.imencode``, then written atomically.
    """
    if not (len(images) == len(predictions) == len(ground_truths)):
        raise ValueError(f"got {len(images)} images, {len(predictions)} predictions and {len(ground_truths)} ground truths")
    count = min(len(images), max_images)
    if count <= 0:
        raise ValueError("no images to plot")

    columns = min(GRID_MAX_COLUMNS, count)
    rows = math.ceil(count / columns)
    cell_h, cell_w = GRID_CAPTION_HEIGHT + GRID_TILE_SIZE, GRID_TILE_SIZE
    gap = GRID_GAP
    mosaic = np.full((rows * (cell_h + gap) + gap, columns * (cell_w + gap) + gap, 3), 255, dtype=np.uint8)
    for i in range(count):
        n_gt = len(to_numpy(ground_truths[i].get("labels")).reshape(-1))
        n_pred = len(to_numpy(predictions[i].get("labels")).reshape(-1))
        cell = np.concatenate(
            [
                _caption(f"{_short(names[i]) if names else f'#{i}'}  gt={n_gt}  pred={n_pred}", cell_w),
                _grid_tile(images[i], predictions[i], ground_truths[i], class_names),
            ],
            axis=0,
        )
        row, col = divmod(i, columns)
        y, x = gap + row * (cell_h + gap), gap + col * (cell_w + gap)
        mosaic[y : y + cell_h, x : x + cell_w] = cell

    mosaic = np.concatenate([_legend_strip(mosaic.shape[1]), mosaic], axis=0)

    ok, encoded = cv2.imencode(".png", mosaic)
    if not ok:
        raise RuntimeError("OpenCV failed to encode the prediction grid as PNG")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, encoded.tobytes())
    return path


def write_eval_plots(
    plots_dir: Path, metrics: dict, predictions: dict, val_set: CocoDetectionDataset, names: Sequence[str], conf: float
) -> None:
    """``pr_curves.png`` (from ``evaluate_predictions`` ``metrics``), and ``confusion_matrix.png`` and
    ``val_predictions.png`` (the first 8 images) of the ``predictions`` (``{image_id: {"boxes" xyxy image pixels,
    "scores", "labels"}}``) at score >= ``conf``, the threshold the weights store, in ``plots_dir``."""
    from defect_detector.data.evaluate import confusion_matrix, ground_truth, scored_predictions
    from defect_detector.data.images import load_image_gray

    cat_to_label = {c: label for label, c in val_set.label_to_cat_id.items()}
    matrix = confusion_matrix(val_set.coco, scored_predictions(predictions, val_set.label_to_cat_id), cat_to_label, len(names), conf)
    plot_pr_curves(metrics["pr_curve"], names, plots_dir / "pr_curves.png")
    plot_confusion_matrix(matrix, names, plots_dir / "confusion_matrix.png", conf)
    image_ids = sorted(predictions)[:8]
    images, preds, gts, files = [], [], [], []
    for image_id in image_ids:
        info = val_set.coco.loadImgs([image_id])[0]
        files.append(info["file_name"])
        images.append(load_image_gray(val_set.images_root / info["file_name"]))
        preds.append({k: v for k, v in predictions[image_id].items()})
        keep = preds[-1]["scores"] >= conf
        preds[-1] = {k: v[keep] for k, v in preds[-1].items()}
        gts.append(ground_truth(val_set.coco, image_id, cat_to_label))
    plot_prediction_grid(images, preds, gts, names, plots_dir / "val_predictions.png", names=files)
