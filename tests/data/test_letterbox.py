import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from defect_detector.core.boxes import boxes_from_letterbox, boxes_to_letterbox
from defect_detector.core.types import LetterboxMeta
from defect_detector.data.letterbox import letterbox

sides = st.integers(min_value=32, max_value=2048)
sizes = st.sampled_from([64, 320, 640])


def _random_boxes(h: int, w: int, seed: int, n: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    xs = np.sort(rng.uniform(0, w, size=(n, 2)), axis=1)
    ys = np.sort(rng.uniform(0, h, size=(n, 2)), axis=1)
    return np.stack([xs[:, 0], ys[:, 0], xs[:, 1], ys[:, 1]], axis=1).astype(np.float32)


@settings(max_examples=60, deadline=None)
@given(h=sides, w=sides, imgsz=sizes, seed=st.integers(0, 2**31 - 1))
def test_forward_then_inverse_is_identity(h: int, w: int, imgsz: int, seed: int) -> None:
    canvas, meta = letterbox(np.zeros((h, w), np.uint8), imgsz)
    assert canvas.shape == (imgsz, imgsz) and canvas.dtype == np.uint8
    assert (meta.orig_h, meta.orig_w) == (h, w)
    t = torch.from_numpy(_random_boxes(h, w, seed))
    mapped = boxes_to_letterbox(t, meta)
    assert mapped.dtype == torch.float32
    assert (mapped >= -1).all() and (mapped <= imgsz + 1).all()
    back = boxes_from_letterbox(mapped, meta)
    assert back.dtype == torch.float32
    torch.testing.assert_close(back, t, atol=1.0, rtol=0)


@settings(max_examples=40, deadline=None)
@given(h=sides, w=sides, imgsz=sizes)
def test_padding_is_centred_with_pad_value(h: int, w: int, imgsz: int) -> None:
    canvas, meta = letterbox(np.zeros((h, w), np.uint8), imgsz)
    content = canvas != 114
    ys, xs = np.nonzero(content)
    x0, x1, y0, y1 = xs.min(), xs.max() + 1, ys.min(), ys.max() + 1
    assert (x0, y0) == (meta.pad_x, meta.pad_y)
    assert abs(x0 - (imgsz - x1)) <= 1 and abs(y0 - (imgsz - y1)) <= 1
    assert max(x1 - x0, y1 - y0) == imgsz
    assert content[y0:y1, x0:x1].all()
    assert meta.scale == pytest.approx(min(imgsz / h, imgsz / w))


@settings(max_examples=40, deadline=None)
@given(h=st.integers(64, 1024), w=st.integers(64, 1024), imgsz=sizes, seed=st.integers(0, 2**31 - 1))
def test_mapped_box_matches_resized_pixels(h: int, w: int, imgsz: int, seed: int) -> None:
    box = _random_boxes(h, w, seed, n=1)[0].round()
    scale = min(imgsz / h, imgsz / w)
    if min(box[2] - box[0], box[3] - box[1]) * scale < 4:
        return
    image = np.zeros((h, w), np.uint8)
    x1, y1, x2, y2 = box.astype(int)
    image[y1:y2, x1:x2] = 255
    canvas, meta = letterbox(image, imgsz)
    ys, xs = np.nonzero(canvas > 127)
    extent = np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], np.float32)
    np.testing.assert_allclose(extent, boxes_to_letterbox(torch.from_numpy(box), meta).numpy(), atol=1.5)


def test_pad_value_and_non_square_output() -> None:
    canvas, meta = letterbox(np.full((100, 300), 7, np.uint8), 96, pad_value=0)
    assert meta == LetterboxMeta(scale=0.32, pad_x=0.0, pad_y=32.0, orig_h=100, orig_w=300)
    assert (canvas[:32] == 0).all() and (canvas[64:] == 0).all() and (canvas[32:64] == 7).all()


def test_inverse_clips_to_original_image() -> None:
    _, meta = letterbox(np.zeros((100, 200), np.uint8), 64)
    inside_padding = torch.tensor([[-5.0, 0.0, 70.0, 64.0]])
    out = boxes_from_letterbox(inside_padding, meta)
    assert out[0, 0] == 0 and out[0, 2] == 200 and out[0, 1] == 0 and out[0, 3] == 100
    unclipped = boxes_from_letterbox(inside_padding, meta, clip=False)
    assert unclipped[0, 0] < 0


def test_rejects_colour_image() -> None:
    with pytest.raises(ValueError, match="single-channel"):
        letterbox(np.zeros((10, 10, 3), np.uint8), 64)
