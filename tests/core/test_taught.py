"""The taught entry (core/taught.py): one typed model for a checkpoint's and an artifact's designs."""

from defect_detector.core.taught import entry_problem


def test_each_wrong_part_of_an_entry_is_named() -> None:
    entry = {"name": "a.png", "key": "image:a", "conf": 0.3}
    whole = entry | {"tolerance": [[1.0, 2.0, 0.4]], "tolerance_radius": 60.0, "tolerance_margin": 0.03}
    whole |= {"rejected": [[3, 4, 0.5]], "rejected_radius": 20.0, "area": [[[0, 0], [9, 0], [9, 9]]], "area_shape": [10, 10]}
    assert entry_problem(entry) is None and entry_problem(whole) is None
    assert [entry_problem(e) for e in ("x", {"name": "a.png"}, entry | {"conf": 1.5}, entry | {"score": 1})] == ["entry"] * 4
    assert entry_problem(entry | {"tolerance": [[1.0, 2.0, 0.4]]}) == "map"  # without its radius and margin
    assert entry_problem(whole | {"rejected_radius": -1.0}) == "map"
    assert entry_problem(whole | {"area": [[[0, 0], [9, 0]]]}) == "area"  # two points are no polygon
    assert entry_problem(entry | {"area_shape": [10, 10]}) == "area"  # a shape without its area
