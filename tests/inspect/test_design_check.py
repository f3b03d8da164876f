"""A golden image unlike the model's training images (issue 34 item 4): one warning per golden image, naming the
``teach`` command; every frame of it carries the warning in its record; never a refusal; weights without a domain
warn about nothing."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from defect_detector.core.io import atomic_torch_save
from defect_detector.data.images import load_image_gray, pixel_fingerprint
from defect_detector.engine.domain import fit_domain
from defect_detector.inspect.inspector import Inspector
from defect_detector.model.checkpoint import DEFAULT_REFERENCE_WEIGHTS, strip_checkpoint
from defect_detector.monitor.domain import design_stats

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def _photograph(golden: np.ndarray, seed: int = 0) -> np.ndarray:
    """A photograph-like golden image: substrate 30, copper 57, pads 140, soft edges, texture and noise (sigma 3)."""
    rng = np.random.default_rng(seed)
    copper = (golden < 128).astype(np.uint8)
    pads = cv2.morphologyEx(copper, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (15, 15)))
    image = np.where(copper > 0, 57.0, 30.0).astype(np.float32)
    image[pads > 0] = 140.0
    image = cv2.GaussianBlur(image, (0, 0), 1.2) + 3.0 * rng.normal(0, 1, golden.shape).astype(np.float32)
    return np.clip(image, 0, 255).astype(np.uint8)


def _weights(tmp_path: Path, domain: dict | None) -> Path:
    """The bundled golden-template weights with ``domain`` (None: without one, as before v0.11)."""
    ckpt = torch.load(DEFAULT_REFERENCE_WEIGHTS, map_location="cpu", weights_only=True)
    ckpt.pop("domain", None)
    out = tmp_path / ("photo_domain.pt" if domain else "no_domain.pt")
    atomic_torch_save(strip_checkpoint(ckpt, domain=domain), out)
    return out


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "looks unlike the model's training images" in r.getMessage()]


def test_the_bundled_model_warns_once_per_photographed_golden_image_and_not_on_deeppcb(caplog: pytest.LogCaptureFixture) -> None:
    boards = sorted((SAMPLES / "deeppcb").glob("*.jpg"))[:2]
    frames = [load_image_gray(b) for b in boards]
    goldens = [load_image_gray(SAMPLES / "golden" / b.name) for b in boards]
    photo = _photograph(goldens[0])
    caplog.set_level(logging.WARNING, logger="defect_detector.inspect")
    with Inspector.load(DEFAULT_REFERENCE_WEIGHTS, reference=SAMPLES / "golden", device="cpu", threads=1) as inspector:
        assert inspector.design_check.domain is not None  # the bundled weights carry DeepPCB's design domain
        known = [inspector.inspect(f, name=b.name) for f, b in zip(frames, boards)]
        unlike = [inspector.inspect(frames[0], name=f"{i}.jpg", reference=photo) for i in range(3)]
    assert [r.design_warning for r in known] == [None, None] and all(r.verdict != "not_inspected" for r in known)
    assert len(_warnings(caplog)) == 1  # one per golden image, not one per frame
    text = unlike[0].design_warning
    assert text is not None and all(r.design_warning == text for r in unlike)
    assert "this design looks unlike the model's training images (" in text and "training at least" in text
    assert f"teach it: defect-detector teach --golden GOLDEN_IMAGE --weights {DEFAULT_REFERENCE_WEIGHTS} --out design_taught.pt" in text


def test_a_warning_is_never_a_refusal_and_every_record_carries_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Weights whose domain holds only photographs call DeepPCB's golden image unlike: the frames are inspected as the
    same weights without a domain inspect them, and each frame's JSON record carries the warning."""
    board = sorted((SAMPLES / "deeppcb").glob("*.jpg"))[0]
    golden = SAMPLES / "golden" / board.name
    source = tmp_path / "frames"
    source.mkdir()
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        (source / name).write_bytes(board.read_bytes())
    photos = fit_domain(_photograph(load_image_gray(p), i) for i, p in enumerate(sorted((SAMPLES / "calib").glob("*_temp.jpg"))))
    runs = {}
    for domain in (photos.to_dict(), None):
        weights = _weights(tmp_path, domain)
        caplog.clear()
        caplog.set_level(logging.WARNING, logger="defect_detector.inspect")
        with Inspector.load(weights, reference=golden, device="cpu", threads=1) as inspector:
            inspector.run(str(source), save_json=str(tmp_path / f"{weights.stem}.json"))
        runs[weights.stem] = (json.loads((tmp_path / f"{weights.stem}.json").read_text()), _warnings(caplog))
    records, warned = runs["photo_domain"]
    plain, silent = runs["no_domain"]
    assert len(warned) == 1 and silent == []
    assert [r["design_warning"] for r in plain] == [None] * 3
    text = records[0]["design_warning"]
    assert text.startswith(f"{golden.name}: this design looks unlike the model's training images")
    assert f"--golden {golden} --weights {tmp_path / 'photo_domain.pt'} --out {golden.stem}_taught.pt" in text
    assert all(r["design_warning"] == text for r in records)
    without = [{k: v for k, v in r.items() if k not in ("design_warning", "weights")} for r in records]
    assert without == [{k: v for k, v in r.items() if k not in ("design_warning", "weights")} for r in plain]  # as before
    assert all(r["verdict"] == "fail" for r in records)


