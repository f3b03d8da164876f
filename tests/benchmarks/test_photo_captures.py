"""``benchmarks/photo_captures.py``: good and painted captures of photographs, inspected and counted. A smoke test on
small sample images, and one on the real photographs of ``../shared/datasets/photos`` when they are there (skipped,
saying so, when they are not)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks import photo_captures

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples" / "golden"


def test_good_and_painted_captures_are_inspected_and_counted_per_capture_model(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    shutil.copy(SAMPLES / "50600000_test.jpg", tmp_path / "a.jpg")
    out = tmp_path / "r.json"
    argv = ["--photos", str(tmp_path), "--capture", "gentle,scale-1.005", "--good", "1", "--painted", "1", "--crop", "288"]
    assert photo_captures.main([*argv, "--out", str(out)]) == 0
    assert '"recall"' in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert set(report["captures"]) == {"gentle", "scale-1.005"} and report["photos"] == ["a.jpg"]
    defects = []
    for capture in report["captures"].values():
        overall = capture["overall"]
        assert overall["good"]["boards"] == 1 and overall["painted"]["boards"] == 1
        assert overall["good"]["inspected"] + overall["good"]["refused"] == 1 and 0.0 <= overall["painted"]["recall"] <= 1.0
        assert capture["photos"]["a"]["painted"]["defects"] == overall["painted"]["defects"] >= 1
        assert {"shift", "angle", "score"} <= set(overall["registration"]) and len(capture["rows"]) == 2
        defects.append(overall["painted"]["defects"])
    assert defects[0] == defects[1]  # the same painted boards under both captures


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert photo_captures.main(["--photos", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("photo_captures: error:") and "no photographs (.jpg, .jpeg, .png, .tif, .tiff, .bmp)" in err
    shutil.copy(SAMPLES / "50600000_test.jpg", tmp_path / "a.jpg")
    assert photo_captures.main(["--photos", str(tmp_path), "--capture", "line,zoom"]) == 2
    assert "capture 'zoom': give line, gentle" in capsys.readouterr().err
    assert photo_captures.main(["--photos", str(tmp_path), "--zoom", "9"]) == 2
    assert photo_captures.main(["--photos", str(tmp_path), "--paint-size", "20"]) == 2
    assert "--paint-size 20.0: give" in capsys.readouterr().err
    assert photo_captures.main(["--photos", str(tmp_path), "--teach", "3"]) == 2
    assert "--teach 3: teach --good needs 5 or more good boards" in capsys.readouterr().err


def test_a_capture_of_a_real_photograph_registers_to_it() -> None:
    folder = photo_captures.photos_folder()
    if not folder.is_dir():
        pytest.skip(f"the real photographs are absent: {folder} (../shared/datasets/photos, or set DEFECT_DETECTOR_PHOTOS)")
    photo = photo_captures.list_photos(folder)[:1]
    plan = photo_captures.Plan(captures=("gentle",), good=1, painted=0, crop=512)
    report = photo_captures.measure(photo, plan)
    overall = report["captures"]["gentle"]["overall"]
    assert overall["good"]["boards"] == 1 and overall["registration"]["score"][0] > 0.9
