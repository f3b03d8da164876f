"""`teach`: calibration first (jobs/teach.py, cli/teach.py): a design's own point, for that design only."""

import json
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
from defect_detector.inspect.inspector import Inspector
from defect_detector.inspect.runtime import Runtime
from defect_detector.jobs import teach as teach_module
from defect_detector.jobs.teach import LEAST_CLEAN, LEAST_HELD, fitted, teach
from defect_detector.jobs.teach_point import DesignPoint, DesignScores
from defect_detector.jobs.teach_sets import clean_pairs, read_designs
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


def test_a_design_the_weights_already_inspect_is_taught_with_nothing_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 56 item 5: ``teach --golden`` of a DeepPCB golden image onto ``deeppcb_ref.pt`` exited 2 ("the weights catch
    31% of the painted defects") where the weights catch 99% of that group's real defects. Its look lies within the
    weights' domain and its captures (thresholded, as its line's) draw no false call: taught at the weights' own
    point, weights unchanged, well within the time. Its good boards (binarized line captures) give it a tolerance map
    and a held-out point, never below the weights' own."""
    out = tmp_path / "deeppcb_taught.pt"
    _good_boards(tmp_path / "good", load_image_gray(SAMPLES / "golden" / "92000000_test.jpg"), 5)
    args = ["--golden", str(SAMPLES / "golden" / "92000000_test.jpg"), "--weights", str(DEFAULT_REFERENCE_WEIGHTS)]
    args += ["--good", str(tmp_path / "good")]
    assert main(["teach", *args, "--out", str(out), "--minutes", "1.5", "--held", "2", "--threads", "2"]) == 0
    printed = capsys.readouterr()
    assert "92000000_test.jpg: taught at the weights' own point, nothing needed changing" in printed.out
    assert "good boards: 5 inspected" in printed.out and "the design's point: score >= 0.400 (kept" in printed.out
    assert "not inspected" not in printed.err  # none of its own captures refused
    start = torch.load(DEFAULT_REFERENCE_WEIGHTS, map_location="cpu", weights_only=True)
    taught = torch.load(out, map_location="cpu", weights_only=True)
    assert all(torch.equal(taught["model"][k], v) for k, v in start.get("ema", start["model"]).items())
    own = Runtime.load(DEFAULT_REFERENCE_WEIGHTS, device="cpu").operating_point["conf"]
    key = pixel_fingerprint(load_image_gray(SAMPLES / "golden" / "92000000_test.jpg"))
    (entry,) = taught["taught"]
    assert (entry["name"], entry["key"], entry["conf"], entry["tolerance_radius"]) == ("92000000_test.jpg", key, own, 60.0)


def test_a_design_point_applies_to_that_designs_frames_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
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
    (tmp_path / "frames").mkdir()
    for board in boards:
        (tmp_path / "frames" / board.name).write_bytes(board.read_bytes())
    args = ["--reference", str(SAMPLES / "golden"), "--weights", str(weights), "--threads", "1"]
    assert main(["predict", str(tmp_path / "frames"), *args]) == 0
    printed = capsys.readouterr().out  # the header and the summary name each threshold that decided frames
    assert f"taught designs, each at its own point: {boards[0].name} score >= 0.9999" in printed
    assert "weights strict_a.pt x1 at score >= 0.4, strict_a.pt x1 at score >= 0.9999" in printed


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
    small = tmp_path / "small.png"
    cv2.imwrite(str(small), np.full((10, 10), 255, np.uint8))
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


def _good_boards(folder: Path, golden: np.ndarray, n: int) -> None:
    """``n`` defect-free line captures of ``golden`` (moved, lit, blurred and noisy as teach's own) as PNGs in ``folder``."""
    folder.mkdir()
    cv2.imwrite(str(folder / "golden_source.png"), golden)
    (design,) = read_designs([folder / "golden_source.png"])
    (folder / "golden_source.png").unlink()
    for name, board, *_ in clean_pairs([design], n, np.random.default_rng(3), tag="good"):
        cv2.imwrite(str(folder / f"{name}.png"), board)