def test_a_taught_golden_image_is_never_warned_about_and_its_frames_say_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Weights whose ``taught`` list (what ``teach`` writes) holds a golden image's pixel fingerprint: its frames are
    marked taught and carry no warning, even where the domain calls the image unlike; another golden image's frames are
    not taught (and warned about, the domain calling it unlike). Without a domain, the taught mark stays."""
    boards = sorted((SAMPLES / "deeppcb").glob("*.jpg"))[:2]
    source = tmp_path / "frames"
    source.mkdir()
    for board in boards:
        (source / board.name).write_bytes(board.read_bytes())
    taught_golden = SAMPLES / "golden" / boards[0].name
    taught = [{"name": taught_golden.name, "key": pixel_fingerprint(load_image_gray(taught_golden))}]
    photos = fit_domain(_photograph(load_image_gray(p), i) for i, p in enumerate(sorted((SAMPLES / "calib").glob("*_temp.jpg"))))
    assert photos.is_unlike(design_stats(load_image_gray(taught_golden)))  # untaught, it would be warned about
    for domain in (photos.to_dict(), None):
        ckpt = torch.load(_weights(tmp_path, domain), map_location="cpu", weights_only=True)
        weights = tmp_path / f"taught_{domain is not None}.pt"
        torch.save(ckpt | {"taught": taught}, weights)
        caplog.clear()
        caplog.set_level(logging.WARNING, logger="defect_detector.inspect")
        with Inspector.load(weights, reference=SAMPLES / "golden", device="cpu", threads=1) as inspector:
            inspector.run(str(source), save_json=str(tmp_path / "records.json"))
            given = inspector.inspect(load_image_gray(boards[0]), name="given.jpg", reference=load_image_gray(taught_golden))
        records = {r["file_name"]: r for r in json.loads((tmp_path / "records.json").read_text())}
        assert records[boards[0].name]["design_taught"] is True and records[boards[0].name]["design_warning"] is None
        assert given.design_taught is True and given.design_warning is None
        assert records[boards[1].name]["design_taught"] is False
        warned = _warnings(caplog)
        if domain is not None:
            assert records[boards[1].name]["design_warning"].startswith(f"{boards[1].name}: this design looks unlike")
            assert len(warned) == 1 and boards[0].name not in warned[0]
        else:
            assert records[boards[1].name]["design_warning"] is None and warned == []


def test_an_untaught_look_with_no_call_is_pass_suspect_and_names_the_covering_weights_first(tmp_path: Path) -> None:
    """Issue 42 item 6: a photographed board inspected with DeepPCB's weights passed (exit 0) with one warning line.
    Now its frames with no call are ``pass_suspect``, counted apart in the summary, and the warning names the bundled
    photograph weights before ``teach``; a DeepPCB board with no call stays a plain ``pass``."""
    from defect_detector.model.checkpoint import PHOTO_REFERENCE_WEIGHTS

    golden = load_image_gray(SAMPLES / "golden" / sorted((SAMPLES / "deeppcb").glob("*.jpg"))[0].name)
    photo = _photograph(golden)
    source = tmp_path / "frames"
    source.mkdir()
    assert cv2.imwrite(str(source / "photo.png"), photo)
    assert cv2.imwrite(str(tmp_path / "golden.png"), photo)
    with Inspector.load(DEFAULT_REFERENCE_WEIGHTS, reference=tmp_path / "golden.png", device="cpu", threads=1) as inspector:
        (record,) = [inspector.inspect(photo, name="again.png")]
        summary = inspector.run(str(source), save_json=str(tmp_path / "out.json"))
        clean = inspector.inspect(golden, name="deeppcb.png", reference=golden)
    assert len(record.detections) == 0 and record.verdict == "pass_suspect"  # the board is its own golden image
    assert record.reason.startswith("untaught look: no call, but golden.png: this design looks unlike")
    text = record.design_warning
    assert text.index(f"--weights {PHOTO_REFERENCE_WEIGHTS}") < text.index("teach it:")
    assert summary["verdicts"]["pass_suspect"] == 1 and summary["pass_suspect"] == {"untaught look": 1}
    assert json.loads((tmp_path / "out.json").read_text())[0]["verdict"] == "pass_suspect"
    assert clean.design_warning is None and len(clean.detections) == 0 and clean.verdict == "pass"


def test_with_no_weights_named_each_design_is_inspected_by_the_bundled_weights_that_cover_its_look(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 42 item 5: plain ``predict --reference`` on a photographed design used DeepPCB's weights and was blind.
    With no weights named, the photographed design goes to ``photo_ref.pt`` (no warning: its look is covered; the
    log says where it went, and does not tell the user to name the weights it went to), the DeepPCB board to
    ``deeppcb_ref.pt``; each record and the summary name the weights."""
    from defect_detector.model.checkpoint import PHOTO_REFERENCE_WEIGHTS

    golden = load_image_gray(SAMPLES / "golden" / sorted((SAMPLES / "deeppcb").glob("*.jpg"))[0].name)
    photo = _photograph(golden)
    source = tmp_path / "frames"
    source.mkdir()
    assert cv2.imwrite(str(source / "photo.png"), photo) and cv2.imwrite(str(tmp_path / "golden.png"), photo)
    caplog.set_level(logging.INFO, logger="defect_detector")
    with Inspector.load(reference=tmp_path / "golden.png", device="cpu", threads=1, monitor=False) as inspector:
        record = inspector.inspect(photo, name="again.png")
        deeppcb = inspector.inspect(golden, name="deeppcb.png", reference=golden)
        summary = inspector.run(str(source), save_json=str(tmp_path / "out.json"))
        assert list(inspector.siblings) == [PHOTO_REFERENCE_WEIGHTS]
    assert record.weights == "photo_ref.pt" and record.design_warning is None and record.verdict == "pass"
    assert deeppcb.weights == "deeppcb_ref.pt" and deeppcb.verdict == "pass"
    assert summary["weights_used"] == {"photo_ref.pt": 1}
    assert not any("looks unlike the model's training images" in r.getMessage() for r in caplog.records)
    assert any("are inspected with it" in r.getMessage() and "photo_ref.pt" in r.getMessage() for r in caplog.records)
    assert json.loads((tmp_path / "out.json").read_text())[0]["weights"] == "photo_ref.pt"


