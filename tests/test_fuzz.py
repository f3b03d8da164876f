"""Fuzz: malformed annotation input gives a clear error or a counted skip, never another exception.

Generated inputs (hypothesis): COCO json of any shape (wrong types, missing keys, NaN / infinite / negative
numbers, unknown categories, odd file names) for :class:`CocoDetectionDataset`, and garbage DeepPCB split and
annotation lines, Pascal VOC xml and YOLO label lines for the converters. Each must either raise
:class:`DatasetError` (a ValueError) whose message names the offending file, or load with every bad entry
skipped and counted, after which the kept boxes are finite and inside their image and the evaluator runs.
Bounded for CI: 60 derandomized examples per test, a few seconds in all; ``FUZZ_EXAMPLES=5000`` searches longer.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.core.errors import DatasetError
from defect_detector.core.io import atomic_write_json
from defect_detector.data import convert
from defect_detector.data.dataset import CocoDetectionDataset
from defect_detector.data.evaluate import evaluate_predictions

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
H, W = 24, 32

scalars = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats() | st.text(max_size=6)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8
)
bad_numbers = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0, -1, -3.5, 1e308, "12", None, True, [1]])


def _mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any], odds: int = 8) -> st.SearchStrategy[Any]:
    """``bad`` once in ``odds`` draws, else ``good``: plausible input with a flaw here and there reaches deep code."""
    return st.integers(1, odds).flatmap(lambda k: bad if k == 1 else good)


file_names = _mostly(st.sampled_from(["a.png", "b.png"]), st.sampled_from(["missing.png", "", "sub/../a.png", "a\x00.png", "."]))
image_entries = st.fixed_dictionaries(
    {
        "id": _mostly(st.integers(1, 3), json_values),
        "file_name": file_names,
        "width": _mostly(st.just(W), bad_numbers),
        "height": _mostly(st.just(H), bad_numbers),
    }
)
boxes = _mostly(
    st.tuples(st.floats(0, W / 2), st.floats(0, H / 2), st.floats(1, W / 2), st.floats(1, H / 2)).map(list),
    st.tuples(st.floats(-3, W + 3), st.floats(-3, H + 3), st.floats(-2, W), st.floats(-2, H)).map(list),  # outside, degenerate
    odds=3,
)
annotation_entries = st.fixed_dictionaries(
    {
        "id": _mostly(st.integers(1, 9), json_values),
        "image_id": _mostly(st.integers(1, 3), json_values),
        "category_id": _mostly(st.integers(1, 7), json_values),
        "bbox": _mostly(boxes, st.lists(bad_numbers, max_size=5) | json_values),
    },
    optional={"area": bad_numbers | st.floats(0, 100), "iscrowd": st.sampled_from([0, 1, 2, "yes", None, True, [0]])},
)
category_lists = _mostly(
    st.lists(st.sampled_from([*DEEPPCB_CLASSES, "scratch"]), unique=True, max_size=7).map(
        lambda names: [{"id": i + 1, "name": n} for i, n in enumerate(names)]
    ),
    st.lists(
        st.fixed_dictionaries({"id": st.integers(0, 3) | json_values, "name": st.sampled_from(["open", ""]) | json_values}), max_size=3
    ),
)
coco_dicts = st.fixed_dictionaries(
    {
        "images": st.lists(_mostly(image_entries, json_values), max_size=3),
        "annotations": st.lists(_mostly(annotation_entries, json_values), max_size=6),
        "categories": category_lists,
    },
    optional={"info": json_values},
)


@contextlib.contextmanager
def _folder() -> Iterator[Path]:
    """A fresh folder with two small PNG boards, ``a.png`` and ``b.png`` (a fixture would be shared by all examples)."""
    with tempfile.TemporaryDirectory(prefix="fuzz_") as name:
        root = Path(name)
        for image in ("a.png", "b.png"):
            assert cv2.imwrite(str(root / image), np.full((H, W), 128, np.uint8))
        yield root


def _assert_clear(exc: BaseException, root: Path) -> None:
    assert isinstance(exc, DatasetError), f"{type(exc).__name__}: {exc}"
    event("clear error")
    message = str(exc)
    assert str(root) in message and "\n" not in message, message


def _check_loaded(ds: CocoDetectionDataset) -> None:
    """A dataset built from fuzzed input: kept boxes are finite, have area and lie inside their image; the evaluator
    scores perfect predictions (and none) over the classes present, the absent ones named."""
    assert ds.report().startswith(str(ds.ann_file))
    predictions = {}
    for rec in ds._records:
        assert np.isfinite(rec.boxes).all() and (rec.boxes[:, 2:] > rec.boxes[:, :2]).all()
        assert (rec.boxes >= 0).all() and (rec.boxes[:, [0, 2]] <= rec.width).all() and (rec.boxes[:, [1, 3]] <= rec.height).all()
        assert set(rec.labels.tolist()) <= set(ds.label_to_cat_id)
        n = len(rec.labels)
        predictions[rec.image_id] = {"boxes": torch.from_numpy(rec.boxes), "scores": torch.ones(n), "labels": torch.from_numpy(rec.labels)}
    event("loaded, boxes kept" if any(len(r.labels) for r in ds._records) else "loaded, no boxes kept")
    event(f"skipped: {', '.join(sorted(ds.skipped)) or 'nothing'}")
    present = {ds.class_names[label] for rec in ds._records for label in rec.labels.tolist()}
    perfect = evaluate_predictions(ds.coco, predictions, ds.label_to_cat_id, ds.class_names, 0.25)
    assert perfect["per_class"] == pytest.approx(dict.fromkeys(present, 1.0))  # every kept box found: AP 1 per class held
    assert perfect["map50"] == pytest.approx(1.0 if present else 0.0) and perfect["absent_classes"] == ds.absent_classes
    nothing = evaluate_predictions(ds.coco, {}, ds.label_to_cat_id, ds.class_names, 0.25)
    assert (nothing["map50"], nothing["per_class"], nothing["absent_classes"]) == (0.0, {}, ds.absent_classes)
    assert not present & set(ds.absent_classes)


@FUZZ
@given(raw=_mostly(coco_dicts, json_values))
def test_coco_json_loads_or_names_the_file(raw: Any) -> None:
    with _folder() as root:
        path = root / "ann.json"
        path.write_text(json.dumps(raw))  # NaN and Infinity as Python writes them
        for on_bad in ("skip", "error"):
            try:
                ds = CocoDetectionDataset(path, None, DEEPPCB_CLASSES, 64, on_bad=on_bad)
            except DatasetError as exc:
                _assert_clear(exc, root)
                continue
            skipped = sum(ds.skipped.values())
            assert on_bad == "skip" or skipped == 0
            _check_loaded(ds)


@FUZZ
@given(data=st.binary(max_size=40) | st.text(max_size=40).map(str.encode))
def test_undecodable_json_bytes_name_the_file(data: bytes) -> None:
    with _folder() as root:
        path = root / "ann.json"
        path.write_bytes(data)
        try:
            _check_loaded(CocoDetectionDataset(path, None, DEEPPCB_CLASSES, 64))
        except DatasetError as exc:
            _assert_clear(exc, root)


def _converted(coco: dict[str, Any], root: Path) -> None:
    """A converter's output: finite boxes, and it loads as a dataset (bad boxes skipped and counted)."""
    for ann in coco["annotations"]:
        assert all(math.isfinite(v) for v in ann["bbox"]), ann
    path = root / "converted.json"
    atomic_write_json(path, coco)
    _check_loaded(CocoDetectionDataset(path, None, coco_class_names(coco), 64))


