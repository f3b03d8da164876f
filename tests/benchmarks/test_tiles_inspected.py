"""Smoke test of benchmarks/tiles_inspected.py: the bundled golden-template model on bundled sample boards, one by
one and composed into a tiled frame, through the Inspector, as given and enlarged (``--zoom``)."""

import json
from pathlib import Path

import pytest

from benchmarks.tiles_inspected import main

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def _write_json(tmp_path: Path, boards: int) -> None:
    """``tmp_path / "val.json"``: the first ``boards`` bundled sample boards with their golden images, one defect."""
    names = sorted(p.name for p in (SAMPLES / "deeppcb").glob("*.jpg"))[:boards]
    images = [
        {"id": i + 1, "file_name": f"deeppcb/{n}", "reference": f"golden/{n}", "width": 640, "height": 640} for i, n in enumerate(names)
    ]
    coco = {
        "info": {"images_root": str(SAMPLES)},
        "images": images,
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20], "area": 400, "iscrowd": 0}],
        "categories": [{"id": i + 1, "name": n} for i, n in enumerate(("open", "short", "mousebite", "spur", "copper", "pin-hole"))],
    }
    (tmp_path / "val.json").write_text(json.dumps(coco))


def test_boards_and_their_frame_are_inspected_and_scored(tmp_path: Path, one_thread: None) -> None:
    _write_json(tmp_path, 3)
    out = tmp_path / "r.json"
    assert main(["--data", str(tmp_path / "val.json"), "--threads", "1", "--register-golden", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["frames"] == 1 and result["boards"] == 3 and result["refused"] == []
    assert 0.0 <= result["map50_tiled"] <= 1.0 and 0.0 <= result["map50_one_by_one"] <= 1.0
    assert all(set(row) == {"image_id", "class", "bbox"} for row in result["lost"])


def test_zoomed_boards_and_frame_are_inspected_at_a_working_scale(tmp_path: Path, one_thread: None, capsys) -> None:
    _write_json(tmp_path, 2)
    out = tmp_path / "r.json"
    assert main(["--data", str(tmp_path / "val.json"), "--threads", "1", "--zoom", "2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["zoom"] == 2.0 and result["frames"] == 1 and result["boards"] == 2 and result["refused"] == []
    assert len(result["frame_working_scales"]) == 1 and 0.0 <= result["map50_tiled"] <= 1.0  # its 4096x3072 frame's
    with pytest.raises(SystemExit) as exc:
        main(["--data", str(tmp_path / "val.json"), "--zoom", "0.5"])
    assert exc.value.code == 2 and "--zoom 0.5: give 1 to 4" in capsys.readouterr().err


def test_a_json_without_boards_is_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty.json").write_text(json.dumps({"images": [], "annotations": [], "categories": []}))
    assert main(["--data", str(tmp_path / "empty.json"), "--out", str(tmp_path / "r.json")]) == 2
    assert "no boards with golden images to compose" in capsys.readouterr().err and not (tmp_path / "r.json").exists()