def test_a_look_neither_domain_covers_goes_to_the_nearer_bundled_weights() -> None:
    """A photographed look unlike both bundled domains (rendered in the ``holdout`` family, never trained on) is still
    nearer the photograph weights' looks than DeepPCB's binarized scans: the warning and the choice name them."""
    from defect_detector.inspect.design_check import _bundled_domain, covering_weights
    from defect_detector.looks.render import render_pair, sample_look
    from defect_detector.model.checkpoint import PHOTO_REFERENCE_WEIGHTS

    layout = load_image_gray(SAMPLES / "golden" / sorted((SAMPLES / "deeppcb").glob("*.jpg"))[1].name)
    deeppcb = _bundled_domain(DEFAULT_REFERENCE_WEIGHTS)
    photo_domain = _bundled_domain(PHOTO_REFERENCE_WEIGHTS)
    for seed in range(4):
        rng = np.random.default_rng(seed)
        golden = render_pair(layout, layout, sample_look(rng, "holdout"), rng)[1]
        stats = design_stats(golden)
        assert deeppcb.is_unlike(stats)
        assert covering_weights(stats, DEFAULT_REFERENCE_WEIGHTS, 2, deeppcb) == PHOTO_REFERENCE_WEIGHTS
        assert photo_domain.distance(stats) / photo_domain.threshold < deeppcb.distance(stats) / deeppcb.threshold
    binarized = design_stats(layout)
    assert covering_weights(binarized, DEFAULT_REFERENCE_WEIGHTS, 2, deeppcb) is None  # nothing nearer than its own


