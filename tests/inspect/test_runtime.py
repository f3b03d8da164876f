"""Runtime: loading artifacts and checkpoints, frame validation, and boxes mapped to original pixels."""

from __future__ import annotations

import logging
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from pipeline_helpers import detect, plan, preprocess
from small_checkpoint import SPREAD, assert_apart, write_small_checkpoint
from torch import nn

from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.data.letterbox import letterbox
from defect_detector.data.synth import generate_board, generate_board_pair
from defect_detector.data.tiles import crop_tiles, merge_tile_detections, pool_tile_stats
from defect_detector.export import ExportError, build_meta, export_torchscript, shifted_copy
from defect_detector.export.onednn import onednn_available
from defect_detector.inspect import pipeline as pipeline_module
from defect_detector.inspect.runtime import Runtime, archive_meta
from defect_detector.model.checkpoint import is_torchscript_archive, load_checkpoint
from defect_detector.model.postprocess import postprocess
from defect_detector.model.tta import merge_predictions, orient_images, orientations

pytestmark = pytest.mark.usefixtures("one_thread")

IMGSZ = 128


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_checkpoint(tmp_path_factory.mktemp("ckpt") / "small.pt", IMGSZ)


def _exported_runtime(checkpoint: Path, folder: Path) -> Runtime:
    """``checkpoint`` exported to TorchScript in ``folder`` (no optimisation pass) and loaded on the CPU."""
    out = folder / f"{checkpoint.stem}.torchscript.pt"
    export_torchscript(load_checkpoint(checkpoint), out, optimize=False)
    return Runtime.load(out, device="cpu")


