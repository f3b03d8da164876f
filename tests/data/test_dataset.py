import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.core.errors import DatasetError
from defect_detector.core.types import LetterboxMeta
from defect_detector.data.collate import collate
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.data.images import load_image_gray

H, W = 48, 64


def _image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(H, W), dtype=np.uint8)


def _make_set(root: Path, n: int = 3) -> dict[str, Any]:
    """``n`` PNGs in root/images with two boxes each; returns the COCO dict (not yet written)."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    images, anns = [], []
    for i in range(n):
        cv2.imwrite(str(root / "images" / f"img_{i}.png"), _image(i))
        images.append({"id": 10 + i, "file_name": f"img_{i}.png", "width": W, "height": H})
        for k, bbox in enumerate(([4, 5, 20, 10], [30, 20, 10, 25])):
            anns.append(
                {"id": 100 + 2 * i + k, "image_id": 10 + i, "category_id": k + 1, "bbox": bbox, "area": bbox[2] * bbox[3], "iscrowd": 0}
            )
    categories = [{"id": i + 1, "name": name} for i, name in enumerate(DEEPPCB_CLASSES)]
    return {"info": {"images_root": "images"}, "images": images, "annotations": anns, "categories": categories}


def _write(root: Path, coco: dict[str, Any]) -> Path:
    path = root / "ann.json"
    path.write_text(json.dumps(coco))
    return path


def _dataset(path: Path, on_bad: str = "skip", imgsz: int = 64) -> CocoDetectionDataset:
    return CocoDetectionDataset(path, None, DEEPPCB_CLASSES, imgsz, on_bad=on_bad)


def test_sample_format_and_letterbox_frame(tmp_path: Path) -> None:
    ds = _dataset(_write(tmp_path, _make_set(tmp_path)))
    assert len(ds) == 3 and ds.image_ids == [10, 11, 12]
    assert ds.label_to_cat_id == {i: i + 1 for i in range(6)}
    image, target = ds[1]
    assert image.shape == (1, 64, 64) and image.dtype == torch.float32
    assert 0.0 <= image.min() and image.max() <= 1.0
    expected = torch.from_numpy(_image(1)).float() / 255
    torch.testing.assert_close(image[0, 8:56], expected)
    assert torch.allclose(image[0, :8], torch.tensor(114 / 255))
    assert target["image_id"] == 11
    assert target["letterbox"] == LetterboxMeta(scale=1.0, pad_x=0.0, pad_y=8.0, orig_h=H, orig_w=W)
    assert target["boxes"].dtype == torch.float32 and target["labels"].dtype == torch.int64
    torch.testing.assert_close(target["boxes"], torch.tensor([[4.0, 13.0, 24.0, 23.0], [30.0, 28.0, 40.0, 53.0]]))
    assert target["labels"].tolist() == [0, 1]
    assert ds.skipped == {} and "nothing skipped" in ds.report()


def test_image_without_boxes_and_scaled_letterbox(tmp_path: Path) -> None:
    coco = _make_set(tmp_path)
    coco["annotations"] = [a for a in coco["annotations"] if a["image_id"] != 10]
    ds = _dataset(_write(tmp_path, coco), imgsz=128)
    image, target = ds[0]
    assert image.shape == (1, 128, 128)
    assert target["boxes"].shape == (0, 4) and target["labels"].shape == (0,)
    _, target = ds[1]
    torch.testing.assert_close(target["boxes"][0], torch.tensor([8.0, 10.0 + 16.0, 48.0, 30.0 + 16.0]))


def test_images_root_argument_and_json_folder_default(tmp_path: Path) -> None:
    coco = _make_set(tmp_path)
    del coco["info"]
    path = _write(tmp_path, coco)
    with pytest.raises(DatasetError, match="missing image file"):
        _dataset(path, on_bad="error")
    ds = CocoDetectionDataset(path, tmp_path / "images", DEEPPCB_CLASSES, 64, on_bad="error")
    assert len(ds) == 3


def test_coco_index_holds_the_validated_annotations(tmp_path: Path) -> None:
    coco = _make_set(tmp_path)
    coco["annotations"][0]["bbox"] = [-0.5, 5, 20, 10]  # within the 1 px slop: clipped
    coco["annotations"][1]["bbox"] = [30, 20, 0, 25]  # degenerate: dropped
    ds = _dataset(_write(tmp_path, coco))
    assert ds.coco.anns[100]["bbox"] == [0.0, 5.0, 19.5, 10.0]
    assert 101 not in ds.coco.anns
    assert sorted(ds.coco.getImgIds()) == [10, 11, 12]


Mutation = Callable[[Path, dict[str, Any]], None]


def _missing_image(root: Path, coco: dict[str, Any]) -> None:
    (root / "images" / "img_1.png").unlink()


def _zero_byte(root: Path, coco: dict[str, Any]) -> None:
    (root / "images" / "img_1.png").write_bytes(b"")


def _box_outside(root: Path, coco: dict[str, Any]) -> None:
    coco["annotations"][2]["bbox"] = [50, 10, 30, 10]


def _x2_not_after_x1(root: Path, coco: dict[str, Any]) -> None:
    coco["annotations"][2]["bbox"] = [20, 10, -5, 10]


def _unknown_category_id(root: Path, coco: dict[str, Any]) -> None:
    coco["annotations"][2]["category_id"] = 99


def _category_not_in_class_names(root: Path, coco: dict[str, Any]) -> None:
    coco["categories"].append({"id": 7, "name": "scratch"})
    coco["annotations"][2]["category_id"] = 7


def _missing_image_id(root: Path, coco: dict[str, Any]) -> None:
    coco["annotations"][2]["image_id"] = 999


def _malformed_annotation(root: Path, coco: dict[str, Any]) -> None:
    coco["annotations"][2]["bbox"] = [1, 2, 3]


def _duplicate_annotation_id(root: Path, coco: dict[str, Any]) -> None:
    coco["annotations"][3]["id"] = 102  # annotation 2's id: the box used to count (and pycocotools to index) twice


BAD_INPUTS: list[tuple[Mutation, str, str, int]] = [
    # mutation, skip reason, text the error names, images left
    (_missing_image, "missing image file", "img_1.png", 2),
    (_zero_byte, "zero-byte image file", "img_1.png", 2),
    (_box_outside, "box outside image", "annotation id 102", 3),
    (_x2_not_after_x1, "degenerate box", "annotation id 102", 3),
    (_unknown_category_id, "unknown category", "annotation id 102", 3),
    (_category_not_in_class_names, "unknown category", "'scratch'", 3),
    (_missing_image_id, "annotation references a missing image id", "annotation id 102", 3),
    (_malformed_annotation, "malformed annotation", "'id': 102", 3),
    (_duplicate_annotation_id, "duplicate annotation id", "annotation id 102", 3),
]


@pytest.mark.parametrize(("mutate", "reason", "names", "left"), BAD_INPUTS, ids=[m.__name__.strip("_") for m, *_ in BAD_INPUTS])
def test_bad_input_raises_in_error_mode(tmp_path: Path, mutate: Mutation, reason: str, names: str, left: int) -> None:
    coco = _make_set(tmp_path)
    mutate(tmp_path, coco)
    with pytest.raises(DatasetError) as info:
        _dataset(_write(tmp_path, coco), on_bad="error")
    assert reason in str(info.value) and names in str(info.value)


@pytest.mark.parametrize(("mutate", "reason", "names", "left"), BAD_INPUTS, ids=[m.__name__.strip("_") for m, *_ in BAD_INPUTS])
def test_bad_input_is_skipped_counted_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mutate: Mutation, reason: str, names: str, left: int
) -> None:
    coco = _make_set(tmp_path)
    mutate(tmp_path, coco)
    with caplog.at_level(logging.WARNING, logger="defect_detector.data"):
        ds = _dataset(_write(tmp_path, coco), on_bad="skip")
    assert ds.skipped == {reason: 1}
    assert f"{reason} x1" in ds.report()
    assert any(reason in r.getMessage() and names in r.getMessage() for r in caplog.records)
    assert len(ds) == left
    total_boxes = sum(len(ds[i][1]["boxes"]) for i in range(len(ds)))
    assert total_boxes == 5 if left == 3 else total_boxes == 4


@pytest.mark.parametrize("on_bad", ["skip", "error"])
@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"images": {}, "categories": []}'])
def test_malformed_json_names_the_file(tmp_path: Path, on_bad: str, text: str) -> None:
    path = tmp_path / "broken.json"
    path.write_text(text)
    with pytest.raises(DatasetError, match="broken.json: malformed"):
        _dataset(path, on_bad=on_bad)
    with pytest.raises(DatasetError, match="not found"):
        _dataset(tmp_path / "absent.json", on_bad=on_bad)


def _corrupt(path: Path) -> None:
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)


def _truncated_jpeg(path: Path) -> None:
    ok, data = cv2.imencode(".jpg", _image(1))
    assert ok
    path.write_bytes(data.tobytes()[: len(data) // 2])


@pytest.mark.parametrize(("damage", "problem"), [(_corrupt, "corrupt"), (_truncated_jpeg, "truncated JPEG")])
def test_undecodable_image(tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: Callable[[Path], None], problem: str) -> None:
    coco = _make_set(tmp_path)
    coco["images"][1]["file_name"] = "img_1.jpg"
    damage(tmp_path / "images" / "img_1.jpg")
    path = _write(tmp_path, coco)

    strict = _dataset(path, on_bad="error")
    with pytest.raises(DatasetError, match=f"img_1.jpg: {problem}"):
        strict[1]
    assert strict[0][1]["image_id"] == 10

    lenient = _dataset(path, on_bad="skip")
    with caplog.at_level(logging.WARNING, logger="defect_detector.data"):
        _, target = lenient[1]
    assert target["image_id"] == 12
    assert lenient.skipped == {"unreadable image": 1}
    assert "unreadable image x1" in lenient.report()
    assert any("img_1.jpg" in r.getMessage() for r in caplog.records)
    assert lenient[1][1]["image_id"] == 12 and lenient.skipped["unreadable image"] == 1


def test_unreadable_images_found_in_loader_workers_are_counted_in_the_main_process(tmp_path: Path) -> None:
    coco = _make_set(tmp_path, n=4)
    for i in (1, 2):
        coco["images"][i]["file_name"] = f"img_{i}.jpg"
        _corrupt(tmp_path / "images" / f"img_{i}.jpg")
    ds = _dataset(_write(tmp_path, coco))
    loader = DataLoader(ds, batch_size=1, num_workers=2, collate_fn=collate)
    seen = [targets[0]["image_id"] for _, targets in loader]
    assert sorted(set(seen)) == [10, 13] and len(seen) == 4
    assert ds.skipped == {"unreadable image": 2} and "unreadable image x2" in ds.report()


def test_every_image_unreadable_raises(tmp_path: Path) -> None:
    coco = _make_set(tmp_path, n=2)
    for i in range(2):
        _corrupt(tmp_path / "images" / f"img_{i}.png")
    ds = _dataset(_write(tmp_path, coco), on_bad="skip")
    with pytest.raises(DatasetError, match="no readable image"):
        ds[0]


def test_size_mismatch_is_an_unreadable_sample(tmp_path: Path) -> None:
    coco = _make_set(tmp_path)
    coco["images"][0]["width"] = W + 10
    with pytest.raises(DatasetError, match="annotations say"):
        _dataset(_write(tmp_path, coco), on_bad="error")[0]


def test_colour_alpha_and_16bit_are_converted_with_one_warning_per_kind(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    coco = _make_set(tmp_path, n=4)
    gray = _image(0)
    images = tmp_path / "images"
    cv2.imwrite(str(images / "img_0.png"), cv2.merge([gray, gray, gray]))
    cv2.imwrite(str(images / "img_1.png"), cv2.merge([gray, gray, gray, np.full_like(gray, 7)]))
    cv2.imwrite(str(images / "img_2.png"), gray.astype(np.uint16) * 257)
    cv2.imwrite(str(images / "img_3.png"), cv2.merge([gray, gray, gray]))
    ds = _dataset(_write(tmp_path, coco))
    with caplog.at_level(logging.WARNING, logger="defect_detector.data"):
        for _ in range(2):
            for i in range(4):
                image, _ = ds[i]
                torch.testing.assert_close(image[0, 8:56], torch.from_numpy(gray).float() / 255, atol=1 / 255, rtol=0)
    messages = [r.getMessage() for r in caplog.records]
    for kind in ("colour", "alpha", "16-bit:16"):
        assert sum(f"converting {kind} images" in m for m in messages) == 1


def _make_pairs(root: Path, n: int = 3) -> dict[str, Any]:
    """:func:`_make_set` plus a golden reference per image (``ref_<i>.png``: the image, brightened)."""
    coco = _make_set(root, n)
    for i, img in enumerate(coco["images"]):
        cv2.imwrite(str(root / "images" / f"ref_{i}.png"), np.clip(_image(i).astype(int) + 1, 0, 255).astype(np.uint8))
        img["reference"] = f"ref_{i}.png"
    return coco


def _pair_dataset(path: Path, on_bad: str = "skip", register: bool = False) -> CocoDetectionDataset:
    return CocoDetectionDataset(path, None, DEEPPCB_CLASSES, 64, on_bad=on_bad, reference=True, register=register)


def test_reference_samples_stack_image_and_reference(tmp_path: Path) -> None:
    ds = _pair_dataset(_write(tmp_path, _make_pairs(tmp_path)))
    image, target = ds[0]
    assert image.shape == (2, 64, 64) and image.dtype == torch.float32
    gray = torch.from_numpy(_image(0)).float() / 255.0
    pad = int(target["letterbox"].pad_y)
    np.testing.assert_allclose(image[0, pad : pad + H], gray, atol=1e-6)
    np.testing.assert_allclose(image[1, pad : pad + H], (gray * 255 + 1).clamp(max=255) / 255.0, atol=1e-6)
    assert float(image[1, 0, 0]) == pytest.approx(114 / 255)  # both channels share the image's letterbox
    batch, targets = collate([ds[0], ds[1]])
    assert batch.shape == (2, 2, 64, 64) and len(targets) == 2


def test_missing_reference_is_skipped_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    coco = _make_pairs(tmp_path)
    (tmp_path / "images" / "ref_1.png").unlink()
    del coco["images"][2]["reference"]
    with caplog.at_level(logging.WARNING, logger="defect_detector.data"):
        ds = _pair_dataset(_write(tmp_path, coco))
    assert ds.image_ids == [10]
    assert ds.skipped == {"missing reference file": 1, "image has no reference": 1}
    assert "ref_1.png" in caplog.text
    with pytest.raises(DatasetError, match="ref_1.png: missing reference file"):
        _pair_dataset(_write(tmp_path, coco), on_bad="error")


def test_unreadable_reference_is_a_counted_skip(tmp_path: Path) -> None:
    coco = _make_pairs(tmp_path)
    (tmp_path / "images" / "ref_0.png").write_bytes(b"not an image")
    ds = _pair_dataset(_write(tmp_path, coco))
    image, target = ds[0]  # replaced by the next readable sample
    assert target["image_id"] == 11 and image.shape == (2, 64, 64)
    assert ds.skipped == {"unreadable reference": 1}


def test_reference_of_another_size_without_registration_is_refused(tmp_path: Path) -> None:
    coco = _make_pairs(tmp_path, n=1)
    cv2.imwrite(str(tmp_path / "images" / "ref_0.png"), np.zeros((H + 2, W), np.uint8))
    with pytest.raises(
        DatasetError, match=r"ref_0.png: does not match .*img_0.png \(golden image is 64x50 px, the frame 64x48 px: not aligned as given"
    ):
        _pair_dataset(_write(tmp_path, coco), on_bad="error")[0]


def test_json_without_references_stops_a_reference_dataset(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no image entry has a 'reference'"):
        _pair_dataset(_write(tmp_path, _make_set(tmp_path)))


SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def test_registration_aligns_a_moved_reference_and_refuses_another_board(tmp_path: Path) -> None:
    board = load_image_gray(SAMPLES / "golden" / "50600000_test.jpg")
    moved = cv2.warpAffine(board, np.float32([[1, 0, 6], [0, 1, -4]]), (640, 640), borderValue=114)
    cv2.imwrite(str(tmp_path / "board.png"), board)
    cv2.imwrite(str(tmp_path / "moved.png"), moved)
    cv2.imwrite(str(tmp_path / "other.png"), load_image_gray(SAMPLES / "golden" / "92000000_test.jpg"))
    images = [
        {"id": 1, "file_name": "board.png", "width": 640, "height": 640, "reference": "moved.png"},
        {"id": 2, "file_name": "board.png", "width": 640, "height": 640, "reference": "other.png"},
    ]
    coco = {"images": images, "annotations": [], "categories": [{"id": 1, "name": "open"}]}
    path = _write(tmp_path, coco)
    ds = CocoDetectionDataset(path, None, DEEPPCB_CLASSES, 640, reference=True, register=True)
    image, target = ds[0]
    inner = (slice(20, 620), slice(20, 620))  # away from the border the move exposed
    assert float((image[0][inner] - image[1][inner]).abs().mean()) < 0.01  # registered back onto the board
    refused = r"moved.png: does not match .*board.png \(golden image shows another design, another board or another scale"
    with pytest.raises(DatasetError, match=refused):
        CocoDetectionDataset(path, None, DEEPPCB_CLASSES, 640, on_bad="error", reference=True, register=False)[0]  # golden check
    _, target = ds[1]  # the other board's template does not fit: replaced by the next sample, and counted
    assert target["image_id"] == 1 and ds.skipped == {"reference does not match its image": 1}
    with pytest.raises(DatasetError, match=r"other.png: does not match .*board.png \("):
        CocoDetectionDataset(path, None, DEEPPCB_CLASSES, 640, on_bad="error", reference=True, register=True)[1]


def test_categories_are_matched_by_name_whatever_their_ids(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    coco = _make_set(tmp_path)
    # the json lists two of the model's classes, under other ids and in another order, and one class it lacks
    coco["categories"] = [{"id": 9, "name": "short"}, {"id": 4, "name": "open"}, {"id": 7, "name": "scratch"}]
    for ann in coco["annotations"]:
        ann["category_id"] = {1: 4, 2: 9}[ann["category_id"]]
    coco["annotations"][0]["category_id"] = 7
    with caplog.at_level(logging.WARNING, logger="defect_detector.data"):
        ds = _dataset(_write(tmp_path, coco))
    assert ds.label_to_cat_id == {DEEPPCB_CLASSES.index("open"): 4, DEEPPCB_CLASSES.index("short"): 9}
    assert ds.absent_classes == [n for n in DEEPPCB_CLASSES if n not in ("open", "short")]
    assert ds.unknown_categories == ["scratch"] and ds.skipped == {"unknown category": 1}
    notes = [r.getMessage() for r in caplog.records if "are not classes of the model" in r.getMessage()]
    assert len(notes) == 1 and "'scratch'" in notes[0]
    labels = sorted(label for i in range(len(ds)) for label in ds[i][1]["labels"].tolist())
    assert labels == sorted([0, 0, 1, 1, 1])  # open (label 0) x2 left after the skip, short (label 1) x3
    assert sorted(c["name"] for c in ds.coco.dataset["categories"]) == ["open", "short"]


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("file_name", "", "missing image file"),
        ("file_name", "img_0.png\x00", "missing image file"),
        ("iscrowd", "yes", "malformed annotation"),
    ],
)
def test_entries_that_would_crash_later_are_counted_skips(tmp_path: Path, field: str, value: str, reason: str) -> None:
    coco = _make_set(tmp_path)
    entry = coco["images"][0] if field == "file_name" else coco["annotations"][0]
    entry[field] = value
    ds = _dataset(_write(tmp_path, coco))
    assert ds.skipped == {reason: 1}


def test_missing_iscrowd_and_a_garbage_area_are_filled_in(tmp_path: Path) -> None:
    coco = _make_set(tmp_path)
    del coco["annotations"][0]["iscrowd"]
    coco["annotations"][1]["area"] = "large"
    ds = _dataset(_write(tmp_path, coco))
    first, second = ds.coco.loadAnns([100, 101])
    assert first["iscrowd"] == 0 and second["area"] == 10 * 25 and ds.skipped == {}
