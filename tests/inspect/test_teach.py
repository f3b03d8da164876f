"""`teach`: calibration first (inspect/teach.py, cli/teach.py): a design's own point, for that design only."""

import re
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from defect_detector.cli.main import main
from defect_detector.data.images import load_image_gray, pixel_fingerprint
from defect_detector.data.synth import generate_board_pair
from defect_detector.inspect import teach as teach_module
from defect_detector.inspect.inspector import Inspector
from defect_detector.inspect.runtime import Runtime
from defect_detector.inspect.teach import teach
from defect_detector.inspect.teach_point import DesignPoint
from defect_detector.looks.render import render_pair, sample_look
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, DEFAULT_WEIGHTS, PHOTO_REFERENCE_WEIGHTS, load_checkpoint

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
NONE_REFUSED = {"clean_refused": 0, "held_refused": 0}


def _photo_golden(path: Path) -> np.ndarray:
    layout = generate_board_pair(256, 256, np.random.default_rng(7))[1]
    rng = np.random.default_rng(8)
    golden = render_pair(layout, layout, sample_look(rng, "holdout"), rng, strength=0.0)[1]
    cv2.imwrite(str(path), golden)
    return golden


def test_teach_calibrates_the_design_first_and_keeps_the_weights_when_no_time_is_left(tmp_path: Path) -> None:
    golden = _photo_golden(tmp_path / "design_a.png")
    out = tmp_path / "taught.pt"
    report = teach(tmp_path / "design_a.png", out, PHOTO_REFERENCE_WEIGHTS, minutes=1.5, held=3, threads=2)
    (design,) = report.designs
    assert design.taught and design.after.false_calls <= 0.1 and design.after.caught >= 0.5
    assert design.before.conf == Runtime.load(PHOTO_REFERENCE_WEIGHTS, device="cpu").operating_point["conf"]
    assert report.boards["clean"] >= 12 and report.boards["held"] >= 1
    assert report.tuning.startswith(("fine-tune not run", "fine-tune not needed")) and report.rehearsal is None
    start = torch.load(PHOTO_REFERENCE_WEIGHTS, map_location="cpu", weights_only=True)
    taught = torch.load(out, map_location="cpu", weights_only=True)
    assert all(torch.equal(taught["model"][k], v) for k, v in start.get("ema", start["model"]).items())  # unchanged weights
    assert taught["baseline"] == start["baseline"] and "starting weights' own" in report.baseline  # monitoring stays on
    assert taught["taught"] == [{"name": "design_a.png", "key": pixel_fingerprint(golden), "conf": design.after.conf}]
    assert Runtime.load(out, device="cpu").design_points == {pixel_fingerprint(golden): design.after.conf}
    assert load_checkpoint(out).taught[0]["conf"] == design.after.conf


def test_a_design_point_applies_to_that_designs_frames_only(tmp_path: Path) -> None:
    boards = sorted((SAMPLES / "deeppcb").glob("*.jpg"))[:2]
    frames = [(load_image_gray(b), load_image_gray(SAMPLES / "golden" / b.name)) for b in boards]
    start = torch.load(DEFAULT_REFERENCE_WEIGHTS, map_location="cpu", weights_only=True)
    weights = tmp_path / "strict_a.pt"
    torch.save(start | {"taught": [{"name": boards[0].name, "key": pixel_fingerprint(frames[0][1]), "conf": 0.9999}]}, weights)

    def calls(path: Path) -> list[int]:
        with Inspector.load(path, reference=SAMPLES / "golden", device="cpu", threads=1, monitor=False) as inspector:
            return [len(inspector.inspect(image, name=b.name).detections) for b, (image, _) in zip(boards, frames)]

    plain, strict = calls(DEFAULT_REFERENCE_WEIGHTS), calls(weights)
    assert plain[0] > 0 and plain[1] > 0
    assert strict == [0, plain[1]]  # design A at its own (impossible) point; design B at the weights' point


def test_a_teach_that_cannot_teach_writes_nothing_and_exits_non_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Weights that catch none of the painted defects at any point allowed (the newcomer's 0% -> 0%), and no time to
    fine-tune: exit 2, one line with what was measured, no weights written."""
    _photo_golden(tmp_path / "g.png")
    missed = [DesignPoint(0.2, 0.0, 0.0)]
    monkeypatch.setattr(teach_module, "_measure", lambda weights, sets, designs: (missed, missed, NONE_REFUSED))
    args = ["teach", "--golden", str(tmp_path / "g.png"), "--out", str(tmp_path / "t.pt"), "--minutes", "1.5", "--held", "2"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "no design taught: at the calibrated points the weights catch 0% of the painted defects" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "t.pt").exists()


def test_teach_says_how_many_captures_were_refused_and_left_out_of_its_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 58: 8 of 24 clean captures and 2 of 8 painted boards were refused as hidden area, yet teach printed
    "100.0% ... on 24 defect-free and 8 painted line captures": its figures were over the rest, as if over all."""
    _photo_golden(tmp_path / "g.png")
    caught = [DesignPoint(0.2, 1.0, 0.0)]
    refused = {"clean_refused": 8, "held_refused": 2}
    monkeypatch.setattr(teach_module, "_measure", lambda weights, sets, designs: (caught, caught, refused))
    args = ["teach", "--golden", str(tmp_path / "g.png"), "--out", str(tmp_path / "t.pt"), "--minutes", "1.5", "--held", "2"]
    assert main(args) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("teach: ")]
    clean, held = (int(n) for n in re.search(r"\(8 of (\d+) and 2 of (\d+) captures refused", line).groups())
    assert clean >= 12 and held >= 2
    assert line.endswith(
        f"on {clean - 8} of {clean} defect-free and {held - 2} of {held} painted line captures (8 of {clean} and 2 of {held} captures "
        "refused, not inspected: the figures below leave them out; the reasons are in the warnings above):"
    )


def test_teach_refuses_what_it_cannot_teach_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _photo_golden(tmp_path / "g.png")
    cv2.imwrite(str(tmp_path / "tiny.png"), np.zeros((32, 32), np.uint8))
    out = ["--out", str(tmp_path / "t.pt")]
    cases = [
        (["--golden", str(tmp_path / "missing")], "no golden image there"),
        (["--golden", str(tmp_path / "g.png"), "--weights", str(DEFAULT_WEIGHTS)], "needs a golden-template model"),
        (["--golden", str(tmp_path / "tiny.png")], "32x32 px golden image is too small to teach"),
    ] + [(["--golden", str(tmp_path / "g.png"), "--minutes", m], "--minutes must be a finite number") for m in ("0.5", "nan", "inf")]
    for args, words in cases:
        assert main(["teach", *args, *out]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / "t_teach").exists()  # refused before any board was written
    assert not (tmp_path / "t.pt").exists()


def test_two_teach_runs_on_one_out_the_second_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real second process holds the --out lock (as a running teach does); this teach gets one line, exit 2."""
    _photo_golden(tmp_path / "g.png")
    out = tmp_path / "t.pt"
    holder = (
        "import sys, time; from pathlib import Path; from defect_detector.inspect.run_guard import OutputLock; "
        f"OutputLock(Path({str(out.with_name('.t.pt.lock'))!r}), Path({str(out)!r}), 'it', command='teach'); "
        "print('held', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert main(["teach", "--golden", str(tmp_path / "g.png"), "--out", str(out), "--minutes", "1.5"]) == 2
        assert "another teach run (pid" in capsys.readouterr().err
    finally:
        proc.kill()
        proc.wait()
    assert not out.exists()
