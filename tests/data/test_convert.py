import xml.etree.ElementTree as ET
from pathlib import Path

import cv2
import numpy as np
import pytest

from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.core.errors import DatasetError
from defect_detector.core.io import atomic_write_json
from defect_detector.data.convert import attach_references, deeppcb_to_coco, split_deeppcb_by_group, voc_to_coco, yolo_to_coco
from defect_detector.data.dataset import CocoDetectionDataset

# (group, image id, annotation lines) for a tiny DeepPCB-shaped tree
PAIRS = [
    ("00041", "00041000", ["10 12 30 40 1", "5 6 25 26 6"]),
    ("00041", "00041001", ["1 2 21 22 3"]),
    ("20085", "20085000", ["40 40 60 62 2", "0 0 20 20 4", "44 2 60 30 5"]),
]


def _fake_deeppcb(root: Path, trailing_newline: bool) -> Path:
    lines = []
    for group, stem, boxes in PAIRS:
        images = root / f"group{group}" / group
        labels = root / f"group{group}" / f"{group}_not"
        images.mkdir(parents=True, exist_ok=True)
        labels.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(images / f"{stem}_test.jpg"), np.full((64, 80), 255, np.uint8))
        cv2.imwrite(str(images / f"{stem}_temp.jpg"), np.full((64, 80), 255, np.uint8))
        (labels / f"{stem}.txt").write_text("\n".join(boxes) + "\n")
        lines.append(f"group{group}/{group}/{stem}.jpg group{group}/{group}_not/{stem}.txt")
    split = root / "trainval.txt"
    split.write_text("\n".join(lines) + ("\n" if trailing_newline else ""))
    return split


@pytest.mark.parametrize("trailing_newline", [True, False])
def test_deeppcb_one_image_per_pair_with_exactly_its_boxes(tmp_path: Path, trailing_newline: bool) -> None:
    split = _fake_deeppcb(tmp_path, trailing_newline)
    coco = deeppcb_to_coco(tmp_path, split)
    assert [img["file_name"] for img in coco["images"]] == [f"group{g}/{g}/{s}_test.jpg" for g, s, _ in PAIRS]
    assert all((img["width"], img["height"]) == (80, 64) for img in coco["images"])
    assert [c["name"] for c in coco["categories"]] == list(DEEPPCB_CLASSES)
    assert [c["id"] for c in coco["categories"]] == [1, 2, 3, 4, 5, 6]
    assert Path(coco["info"]["images_root"]) == tmp_path.resolve()
    for img, (_, _, lines) in zip(coco["images"], PAIRS):
        anns = [a for a in coco["annotations"] if a["image_id"] == img["id"]]
        got = [(a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3], a["category_id"]) for a in anns]
        assert got == [tuple(float(v) for v in line.split()[:4]) + (int(line.split()[4]),) for line in lines]
        assert all(a["area"] == a["bbox"][2] * a["bbox"][3] and a["iscrowd"] == 0 for a in anns)
    assert len({a["id"] for a in coco["annotations"]}) == 6


def test_deeppcb_templates_are_defect_free_images_kept_out_of_validation(tmp_path: Path) -> None:
    coco = deeppcb_to_coco(tmp_path, _fake_deeppcb(tmp_path, trailing_newline=True), templates=True)
    names = [img["file_name"] for img in coco["images"]]
    assert names == [f"group{g}/{g}/{s}_{kind}.jpg" for g, s, _ in PAIRS for kind in ("test", "temp")]
    templates = {img["id"] for img in coco["images"] if img["file_name"].endswith("_temp.jpg")}
    assert not any(a["image_id"] in templates for a in coco["annotations"]) and len(coco["annotations"]) == 6
    train, val = split_deeppcb_by_group(coco, ["20085"])
    assert [img["file_name"] for img in val["images"]] == ["group20085/20085/20085000_test.jpg"]
    assert [img["file_name"] for img in train["images"]] == names[:4]


def test_deeppcb_coco_loads_as_dataset(tmp_path: Path) -> None:
    coco = deeppcb_to_coco(tmp_path, _fake_deeppcb(tmp_path, trailing_newline=False))
    path = tmp_path / "out" / "ann.json"
    atomic_write_json(path, coco)
    ds = CocoDetectionDataset(path, None, DEEPPCB_CLASSES, 64, on_bad="error")
    assert len(ds) == 3
    assert ds[2][1]["labels"].tolist() == [1, 3, 4]