def coco_class_names(coco: dict[str, Any]) -> list[str]:
    return [c["name"] for c in coco["categories"]] or ["defect"]


def _run(fn: Any, root: Path) -> None:
    try:
        coco = fn()
    except DatasetError as exc:
        _assert_clear(exc, root)
        return
    _converted(coco, root)


def _corners(x: int, y: int, w: int, h: int) -> tuple[str, str, str, str]:
    return str(x), str(y), str(x + w), str(y + h)


good_corners = st.builds(_corners, st.integers(0, 15), st.integers(0, 10), st.integers(1, 15), st.integers(1, 12))
coords = st.integers(-3, 40).map(str) | st.sampled_from(["nan", "inf", "1e400", "x", "", "3.5"])
any_corners = st.tuples(coords, coords, coords, coords)
deeppcb_lines = st.lists(
    _mostly(
        st.builds(
            lambda c, k: " ".join((*c, k)), _mostly(good_corners, any_corners, 3), _mostly(st.integers(1, 6), st.integers(-1, 9)).map(str)
        ),
        st.text(alphabet=" 0123456789.-,nafx\t", max_size=16),
    ),
    max_size=4,
).map("\n".join)
raw_text = st.binary(max_size=30).map(lambda b: b.decode("latin-1"))


@FUZZ
@given(
    split=_mostly(
        st.sampled_from(["a.jpg a.txt", "a.jpg a.txt\n\nb.jpg b.txt"]),
        st.sampled_from(["a.jpg", "b.jpg b.txt\nb.jpg b.txt", "c.jpg c.txt"]),
    ),
    txt=_mostly(deeppcb_lines, raw_text),
)
def test_deeppcb_converter(split: str, txt: str) -> None:
    with _folder() as root:
        for stem in ("a", "b"):
            for suffix in ("_test.jpg", "_temp.jpg"):
                assert cv2.imwrite(str(root / f"{stem}{suffix}"), np.full((H, W), 200, np.uint8))
            (root / f"{stem}.txt").write_text(txt, encoding="latin-1")
        (root / "split.txt").write_text(split)
        _run(lambda: convert.deeppcb_to_coco(root, root / "split.txt", templates=True), root)