@pytest.fixture(scope="module")
def runtime(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Runtime:
    return _exported_runtime(checkpoint, tmp_path_factory.mktemp("export"))


@pytest.fixture(scope="module")
def reference_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_checkpoint(tmp_path_factory.mktemp("ref_ckpt") / "ref.pt", IMGSZ, in_channels=2)


@pytest.fixture(scope="module")
def reference_runtime(reference_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Runtime:
    return _exported_runtime(reference_checkpoint, tmp_path_factory.mktemp("ref_export"))


@pytest.fixture(scope="module")
def board_pair() -> tuple[np.ndarray, np.ndarray]:
    """A non-square 600x800 (H x W) board and its template, moved by 2 px as a registered reference would be."""
    image, template = generate_board_pair(600, 800, np.random.default_rng(4))[:2]
    return image, shifted_copy(template, 2, 1)


@pytest.fixture(scope="module")
def board() -> np.ndarray:
    return generate_board(1536, 2048, np.random.default_rng(3))[0]


class FixedBoxModel(nn.Module):
    """Predicts one box, ``box`` (letterboxed xyxy), with score 0.9 for class 2; every other anchor scores 0."""

    def __init__(self, box: tuple[float, float, float, float], anchors: int = 100, classes: int = 6) -> None:
        super().__init__()
        self.box = torch.tensor(box)
        self.anchors, self.classes = anchors, classes

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pred = torch.zeros(x.shape[0], self.anchors, 4 + self.classes)
        pred[:, 7, :4] = self.box
        pred[:, 7, 4 + 2] = 0.9
        return pred, torch.zeros(x.shape[0], 0, 2)


def test_loads_artifact_and_checkpoint_alike(board: np.ndarray, tmp_path: Path) -> None:
    checkpoint = write_small_checkpoint(tmp_path / "spread.pt", IMGSZ, -3.0, spread=SPREAD)  # 14 calls, compared in order
    runtime = _exported_runtime(checkpoint, tmp_path)
    assert runtime.kind == "torchscript" and runtime.imgsz == IMGSZ and runtime.class_names == DEEPPCB_CLASSES
    assert runtime.device.type == "cpu" and runtime.dtype == torch.float32
    eager = Runtime.load(checkpoint, device="cpu")
    assert eager.kind == "checkpoint" and eager.layer_names == runtime.layer_names
    a, b = detect(runtime, [board])[0], detect(eager, [board])[0]
    assert len(a) > 0 and len(a) == len(b)
    assert_apart(b.scores)
    assert a.labels.tolist() == b.labels.tolist()
    torch.testing.assert_close(a.boxes, b.boxes, atol=1e-2, rtol=0)
    assert a.names == b.names
    torch.testing.assert_close(a.stats, b.stats, atol=1e-4, rtol=0)


def test_checkpoint_is_traced_on_the_cpu_unless_asked_not_to(
    checkpoint: Path, board: np.ndarray, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    traced = Runtime.load(checkpoint, device="cpu")
    eager = Runtime.load(checkpoint, device="cpu", trace=False)
    assert isinstance(traced.model, torch.jit.ScriptModule) and not isinstance(eager.model, torch.jit.ScriptModule)
    batch, _ = preprocess(eager, [board])
    for got, want in zip(traced.infer(batch), eager.infer(batch)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)

    def fail(*args: object, **kwargs: object) -> None:
        raise ExportError("traced model differs from eager")

    monkeypatch.setattr("defect_detector.inspect.runtime.trace_deploy_model", fail)
    with caplog.at_level(logging.WARNING, logger="defect_detector"):
        fallback = Runtime.load(checkpoint, device="cpu")
    assert not isinstance(fallback.model, torch.jit.ScriptModule) and len(detect(fallback, [board])[0]) > 0
    assert any("tracing failed" in r.getMessage() for r in caplog.records)


def test_predict_matches_postprocess_in_original_pixels(runtime: Runtime, board: np.ndarray) -> None:
    result = detect(runtime, [board], conf=0.25, iou=0.5, max_det=100)[0]
    batch, metas = preprocess(runtime, [board])
    assert batch.shape == (1, 1, IMGSZ, IMGSZ) and batch.dtype == torch.float32 and float(batch.max()) <= 1.0
    assert (metas[0].orig_h, metas[0].orig_w) == (1536, 2048)
    pred, stats = runtime.infer(batch)
    expected = postprocess(pred, metas, 0.25, 0.5, 100)[0]
    torch.testing.assert_close(result.boxes, expected["boxes"])
    torch.testing.assert_close(result.scores, expected["scores"])
    assert result.labels.tolist() == expected["labels"].tolist()
    assert result.names == [DEEPPCB_CLASSES[i] for i in expected["labels"].tolist()]
    assert result.stats.shape == (len(runtime.layer_names), 2)
    torch.testing.assert_close(result.stats, stats[0])
    boxes = result.boxes
    assert len(boxes) > 0
    assert float(boxes[:, 0::2].min()) >= 0 and float(boxes[:, 0::2].max()) <= 2048
    assert float(boxes[:, 1::2].min()) >= 0 and float(boxes[:, 1::2].max()) <= 1536
    assert set(result.timings) == {"preprocess", "model", "postprocess"}


def test_known_box_maps_to_original_pixels() -> None:
    # 2048x1536 into 640: scale 0.3125, the image spans y 80..560 of the canvas (pad_y 80, pad_x 0).
    meta = build_meta(DEEPPCB_CLASSES, 640, (8, 16, 32), ())
    runtime = Runtime(FixedBoxModel((150.0, 120.0, 250.0, 220.0)), meta, torch.device("cpu"), torch.float32, "test", Path("fixed"))
    frame = np.zeros((1536, 2048), np.uint8)
    result = detect(runtime, [frame, frame[:, :1024]])
    np.testing.assert_allclose(result[0].boxes.numpy(), [[480.0, 128.0, 800.0, 448.0]], atol=1e-3)
    assert result[0].names == ["mousebite"] and result[0].scores.tolist() == pytest.approx([0.9])
    # 1024x1536 into 640: scale 0.41667, pad_x = (640 - 427) // 2 = 106, pad_y 0.
    scale, pad_x = 640 / 1536, (640 - round(1024 * 640 / 1536)) // 2
    want = [(150 - pad_x) / scale, 120 / scale, (250 - pad_x) / scale, 220 / scale]
    np.testing.assert_allclose(result[1].boxes.numpy(), [want], atol=1e-2)


def test_colour_and_16bit_frames_are_converted(runtime: Runtime, board: np.ndarray) -> None:
    gray = detect(runtime, [board])[0]
    bgr = cv2.cvtColor(board, cv2.COLOR_GRAY2BGR)
    bgra = cv2.cvtColor(board, cv2.COLOR_GRAY2BGRA)
    wide = board.astype(np.uint16) * 257
    for frame in (bgr, bgra, board[:, :, None], wide):
        other = detect(runtime, [frame])[0]
        assert other.labels.tolist() == gray.labels.tolist()
        torch.testing.assert_close(other.boxes, gray.boxes, atol=1e-3, rtol=0)


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (np.zeros((4, 8, 8, 1), np.uint8), "shape"),
        (np.zeros((8, 8), np.float32), "dtype"),
        (np.zeros((8, 8), np.int16), "dtype"),
        (np.zeros((8, 8, 2), np.uint8), "channels"),
        (np.zeros((8, 8, 5), np.uint8), "channels"),
        (np.zeros((0, 8), np.uint8), "empty"),
        ([[0, 1], [2, 3]], "numpy array"),
    ],
)
def test_bad_frames_are_rejected(runtime: Runtime, frame: object, message: str) -> None:
    good = np.zeros((32, 32), np.uint8)
    with pytest.raises(ValueError, match=message) as info:
        preprocess(runtime, [good, frame])
    assert "frame 1" in str(info.value)


def test_load_errors(runtime: Runtime, checkpoint: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Runtime.load(tmp_path / "missing.pt")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a model")
    with pytest.raises(ValueError):
        Runtime.load(junk)
    assert is_torchscript_archive(runtime.path) and not is_torchscript_archive(checkpoint) and not is_torchscript_archive(junk)
    with pytest.raises(ValueError, match="exported TorchScript model, not a training checkpoint"):
        load_checkpoint(runtime.path)
    with pytest.raises(ValueError, match="--half"):
        Runtime.load(runtime.path, device="cpu", half=True)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            Runtime.load(runtime.path, device="cuda")
    with pytest.raises(ValueError, match="conf"):
        detect(runtime, [np.zeros((32, 32), np.uint8)], conf=1.5)


@pytest.mark.skipif(not onednn_available(), reason="no oneDNN conv+SiLU kernel: artifacts are portable")
def test_cpu_only_artifact_stays_on_the_cpu(runtime: Runtime, checkpoint: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert runtime.meta["cpu_only"] is True and archive_meta(runtime.path) == runtime.meta
    assert archive_meta(checkpoint) == {} and Runtime.load(checkpoint, device="cpu").meta["cpu_only"] is True
    with pytest.raises(ValueError, match="--portable"):  # an explicit CUDA request is refused before anything loads
        Runtime._load_artifact(runtime.path, "torchscript", torch.device("cuda"), "auto", explicit_device=True)
    with caplog.at_level(logging.WARNING, logger="defect_detector"):
        auto = Runtime._load_artifact(runtime.path, "torchscript", torch.device("cuda"), "auto", explicit_device=False)
    assert auto.device.type == "cpu" and any("running on the CPU" in r.getMessage() for r in caplog.records)


def test_threads_and_warmup(checkpoint: Path) -> None:
    before = torch.get_num_threads()
    try:
        rt = Runtime.load(checkpoint, device="cpu", threads=1)
        assert torch.get_num_threads() == 1
        rt.warmup(iterations=1)
    finally:
        torch.set_num_threads(before)


def test_tta_merges_orientations_and_keeps_the_frames_statistics(runtime: Runtime, board: np.ndarray) -> None:
    batch, _ = preprocess(runtime, [board, board[::-1].copy()])
    assert runtime.tta == "none"
    pred, stats = runtime.infer(batch)
    runtime.set_tta("flip4")
    try:
        tta_pred, tta_stats = runtime.infer(batch)
        modes = orientations("flip4")
        runtime.set_tta("none")
        each_pred, _ = runtime.infer(orient_images(batch, modes))  # [4 * 2, A, 4 + C]
    finally:
        runtime.set_tta("none")
    assert tta_pred.shape == pred.shape and tta_stats.shape == stats.shape
    torch.testing.assert_close(tta_stats, stats)  # drift statistics: the frames as given, not the mirrored copies
    torch.testing.assert_close(tta_pred, merge_predictions(each_pred, modes, runtime.meta["strides"], runtime.imgsz))
    assert not torch.allclose(tta_pred, pred, atol=1e-3)


def test_tta_in_one_batch_as_on_cuda_matches_one_call_per_orientation(
    runtime: Runtime, board: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch, _ = preprocess(runtime, [board])
    runtime.set_tta("d8")
    try:
        looped = runtime.infer(batch)  # the CPU path: one model call per orientation
        monkeypatch.setattr(runtime, "device", torch.device("cuda"))  # only selects the one-batch path
        batched = runtime.infer(batch)
    finally:
        runtime.set_tta("none")
    for got, want in zip(batched, looped):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_tta_default_is_one_pass_whatever_the_model_says(checkpoint: Path, tmp_path: Path) -> None:
    ckpt = torch.load(checkpoint, weights_only=True)
    ckpt["config"]["eval"]["tta"] = "flip2"
    flip2 = tmp_path / "flip2.pt"
    torch.save(ckpt, flip2)
    assert Runtime.load(flip2, device="cpu", trace=False).tta == "none"
    assert Runtime.load(flip2, device="cpu", trace=False, tta="d8").tta == "d8"
    out = tmp_path / "flip2.torchscript.pt"
    export_torchscript(load_checkpoint(flip2), out, optimize=False)
    assert archive_meta(out)["tta"] == "none" and Runtime.load(out, device="cpu").tta == "none"  # eval.tta is retired on load
    assert Runtime.load(out, device="cpu", tta="flip2").tta == "flip2"
    with pytest.raises(ValueError, match="unknown TTA mode 'x'"):
        Runtime.load(out, device="cpu", tta="x")


class RecordingBoxModel(FixedBoxModel):
    """:class:`FixedBoxModel` that keeps its last input."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.seen = x.clone()
        return super().forward(x)


def test_reference_runtime_reads_channels(reference_runtime: Runtime, reference_checkpoint: Path, runtime: Runtime) -> None:
    assert reference_runtime.channels == 2 and reference_runtime.meta["reference"] is True and runtime.channels == 1
    assert Runtime.load(reference_checkpoint, device="cpu", trace=False).channels == 2  # eager: from the model
    old_meta = {k: v for k, v in build_meta(DEEPPCB_CLASSES, 640, (8, 16, 32), ()).items() if k not in ("channels", "reference")}
    assert Runtime(FixedBoxModel((0, 0, 1, 1)), old_meta, torch.device("cpu"), torch.float32, "test", Path("old")).channels == 1
    reference_runtime.warmup(iterations=1, batch=2)  # a 1-channel warm-up input would not fit this model


def test_predict_with_references_in_original_pixels(reference_runtime: Runtime, board_pair: tuple[np.ndarray, np.ndarray]) -> None:
    image, reference = board_pair
    results = detect(reference_runtime, [image], conf=0.25, references=[reference])
    batch, metas = preprocess(reference_runtime, [image], [reference])
    assert batch.shape == (1, 2, IMGSZ, IMGSZ) and batch.dtype == torch.float32
    assert (metas[0].orig_h, metas[0].orig_w) == (600, 800) and metas[0].pad_y > 0  # non-square: padded rows
    for channel, source in enumerate((image, reference)):  # both letterboxed with the frame's geometry
        np.testing.assert_array_equal((batch[0, channel] * 255).round().byte().numpy(), letterbox(source, IMGSZ)[0])
    pred, _ = reference_runtime.infer(batch)
    expected = postprocess(pred, metas, 0.25, 0.5, 100)[0]
    boxes = results[0].boxes
    assert len(boxes) > 0
    torch.testing.assert_close(boxes, expected["boxes"])
    assert float(boxes[:, 0::2].max()) <= 800 and float(boxes[:, 1::2].max()) <= 600 and float(boxes.min()) >= 0
    assert float(boxes[:, 0::2].max()) > IMGSZ or float(boxes[:, 1::2].max()) > IMGSZ  # not letterboxed pixels
    blank = np.full_like(reference, 114)  # the reference must reach the model:
    other_pred, other_stats = reference_runtime.infer(preprocess(reference_runtime, [image], [blank])[0])
    assert float((other_pred - pred).abs().max()) > 1e-4 and not torch.allclose(other_stats, results[0].stats[None], atol=1e-3)


def test_known_box_with_a_reference_maps_to_original_pixels() -> None:
    meta = build_meta(DEEPPCB_CLASSES, 640, (8, 16, 32), (), channels=2)
    model = RecordingBoxModel((150.0, 120.0, 250.0, 220.0))
    runtime = Runtime(model, meta, torch.device("cpu"), torch.float32, "test", Path("fixed"))
    frame = np.zeros((1536, 2048), np.uint8)
    reference = np.full((1536, 2048, 3), 255, np.uint8)  # BGR: converted to gray like a frame
    result = detect(runtime, [frame], references=[reference])
    np.testing.assert_allclose(result[0].boxes.numpy(), [[480.0, 128.0, 800.0, 448.0]], atol=1e-3)
    assert model.seen.shape == (1, 2, 640, 640)
    assert float(model.seen[0, 0, 320, 320]) == 0.0 and float(model.seen[0, 1, 320, 320]) == 1.0
    assert float(model.seen[0, 1, 10, 320]) == pytest.approx(114 / 255)  # padding rows (pad_y 80) as in channel 0


def test_reference_errors_name_the_frame(reference_runtime: Runtime, runtime: Runtime, board_pair: tuple[np.ndarray, np.ndarray]) -> None:
    image, reference = board_pair
    with pytest.raises(ValueError, match="frame 0: no golden image"):
        detect(reference_runtime, [image])
    with pytest.raises(ValueError, match="frame 1: no golden image"):
        detect(reference_runtime, [image, image], references=[reference, None])
    with pytest.raises(ValueError, match="2 references for 1 frames"):
        detect(reference_runtime, [image], references=[reference, reference])
    with pytest.raises(ValueError, match=r"frame 1: the golden image must be gray uint8 of the frame's size 800x600"):
        preprocess(reference_runtime, [image, image], [reference, reference[:-1]])
    with pytest.raises(ValueError, match="reference of frame 0: expected dtype"):
        preprocess(reference_runtime, [image], [reference.astype(np.float32)])
    with pytest.raises(ValueError, match="frame 0: a golden image was given, but this model takes 1 input channel"):
        detect(runtime, [image], references=[reference])
    assert len(detect(runtime, [image], references=[None])) == 1  # no reference at all is fine for a 1-channel model


def test_tta_orients_the_reference_with_its_frame(reference_runtime: Runtime, board_pair: tuple[np.ndarray, np.ndarray]) -> None:
    image, reference = board_pair
    batch, _ = preprocess(reference_runtime, [image], [reference])
    modes = orientations("d8")
    oriented = orient_images(batch, modes)  # [8, 2, S, S]
    for channel in (0, 1):
        torch.testing.assert_close(oriented[:, channel : channel + 1], orient_images(batch[:, channel : channel + 1], modes))
    reference_runtime.set_tta("flip2")
    try:
        tta_pred, _ = reference_runtime.infer(batch)
        reference_runtime.set_tta("none")
        each, _ = reference_runtime.infer(orient_images(batch, orientations("flip2")))
    finally:
        reference_runtime.set_tta("none")
    torch.testing.assert_close(tta_pred, merge_predictions(each, orientations("flip2"), reference_runtime.meta["strides"], IMGSZ))


class SpotModel(nn.Module):
    """A stand-in detector that sees only what its input shows: one box (class 1, ``short``, score 0.9) around the
    pixels of channel 0 brighter than 0.9, in input pixels; one monitored "layer", channel 0 itself (mean and
    population std). Records the batch size and input of every call."""

    def __init__(self, anchors: int = 100, classes: int = 6) -> None:
        super().__init__()
        self.anchors, self.classes = anchors, classes
        self.calls: list[int] = []
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls.append(x.shape[0])
        self.seen.append(x.clone())
        pred = torch.zeros(x.shape[0], self.anchors, 4 + self.classes)
        for b in range(x.shape[0]):
            ys, xs = (x[b, 0] > 0.9).nonzero(as_tuple=True)
            if len(xs):
                pred[b, 7, :4] = torch.stack((xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)).float()
                pred[b, 7, 4 + 1] = 0.9
        flat = x[:, 0].flatten(1).float()
        return pred, torch.stack((flat.mean(1), flat.std(1, unbiased=False)), dim=-1)[:, None]  # [B, 1, 2]


def _spot_runtime(pixel_scale: float | None = 1.0, channels: int = 1) -> Runtime:
    meta = build_meta(DEEPPCB_CLASSES, 640, (8, 16, 32), ("input",), channels=channels)
    meta["pixel_scale"] = pixel_scale
    return Runtime(SpotModel(), meta, torch.device("cpu"), torch.float32, "test", Path("spot"))


def _frame_with_spot(x1: int, y1: int, x2: int, y2: int) -> np.ndarray:
    frame = np.full((1536, 2048), 40, np.uint8)
    frame[y1:y2, x1:x2] = 255
    return frame


def test_tile_plan_auto_threshold_and_sizes() -> None:
    native = _spot_runtime(1.0)
    record = plan(native, 1536, 2048)
    assert record is not None and (record.tile, record.overlap, len(record)) == (640, 96, 12)
    assert plan(native, 640, 640) is None and plan(native, 600, 800) is None  # letterbox scale 1.0 and 0.8
    assert plan(native, 900, 900) is not None  # 0.71 < 1.0 / 1.25
    assert plan(native, 1536, 2048, tile=False) is None and len(plan(native, 640, 640, tile=True)) == 1
    unknown = _spot_runtime(None)
    assert plan(unknown, 1536, 2048) is None  # no recorded training scale: letterbox
    forced = plan(unknown, 1536, 2048, tile=True)
    assert (forced.tile, forced.overlap) == (640, 96)
    half = _spot_runtime(0.5)  # trained on images shrunk 2x: tiles of 1280 px
    assert plan(half, 1280, 1280) is None
    assert (plan(half, 1536, 2048).tile, plan(half, 1536, 2048).overlap) == (1280, 192)


def test_tiled_frame_reports_a_cut_defect_once_in_frame_pixels() -> None:
    # Tiles at x 0, 469, 939, 1408 and y 0, 448, 896: the spot at x 1080..1140, y 620..660 is cut by the right edge
    # of tile column 1 (1109) and the bottom edge of tile row 0 (640); only tile (939, 448) holds it whole.
    runtime = _spot_runtime(1.0)
    frame = _frame_with_spot(1080, 620, 1140, 660)
    tiled = detect(runtime, [frame])[0]  # auto: 2048x1536 letterboxed would shrink 3.2x
    assert tiled.boxes.tolist() == [[1080.0, 620.0, 1140.0, 660.0]] and tiled.names == ["short"]
    assert tiled.tiles is not None and len(tiled.tiles) == 12 and runtime.model.calls == [2] * 6  # MAX_BATCH_CPU
    assert (tiled.letterbox.scale, tiled.letterbox.orig_w, tiled.letterbox.orig_h) == (1.0, 640, 640)
    crops = np.stack(crop_tiles(frame, tiled.tiles)).astype(np.float64) / 255.0  # the pixels all tiles hold
    torch.testing.assert_close(tiled.stats, torch.tensor([[crops.mean(), crops.std()]], dtype=torch.float32))
    whole = detect(runtime, [frame], tile=False)[0]  # 3.2x smaller: the box is only found to within a few pixels
    assert whole.tiles is None and whole.letterbox.scale == pytest.approx(0.3125)
    np.testing.assert_allclose(whole.boxes.numpy(), [[1080.0, 620.0, 1140.0, 660.0]], atol=4.0)
    assert set(tiled.timings) == {"preprocess", "model", "postprocess"}


def test_all_tiles_of_all_frames_run_in_one_batch_or_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = _spot_runtime(1.0)
    frames = [_frame_with_spot(100, 100, 150, 130), np.full((640, 640), 40, np.uint8), _frame_with_spot(1500, 1400, 1560, 1500)]
    monkeypatch.setattr(pipeline_module, "MAX_BATCH_CPU", 32)
    results = detect(runtime, frames)
    assert runtime.model.calls == [12 + 1 + 12]
    assert [r.tiles is None for r in results] == [False, True, False] and [len(r) for r in results] == [1, 0, 1]
    assert results[2].boxes.tolist() == [[1500.0, 1400.0, 1560.0, 1500.0]] and results[0].batch_size == 3
    monkeypatch.setattr(pipeline_module, "MAX_BATCH_CPU", 10)
    runtime.model.calls.clear()
    chunked = detect(runtime, frames)
    assert runtime.model.calls == [10, 10, 5]
    for a, b in zip(results, chunked):
        assert torch.equal(a.boxes, b.boxes) and torch.equal(a.stats, b.stats)


def test_tiles_of_a_reference_are_cut_with_their_frame() -> None:
    runtime = _spot_runtime(1.0, channels=2)
    frame = _frame_with_spot(1080, 620, 1140, 660)
    reference = (np.arange(1536 * 2048, dtype=np.int64).reshape(1536, 2048) % 251).astype(np.uint8)
    result = detect(runtime, [frame], references=[reference])[0]
    assert result.boxes.tolist() == [[1080.0, 620.0, 1140.0, 660.0]]
    seen = torch.cat(runtime.model.seen)  # [12, 2, 640, 640], in chunks
    for channel, image in enumerate((frame, reference)):
        want = np.stack(crop_tiles(image, result.tiles))
        np.testing.assert_array_equal((seen[:, channel] * 255).round().byte().numpy(), want)


def test_tiled_predict_with_a_real_model(runtime: Runtime, board: np.ndarray) -> None:
    frame = board[:256, :300]  # imgsz 128: tiles of 128 px overlapping by >= 64 (96 capped at half a tile): 4 x 3
    result = detect(runtime, [frame], conf=0.1, tile=True)[0]
    record = result.tiles
    assert (
        record is not None
        and (record.tile, record.overlap, len(record)) == (IMGSZ, 64, 12)
        and result.stats.shape == (len(runtime.layer_names), 2)
    )
    batch = torch.from_numpy(np.stack(crop_tiles(frame, record))[:, None]).float() / 255.0
    pred, stats = runtime.infer(batch)
    per_tile = postprocess(pred, [result.letterbox] * len(record), 0.1, 0.5, 100)
    merged = merge_tile_detections(per_tile, record, 0.5, 100 * len(record), margin=4.0)  # max_det per tile, x12 per frame
    assert len(result) > 0
    torch.testing.assert_close(result.boxes, merged["boxes"])
    torch.testing.assert_close(result.stats, pool_tile_stats(stats))


def test_checkpoint_records_its_pixel_scale(checkpoint: Path, tmp_path: Path) -> None:
    assert Runtime.load(checkpoint, device="cpu", trace=False).pixel_scale is None
    ckpt = torch.load(checkpoint, weights_only=True)
    ckpt["config"]["data"]["pixel_scale"] = 0.5
    torch.save(ckpt, tmp_path / "half.pt")
    half = Runtime.load(tmp_path / "half.pt", device="cpu", trace=False)
    assert half.meta["pixel_scale"] == 0.5 and half.pixel_scale == 0.5
    assert plan(half, 1536, 2048).tile == 2 * IMGSZ