@pytest.mark.parametrize(
    ("line", "problem"),
    [("10 12 30 40", "expected 'x1 y1 x2 y2 type'"), ("10 12 30 40 7", "unknown defect type 7"), ("10 12 a 40 1", "non-numeric")],
)
def test_deeppcb_bad_line_names_file_and_line(tmp_path: Path, line: str, problem: str) -> None:
    split = _fake_deeppcb(tmp_path, trailing_newline=True)
    txt = tmp_path / "group00041" / "00041_not" / "00041001.txt"
    txt.write_text(f"1 2 21 22 3\n{line}\n")
    with pytest.raises(DatasetError, match=rf"00041001\.txt:2: {problem}"):
        deeppcb_to_coco(tmp_path, split)


def test_deeppcb_bad_split_line_and_missing_image(tmp_path: Path) -> None:
    split = _fake_deeppcb(tmp_path, trailing_newline=True)
    split.write_text(split.read_text() + "only-one-field\n")
    with pytest.raises(DatasetError, match=r"trainval\.txt:4"):
        deeppcb_to_coco(tmp_path, split)
    split = _fake_deeppcb(tmp_path, trailing_newline=True)
    (tmp_path / "group20085" / "20085" / "20085000_test.jpg").unlink()
    with pytest.raises(DatasetError, match="20085000_test.jpg"):
        deeppcb_to_coco(tmp_path, split)


def test_split_by_group(tmp_path: Path) -> None:
    coco = deeppcb_to_coco(tmp_path, _fake_deeppcb(tmp_path, trailing_newline=True))
    train, val = split_deeppcb_by_group(coco, ["20085"])
    assert [i["id"] for i in train["images"]] == [1, 2] and [i["id"] for i in val["images"]] == [3]
    assert len(train["annotations"]) == 3 and len(val["annotations"]) == 3
    assert {a["image_id"] for a in val["annotations"]} == {3}
    assert train["categories"] == val["categories"] == coco["categories"]
    same, _ = split_deeppcb_by_group(coco, ["group20085"])
    assert same == train
    with pytest.raises(DatasetError, match="group99999"):
        split_deeppcb_by_group(coco, ["99999"])


BOXES = {"a.png": [("short", 3, 4, 30, 20), ("open", 10, 25, 50, 47)], "b.png": [], "c.png": [("open", 0, 0, 64, 48)]}


def _write_images(images: Path) -> None:
    images.mkdir(parents=True, exist_ok=True)
    for name in BOXES:
        cv2.imwrite(str(images / name), np.zeros((48, 64), np.uint8))


def _boxes_by_file(coco: dict) -> dict[str, list[tuple]]:
    names = {c["id"]: c["name"] for c in coco["categories"]}
    files = {i["id"]: i["file_name"] for i in coco["images"]}
    out: dict[str, list[tuple]] = {f: [] for f in files.values()}
    for a in coco["annotations"]:
        x, y, w, h = a["bbox"]
        out[files[a["image_id"]]].append((names[a["category_id"]], x, y, x + w, y + h))
    return out


def test_voc_round_trip(tmp_path: Path) -> None:
    _write_images(tmp_path / "images")
    xml_dir = tmp_path / "xml"
    xml_dir.mkdir()
    for name, objects in BOXES.items():
        root = ET.Element("annotation")
        ET.SubElement(root, "filename").text = name
        size = ET.SubElement(root, "size")
        ET.SubElement(size, "width").text = "64" if name != "b.png" else "0"
        ET.SubElement(size, "height").text = "48" if name != "b.png" else "0"
        for cls, *coords in objects:
            obj = ET.SubElement(root, "object")
            ET.SubElement(obj, "name").text = cls
            box = ET.SubElement(obj, "bndbox")
            for tag, value in zip(("xmin", "ymin", "xmax", "ymax"), coords):
                ET.SubElement(box, tag).text = str(value)
        ET.ElementTree(root).write(xml_dir / f"{Path(name).stem}.xml")
    coco = voc_to_coco(xml_dir, tmp_path / "images")
    assert [c["name"] for c in coco["categories"]] == ["open", "short"]
    assert all((i["width"], i["height"]) == (64, 48) for i in coco["images"])
    assert _boxes_by_file(coco) == {k: [tuple(v) for v in vs] for k, vs in BOXES.items()}
    fixed = voc_to_coco(xml_dir, tmp_path / "images", class_names=DEEPPCB_CLASSES)
    assert _boxes_by_file(fixed) == _boxes_by_file(coco)
    assert fixed["categories"][0] == {"id": 1, "name": "open"}
    with pytest.raises(DatasetError, match="a.xml: unknown class 'short'"):
        voc_to_coco(xml_dir, tmp_path / "images", class_names=["open"])


