"""meta.json checks (export/meta.py): every key the exporters write is accepted, every bad or unknown key is one line."""

import json

import pytest

from defect_detector.export.deploy_model import build_meta
from defect_detector.export.meta import MetaFile, parse_meta


def _meta(**changes: object) -> dict:
    meta = build_meta(["open", "short"], 64, [8, 16, 32], ["backbone.stem"], channels=2, pixel_scale=0.5)
    meta.update(operating_point={"conf": 0.3, "iou": 0.6, "cross_class_iou": None, "cross_class_factor": 0.25})
    meta.update(digest={"sha256": "0" * 64, "covers": []}, onnx_opset=17, aoti_device="cpu", int8={"target": "avx2"})
    return {**meta, **changes}


def test_every_key_the_exporters_write_is_known() -> None:
    meta = _meta()
    assert set(meta) <= set(MetaFile.model_fields)
    assert parse_meta("m.pt", json.dumps(meta)) == meta  # the dict the runtime reads, unchanged


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"calibrated_by": "me"}, "m.pt: meta.json calibrated_by: unknown key (known: aoti_device, baseline, "),
        ({"strides": [8, 0]}, "m.pt: meta.json strides must be a non-empty list of positive integers, got [8, 0]"),
        ({"imgsz": "64"}, "m.pt: meta.json imgsz must be a positive multiple of the largest stride (32), got '64'"),
        ({"channels": True}, "m.pt: meta.json channels must be 1 or 2, got True"),
        ({"class_names": ["a", "a"]}, "m.pt: meta.json class_names must be a non-empty list of distinct names, got ['a', 'a']"),
        ({"golden_check": {"min_zncc": 2}}, "m.pt: meta.json golden_check must be null or {\"min_zncc\": t, ...} with t in [-1, 1]"),
        ({"operating_point": {"conf": 0.3}}, "m.pt: meta.json operating_point must be null or {\"conf\": c, \"iou\": i}"),
        ({"pixel_scale": float("nan")}, "m.pt: meta.json pixel_scale must be null or a positive number, got nan"),
    ],
)
def test_a_bad_key_is_one_line_naming_it_and_its_value(changes: dict, problem: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_meta("m.pt", json.dumps(_meta(**changes)))
    assert str(info.value).startswith(problem) and "\n" not in str(info.value), str(info.value)


def test_a_missing_key_is_named() -> None:
    meta = _meta()
    del meta["layers"]
    with pytest.raises(ValueError, match=r"^m\.pt: meta\.json missing keys \['layers'\]$"):
        parse_meta("m.pt", json.dumps(meta))


def _domain() -> dict:
    from defect_detector.monitor.domain import DesignStats, DomainModel

    looks = [DesignStats(1.0, 0.0, 255.0, 0.0, 2.0, width) for width in (8.0, 12.0, 20.0)]
    return DomainModel.fit(looks).to_dict()


def test_the_design_domain_is_checked_and_optional() -> None:
    assert "domain" not in _meta() and parse_meta("m.pt", json.dumps(_meta()))  # artifacts before v0.11: no domain, no warning
    assert parse_meta("m.pt", json.dumps(_meta(domain=_domain())))["domain"] == _domain()
    with pytest.raises(ValueError, match=r"^m\.pt: meta\.json domain must be null or a design-domain object, got 3$"):
        parse_meta("m.pt", json.dumps(_meta(domain=3)))
    with pytest.raises(ValueError, match=r"^m\.pt: meta\.json domain: threshold: "):
        parse_meta("m.pt", json.dumps(_meta(domain={**_domain(), "threshold": 0})))


def test_the_taught_designs_are_checked_and_optional() -> None:
    taught = [{"name": "photo.png", "key": "image:0123456789abcdef"}]
    assert "taught" not in _meta() and parse_meta("m.pt", json.dumps(_meta()))  # artifacts before v0.11: none taught
    assert parse_meta("m.pt", json.dumps(_meta(taught=taught)))["taught"] == taught
    assert parse_meta("m.pt", json.dumps(_meta(taught=[])))["taught"] == []
    pointed = [{**taught[0], "conf": 0.35}]  # the design's own score threshold (teach, v0.16)
    assert parse_meta("m.pt", json.dumps(_meta(taught=pointed)))["taught"] == pointed
    tolerant = [{**pointed[0], "tolerance": [[10.0, 20.5, 0.4]], "tolerance_radius": 60.0, "tolerance_margin": 0.03}]  # issue 56
    assert parse_meta("m.pt", json.dumps(_meta(taught=tolerant)))["taught"] == tolerant
    rejected = [{**pointed[0], "rejected": [[30.0, 40.0, 0.5]], "rejected_radius": 20.0}]  # operators' rejections, no map
    assert parse_meta("m.pt", json.dumps(_meta(taught=rejected)))["taught"] == rejected
    what = (
        r'taught must be null or a list of \{"name": n, "key": k, "conf": c\} with n and k strings and c null or in \[0, 1\], '
        r'and a tolerance map \("tolerance": \[\[x, y, score\], ...\], "tolerance_radius" > 0, "tolerance_margin" in \[0, 1\]\) '
        r"or none, and operators' rejections \(\"rejected\": .*\) or none, got "
    )
    bad_points = [[{**taught[0], "conf": 1.5}], [{**taught[0], "conf": "0.3"}]]
    broken = (("tolerance", [[1.0, 2.0, 1.5]]), ("tolerance_radius", None), ("tolerance", "x"))
    bad_maps = [[{**tolerant[0], key: value}] for key, value in broken]
    bad_maps += [[{**rejected[0], "rejected_radius": None}], [{**rejected[0], "rejected": [[1.0, 2.0, -0.1]]}]]
    bad_entries = [[{"name": "photo.png"}], [{"name": "photo.png", "key": 3}], [{**taught[0], "score": 1}]]
    for bad in ("photo.png", *bad_entries, *bad_points, *bad_maps):
        with pytest.raises(ValueError, match=rf"^m\.pt: meta\.json {what}") as caught:
            parse_meta("m.pt", json.dumps(_meta(taught=bad)))
        assert "\n" not in str(caught.value)
