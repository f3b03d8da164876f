"""Tests for defect_detector.engine.plots: every plot writes a decodable PNG that shows the data it was given."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from defect_detector.engine import plots
from defect_detector.engine.plots import (
    plot_confusion_matrix,
    plot_pr_curves,
    plot_prediction_grid,
    plot_training_curves,
)

CLASS_NAMES = ["missing_hole", "mouse_bite", "open_circuit", "short", "spur", "spurious_copper"]


def _assert_png(path: Path, min_side: int = 200) -> np.ndarray:
    """``path`` is a non-empty PNG that OpenCV decodes to an image at least ``min_side`` pixels on each side."""
    assert path.is_file() and path.stat().st_size > 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    assert image is not None
    assert image.shape[0] >= min_side and image.shape[1] >= min_side
    assert image.std() > 0  # not a blank canvas
    leftovers = [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []  # atomic write cleaned up its temp file
    return image


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """The matplotlib figures the plot functions save, in order (each still written as a PNG)."""
    saved: list[Figure] = []
    real = plots._save_figure

    def keep(fig: Figure, path: Path, dpi: int = plots.DPI) -> Path:
        saved.append(fig)
        return real(fig, path, dpi)

    monkeypatch.setattr(plots, "_save_figure", keep)
    return saved


def _epoch(epoch: int, with_map: bool) -> dict:
    row = {"epoch": epoch, "train_loss": 3.0 / (epoch + 1), "train_box": 2.0 / (epoch + 1), "train_cls": 1.0 / (epoch + 1), "lr": 1e-3}
    if with_map:
        row["map50"] = 0.1 * epoch
        row["map50_95"] = 0.05 * epoch
    return row


# --------------------------------------------------------------------------------------------------------------------
# plot_training_curves


def test_training_curves_with_missing_map(tmp_path: Path) -> None:
    metrics = [_epoch(e, with_map=e % 2 == 1) for e in range(6)]
    metrics[2]["map50"] = None  # key present, value None
    metrics[2]["map50_95"] = None
    out = plot_training_curves(metrics, tmp_path / "sub" / "curves.png")
    assert out == tmp_path / "sub" / "curves.png"
    _assert_png(out)


def test_training_curves_single_epoch_without_validation_or_lr(tmp_path: Path) -> None:
    row = _epoch(0, with_map=False)
    del row["lr"]
    _assert_png(plot_training_curves([row], str(tmp_path / "one.png")))


def test_training_curves_empty_raises(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        plot_training_curves([], tmp_path / "empty.png")


# --------------------------------------------------------------------------------------------------------------------
# plot_pr_curves


def test_pr_curves_skips_classes_without_ground_truth(tmp_path: Path, figures: list[Figure]) -> None:
    recall = np.linspace(0, 1, 101)
    precision = np.stack([np.clip(1.0 - recall * (0.2 + 0.1 * k), 0, 1) for k in range(len(CLASS_NAMES))], axis=1)
    precision[:, 2] = -1.0  # no ground truth for this class
    precision[90:, 4] = 0.0  # recall never reached
    _assert_png(plot_pr_curves(precision, CLASS_NAMES, tmp_path / "pr.png"))
    (ax,) = figures[0].axes
    labels = [line.get_label() for line in ax.get_lines()]
    kept = [k for k in range(len(CLASS_NAMES)) if k != 2]
    expected = [f"{CLASS_NAMES[k]} AP={precision[:, k].mean():.3f}" for k in kept]
    mean_ap = precision[:, kept].mean()
    assert labels == [*expected, f"all classes mAP@0.5={mean_ap:.3f}"]  # no curve for the class without ground truth
    np.testing.assert_allclose(ax.get_lines()[-1].get_ydata(), precision[:, kept].mean(axis=1))
    assert [text.get_text() for text in ax.get_legend().get_texts()] == labels


def test_pr_curves_all_classes_missing(tmp_path: Path, figures: list[Figure]) -> None:
    precision = -np.ones((101, 3))
    _assert_png(plot_pr_curves(precision, CLASS_NAMES[:3], tmp_path / "pr_none.png"))
    (ax,) = figures[0].axes
    assert ax.get_lines() == [] and ax.get_legend() is None
    assert [text.get_text() for text in ax.texts] == ["no classes with ground truth"]


def test_pr_curves_rejects_class_count_mismatch(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        plot_pr_curves(np.zeros((101, 2)), CLASS_NAMES, tmp_path / "bad.png")


# --------------------------------------------------------------------------------------------------------------------
# plot_confusion_matrix


def test_confusion_matrix_counts(tmp_path: Path, figures: list[Figure]) -> None:
    k = len(CLASS_NAMES)
    rng = np.random.default_rng(0)
    matrix = rng.integers(0, 5, size=(k + 1, k + 1)) + np.diag(np.full(k + 1, 40))
    matrix[k, k] = 0
    _assert_png(plot_confusion_matrix(matrix, CLASS_NAMES, tmp_path / "cm.png"))
    ax = figures[0].axes[0]
    cells = {(round(text.get_position()[1]), round(text.get_position()[0])): text.get_text() for text in ax.texts}
    assert cells == {(p, t): str(matrix[p, t]) for p in range(k + 1) for t in range(k + 1)}  # every count, in its cell
    colours = ax.images[0].get_array()
    np.testing.assert_allclose(colours, matrix / matrix.sum(axis=0, keepdims=True))  # shaded by share of the true class
    assert [label.get_text() for label in ax.get_xticklabels()] == [*CLASS_NAMES, "background"]


def test_confusion_matrix_all_zeros(tmp_path: Path, figures: list[Figure]) -> None:
    k = len(CLASS_NAMES)
    out = plot_confusion_matrix(np.zeros((k + 1, k + 1), dtype=np.int64), CLASS_NAMES, tmp_path / "cm_zero.png")
    _assert_png(out)
    ax = figures[0].axes[0]
    assert [text.get_text() for text in ax.texts] == ["0"] * (k + 1) ** 2
    assert not np.asarray(ax.images[0].get_array()).any()  # empty columns drawn as 0, not NaN


def test_confusion_matrix_rejects_bad_shape(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        plot_confusion_matrix(np.zeros((3, 3), dtype=np.int64), CLASS_NAMES, tmp_path / "bad.png")


# --------------------------------------------------------------------------------------------------------------------
# plot_prediction_grid


def test_prediction_grid_mixed_sizes_and_types(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    sizes = [(640, 640), (1536, 2048), (300, 500), (800, 600), (640, 640)]
    images = [rng.integers(0, 255, size=s, dtype=np.uint8) for s in sizes]
    predictions, ground_truths = [], []
    for i, (h, w) in enumerate(sizes):
        boxes = np.array([[0.1 * w, 0.1 * h, 0.4 * w, 0.5 * h], [0.5 * w, 0.5 * h, 0.9 * w, 0.95 * h]], dtype=np.float32)
        if i % 2:
            predictions.append({"boxes": torch.from_numpy(boxes), "scores": torch.tensor([0.9, 0.3]), "labels": torch.tensor([0, 3])})
        else:
            predictions.append({"boxes": boxes, "scores": np.array([0.8, 0.6]), "labels": np.array([1, 5])})
        ground_truths.append({"boxes": boxes + 5, "labels": np.array([1, 2])})
    predictions[2] = {"boxes": torch.zeros((0, 4)), "scores": torch.zeros(0), "labels": torch.zeros(0, dtype=torch.int64)}

    out = plot_prediction_grid(images, predictions, ground_truths, CLASS_NAMES, tmp_path / "grid.png")
    grid = _assert_png(out, min_side=400)
    assert grid.shape[1] > grid.shape[0]  # 4 columns x 2 rows


def test_prediction_grid_respects_max_images(tmp_path: Path) -> None:
    images = [np.full((200, 200), 50 * i, dtype=np.uint8) for i in range(5)]
    preds = [{"boxes": np.array([[10, 10, 100, 100]]), "scores": np.array([0.5]), "labels": np.array([0])}] * 5
    gts = [{"boxes": np.array([[20, 20, 120, 120]]), "labels": np.array([0])}] * 5
    one = _assert_png(plot_prediction_grid(images, preds, gts, CLASS_NAMES, tmp_path / "one.png", max_images=1))
    four = _assert_png(plot_prediction_grid(images, preds, gts, CLASS_NAMES, tmp_path / "four.png", max_images=4))
    assert four.shape[1] > 2 * one.shape[1]


def test_prediction_grid_rejects_mismatched_lengths(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        plot_prediction_grid([np.zeros((10, 10), np.uint8)], [], [], CLASS_NAMES, tmp_path / "bad.png")