def test_the_alerts_of_a_design_routed_to_other_bundled_weights_reach_the_sinks_the_user_named(tmp_path: Path) -> None:
    """Issue 58 item 1: ``predict --reference photo.png --alerts alerts.jsonl`` with no weights named routed the
    photographed design to ``photo_ref.pt``, whose inspector had sinks of its own: the log said ``critical drift``, the
    alerts file stayed empty and the webhook heard nothing. The routed inspector's events go to the sinks named."""
    from defect_detector.model.checkpoint import PHOTO_REFERENCE_WEIGHTS

    golden = load_image_gray(SAMPLES / "golden" / sorted((SAMPLES / "deeppcb").glob("*.jpg"))[0].name)
    photo = _photograph(golden)
    assert cv2.imwrite(str(tmp_path / "golden.png"), photo)
    alerts = tmp_path / "alerts.jsonl"
    with Inspector.load(reference=tmp_path / "golden.png", device="cpu", threads=1, alerts=alerts) as inspector:
        assert inspector.inspect(photo, name="board.png").weights == "photo_ref.pt"
        dark = inspector.inspect(np.zeros_like(photo), name="dark.png")  # the camera sees nothing: a critical alert at once
        assert list(inspector.siblings) == [PHOTO_REFERENCE_WEIGHTS] and dark.verdict == "not_inspected"
        assert dark.weights == "photo_ref.pt" and [e.event for e in dark.events] == ["drift"]
    events = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert [(e["event"], e["severity"], e["frame"]) for e in events] == [("drift", "critical", 1)]


def test_deeppcb_boards_on_a_grey_frame_and_a_moved_golden_image_keep_the_deeppcb_weights(tmp_path: Path) -> None:
    """Issue 56 item 4: a DeepPCB board on a mid-grey 2048x1536 frame was routed to ``photo_ref.pt``, the grey round
    it setting the look. The look is now read on the board's own area (``core/board_area.py``): it stays with
    ``deeppcb_ref.pt``, unwarned, and so does its golden image placed 9 px and 5 px away on its own grey frame."""
    name = sorted((SAMPLES / "deeppcb").glob("*.jpg"))[0].name
    board, golden = load_image_gray(SAMPLES / "deeppcb" / name), load_image_gray(SAMPLES / "golden" / name)
    frame, reference = np.full((1536, 2048), 128, np.uint8), np.full((1536, 2048), 128, np.uint8)
    frame[400:1040, 700:1340] = board
    reference[405:1045, 709:1349] = golden
    assert cv2.imwrite(str(tmp_path / "golden.png"), reference)
    with Inspector.load(reference=tmp_path / "golden.png", device="cpu", threads=1, monitor=False) as inspector:
        record = inspector.inspect(frame, name="grey.png")
        assert not inspector.siblings
    assert record.weights == "deeppcb_ref.pt" and record.design_warning is None
    assert record.verdict.value in ("pass", "fail") and record.conf == inspector.pipeline.conf


def test_a_frame_routed_by_its_design_looks_its_golden_image_up_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 57: routing a frame to the bundled weights of its look found its design, and the prepare stage looked it
    up again. The design found for routing is the one the frame is inspected against: one lookup per frame."""
    from defect_detector.inspect.references import References

    names = sorted((SAMPLES / "deeppcb").glob("*.jpg"))[:3]
    lookups: list[str] = []
    lookup = References.lookup
    monkeypatch.setattr(References, "lookup", lambda self, name: lookups.append(name) or lookup(self, name))
    with Inspector.load(reference=SAMPLES / "golden", device="cpu", threads=1, monitor=False) as inspector:
        records = [inspector.inspect(load_image_gray(p), name=p.name) for p in names]
    assert [r.weights for r in records] == ["deeppcb_ref.pt"] * 3 and all(r.golden_name == p.name for r, p in zip(records, names))
    assert lookups == [p.name for p in names]