def test_yolo_round_trip(tmp_path: Path) -> None:
    _write_images(tmp_path / "images")
    labels = tmp_path / "labels"
    labels.mkdir()
    for name, objects in BOXES.items():
        if not objects:
            continue
        lines = []
        for cls, x1, y1, x2, y2 in objects:
            lines.append(f"{DEEPPCB_CLASSES.index(cls)} {(x1 + x2) / 128} {(y1 + y2) / 96} {(x2 - x1) / 64} {(y2 - y1) / 48}")
        (labels / f"{Path(name).stem}.txt").write_text("\n".join(lines))
    coco = yolo_to_coco(labels, tmp_path / "images", DEEPPCB_CLASSES)
    got = _boxes_by_file(coco)
    assert set(got) == set(BOXES) and got["b.png"] == []
    for name, objects in BOXES.items():
        for (cls, *coords), (got_cls, *got_coords) in zip(objects, got[name]):
            assert cls == got_cls
            np.testing.assert_allclose(got_coords, coords, atol=1e-6)
    (labels / "a.txt").write_text("0 0.5 0.5 0.1 0.1\n9 0.5 0.5 0.1 0.1\n")
    with pytest.raises(DatasetError, match=r"a\.txt:2: class 9 out of range"):
        yolo_to_coco(labels, tmp_path / "images", DEEPPCB_CLASSES)


def test_deeppcb_reference_is_each_boards_template(tmp_path: Path) -> None:
    coco = deeppcb_to_coco(tmp_path, _fake_deeppcb(tmp_path, trailing_newline=True), templates=True)
    for img in coco["images"]:
        stem = img["file_name"].rsplit("_", 1)[0]
        assert img["reference"] == f"{stem}_temp.jpg"  # a template is its own reference: no difference, no defect
    (tmp_path / "group00041" / "00041" / "00041001_temp.jpg").unlink()
    with pytest.raises(DatasetError, match="00041001_temp.jpg: missing template"):
        deeppcb_to_coco(tmp_path, tmp_path / "trainval.txt")


def test_attach_references_by_relative_path_then_file_name(tmp_path: Path) -> None:
    _write_images(tmp_path / "images")
    refs = tmp_path / "golden"
    (refs / "sub").mkdir(parents=True)
    names = sorted(BOXES)
    cv2.imwrite(str(refs / names[0]), np.zeros((48, 64), np.uint8))  # same relative path
    cv2.imwrite(str(refs / "sub" / names[1]), np.zeros((48, 64), np.uint8))  # same file name, elsewhere
    coco = yolo_to_coco(tmp_path / "images", tmp_path / "images", DEEPPCB_CLASSES)
    missing = attach_references(coco, refs)
    by_name = {img["file_name"]: img.get("reference") for img in coco["images"]}
    assert by_name[names[0]] == f"../golden/{names[0]}"
    assert by_name[names[1]] == f"../golden/sub/{names[1]}"
    assert missing == names[2:] and all(by_name[n] is None for n in names[2:])
    ds = CocoDetectionDataset(_write_json(tmp_path, coco), None, DEEPPCB_CLASSES, 64, reference=True)
    assert len(ds) == 2 and ds.skipped == {"image has no reference": len(names) - 2}
    with pytest.raises(DatasetError, match="nowhere: references folder not found"):
        attach_references(coco, tmp_path / "nowhere")


def _write_json(root: Path, coco: dict) -> Path:
    path = root / "ann.json"
    atomic_write_json(path, coco)
    return path