def test_teach_good_builds_the_golden_image_learns_a_tolerance_map_and_keeps_the_other_designs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``teach --good DIR`` without ``--golden``: the golden image is built from the good boards and written for
    predict; the good boards are inspected as predict does and their calls' places stored in the design's entry (with
    the leave-one-out count printed); the design taught before onto the starting weights keeps its entry. The
    calibration is stubbed (its own test above runs it), so the good boards' pass is what runs."""
    _good_boards(tmp_path / "good", _photo_golden(tmp_path / "source.png"), 6)
    other = {"name": "other.png", "key": "image:other", "conf": 0.5, "tolerance": [[10.0, 20.0, 0.3]]}
    other |= {"tolerance_radius": 60.0, "tolerance_margin": 0.03}
    start = tmp_path / "taught_before.pt"
    torch.save(torch.load(PHOTO_REFERENCE_WEIGHTS, map_location="cpu", weights_only=True) | {"taught": [other]}, start)
    painted = DesignScores(np.zeros(0), 12, np.array([0.97, 0.96]), np.array([True, True]), 2)  # caught at any point
    point = [DesignPoint(0.2, 1.0, 0.0, painted)]
    monkeypatch.setattr(teach_module, "_measure", lambda weights, sets, designs: (point, point, NONE_REFUSED))
    out = tmp_path / "taught.pt"
    args = ["teach", "--good", str(tmp_path / "good"), "--weights", str(start), "--out", str(out), "--minutes", "1.5", "--held", "2"]
    assert main([*args, "--threads", "2"]) == 0
    printed = capsys.readouterr().out
    golden = tmp_path / "taught_golden.png"
    assert f"golden image built from the good boards (golden build: their median): {golden}" in printed
    good = re.search(r"good boards: (\d+) inspected.*tolerance map: (\d+) places? \(radius 60 px of the golden image, margin 0.03", printed)
    assert good is not None and int(good.group(1)) >= 5
    held = re.search(r"the design's point: score >= ([\d.]+) \((kept|raised from 0.200): at most 0.1 false calls per good", printed)
    assert held is not None and float(held.group(1)) >= 0.2
    counts = re.search(r"at score >= ([\d.]+): ([\d.]+) without the map, ([\d.]+) with the map learnt on the other good boards", printed)
    assert counts is not None and counts.group(1) == held.group(1) and float(counts.group(3)) <= min(0.1, float(counts.group(2)))
    painted = re.search(r"painted defects on the good boards: (\d+) of (\d+) \([\d.]+%\) caught at score >= ([\d.]+), each", printed)
    assert painted is not None and int(painted.group(2)) >= 10 and painted.group(3) == held.group(1)
    capture = re.search(r"capture range: (within the weights' limits|the design's own limits (.*) \(its good boards')", printed)
    assert capture is not None  # jobs/teach_limits.py: the range of capture the good boards showed
    entries = torch.load(out, map_location="cpu", weights_only=True)["taught"]
    assert entries[0] == other  # the design taught before, kept as it was
    mine = entries[1]
    assert mine["key"] == pixel_fingerprint(load_image_gray(golden)) and mine["name"] == golden.name
    assert f"{mine['conf']:.3f}" == held.group(1)
    assert len(mine["tolerance"]) == int(good.group(2)) and (mine["tolerance_radius"], mine["tolerance_margin"]) == (60.0, 0.03)
    assert all(0.05 <= score <= 1.0 for _, _, score in mine["tolerance"])
    assert ("limits" in mine) == (capture.group(2) is not None)  # the limits it raised, stored with the design
    assert f"drift level: the design's own, read on {good.group(1)} good boards" in printed  # monitor/design_drift.py
    assert mine["drift"]["boards"] == int(good.group(1)) and len(mine["drift"]["mean"]) == len(mine["drift"]["layers"])
    assert load_checkpoint(out).taught == entries
    assert set(Runtime.load(out, device="cpu").design_tolerances) == {"image:other", mine["key"]}
    assert set(Runtime.load(out, device="cpu").design_drifts) == {mine["key"]}


def test_teach_good_refuses_too_few_boards_and_several_golden_images_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "goldens").mkdir()
    golden = _photo_golden(tmp_path / "goldens" / "g.png")
    cv2.imwrite(str(tmp_path / "goldens" / "h.png"), golden)
    _good_boards(tmp_path / "few", golden, 3)
    _good_boards(tmp_path / "good", golden, 5)
    marked = tmp_path / "marked.png"  # the golden image carrying a defect its good boards lack: golden verify stops teach
    cv2.imwrite(str(marked), cv2.circle(golden.copy(), (120, 90), 9, 255 - int(golden[90, 120]), -1))
    small = tmp_path / "small.png"
    cv2.imwrite(str(small), np.full((10, 10), 255, np.uint8))
    out = ["--out", str(tmp_path / "t.pt")]
    cases = [
        ([], "teach needs --golden (the design's golden image), --good DIR (its good boards), or both"),
        (["--good", str(tmp_path / "few")], "3 good board(s); --good needs 5 or more good boards of the design"),
        (["--good", str(tmp_path / "good"), "--golden", str(tmp_path / "goldens")], "--good teaches one design: give --golden its one"),
        (["--good", str(tmp_path / "good"), "--golden", str(marked)], "golden image differs from what 5 good boards agree on in 1 place"),
        (["--golden", str(tmp_path / "goldens" / "g.png"), "--area", str(small)], "the area mask is 10x10 px, its golden image 256x256"),
        (["--golden", str(tmp_path / "goldens"), "--area", str(small)], "--area is one design's mask: give --golden its one"),
    ]
    for args, words in cases:
        assert main(["teach", *args, *out]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / "t_teach").exists() and not (tmp_path / "t_golden.png").exists()
    assert not (tmp_path / "t.pt").exists()


def test_the_fine_tune_trains_on_the_good_boards_too(tmp_path: Path) -> None:
    """Issue 56 item 2: with good boards, the fine-tune's training set holds them (as the line captured them, with the
    design's golden image) beside the clean captures and the rehearsal boards; a board of another size is left out."""
    golden = _photo_golden(tmp_path / "g.png")
    (design,) = read_designs([tmp_path / "g.png"])
    boards = [(f"b{i}.png", np.roll(golden, i, axis=1)) for i in range(5)] + [("small.png", golden[:200])]
    sets, pairs = teach_module._tune_sets([design], {}, tmp_path / "work", 0, boards)
    names = [image["file_name"] for image in json.loads(sets["train"].read_text())["images"]]
    good = [n for n in names if "_good" in n]
    assert len(good) == 5 and pairs == len(names) and len(names) > 5 + 24


def test_the_captures_teach_writes_are_cut_to_what_the_time_left_can_inspect() -> None:
    """``fitted``: as many as asked when they fit, cut in proportion when not, never below the least (issue 56 item 5:
    on a loaded machine ``teach --good --minutes 2`` wrote 24 + 8 captures after the good boards' pass and ran 2.6-2.8
    minutes; the count now follows the inspection time the good boards' pass measured)."""
    assert fitted(24, 8, 40) == (24, 8)
    assert fitted(24, 8, 16) == (12, 4)
    assert fitted(24, 8, 0) == (LEAST_CLEAN, LEAST_HELD)