xml_numbers = _mostly(st.integers(0, 30).map(str), st.sampled_from(["-4", "nan", "inf", "1e400", "", "x", "31.5"]))
voc_objects = st.lists(
    st.builds(
        lambda name, c: (name, *c),
        _mostly(st.sampled_from(["open", "short"]), st.sampled_from(["", "other"])),
        _mostly(good_corners, st.tuples(xml_numbers, xml_numbers, xml_numbers, xml_numbers), 3),
    ),
    max_size=3,
)


def _voc_xml(name: str, width: str, height: str, objects: list[tuple[str, ...]]) -> str:
    body = "".join(
        f"<object><name>{n}</name><bndbox><xmin>{a}</xmin><ymin>{b}</ymin><xmax>{c}</xmax><ymax>{d}</ymax></bndbox></object>"
        for n, a, b, c, d in objects
    )
    return f"<annotation><filename>{name}</filename><size><width>{width}</width><height>{height}</height></size>{body}</annotation>"


@FUZZ
@given(
    xml=_mostly(st.builds(_voc_xml, file_names, xml_numbers, xml_numbers, voc_objects), raw_text),
    classes=st.sampled_from([None, ["open", "short"]]),
)
def test_voc_converter(xml: str, classes: list[str] | None) -> None:
    with _folder() as root:
        (root / "a.xml").write_text(xml, encoding="latin-1")
        _run(lambda: convert.voc_to_coco(root, root, classes), root)


unit = st.floats(-0.2, 1.2).map(lambda v: f"{v:.3f}") | st.sampled_from(["nan", "inf", "-0"])
good_unit = st.tuples(st.floats(0.3, 0.7), st.floats(0.3, 0.7), st.floats(0.05, 0.5), st.floats(0.05, 0.5)).map(
    lambda v: tuple(f"{x:.3f}" for x in v)
)
yolo_lines = st.builds(
    lambda k, v: " ".join((k, *v)),
    _mostly(st.integers(0, 1), st.integers(-1, 2)).map(str),
    _mostly(good_unit, st.tuples(unit, unit, unit, unit), 3),
)


@FUZZ
@given(txt=_mostly(st.lists(_mostly(yolo_lines, st.text(alphabet=" 0123456789.-einaf", max_size=20)), max_size=4).map("\n".join), raw_text))
def test_yolo_converter(txt: str) -> None:
    with _folder() as root:
        (root / "a.txt").write_text(txt, encoding="latin-1")
        _run(lambda: convert.yolo_to_coco(root, root, ["open", "short"]), root)
