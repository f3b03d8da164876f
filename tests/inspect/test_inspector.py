"""The inspection path (``Inspector``) and ``defect-detector predict`` over it: JSON in original pixels, annotated
outputs, video/JSONL, per-frame results, drift alerts by default."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import cv2
import numpy as np
import pytest
from pipeline_helpers import detect
from small_checkpoint import write_small_checkpoint

from defect_detector.cli.main import main
from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.core.refusal import RefusalKind
from defect_detector.data.synth import generate_board, generate_board_pair
from defect_detector.inspect.inspector import Inspection, Inspector
from defect_detector.inspect.pipeline import Pipeline
from defect_detector.inspect.runtime import Runtime

pytestmark = pytest.mark.usefixtures("one_thread")

IMGSZ = 128
H, W = 1536, 2048


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_checkpoint(tmp_path_factory.mktemp("ckpt") / "small.pt", IMGSZ)


@pytest.fixture(scope="module")
def boards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("boards")
    for i in range(2):
        assert cv2.imwrite(str(folder / f"board_{i}.png"), generate_board(H, W, np.random.default_rng(i))[0])
    (folder / "broken.png").write_bytes(b"not an image")
    (folder / "notes.txt").write_text("ignored")
    return folder


def test_predict_folder_writes_original_pixel_json_and_annotations(
    checkpoint: Path, boards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json, out_dir = tmp_path / "pred.json", tmp_path / "annotated"
    argv = [
        "predict",
        str(boards),
        "--weights",
        str(checkpoint),
        "--save-json",
        str(out_json),
        "--save-dir",
        str(out_dir),
        "--threads",
        "1",
        "--batch",
        "2",
        "--device",
        "cpu",
    ]
    assert main(argv) == 3  # broken.png was not inspected: exit 3 unless --allow-skips
    printed = capsys.readouterr()
    assert "frames 3: pass 0, fail 2, NOT INSPECTED 1 (unreadable x1)" in printed.out
    assert "1 of 3 frames were NOT INSPECTED (unreadable x1); --allow-skips accepts that" in printed.err
    assert "to score mAP (pycocotools) keep the whole ranking: --conf 0.001" in printed.out
    assert main([*argv, "--allow-skips"]) == 0

    frames = json.loads(out_json.read_text())
    assert [(f["file_name"], f["verdict"]) for f in frames] == [
        ("board_0.png", "fail"),
        ("board_1.png", "fail"),
        ("broken.png", "not_inspected"),
    ]
    assert "corrupt or unsupported image" in frames[2]["reason"] and frames[2]["calls"] == [] and frames[0]["reason"] is None
    records = [{"file_name": f["file_name"], **call} for f in frames for call in f["calls"]]
    assert records, "the test model should produce detections"
    for r in records:
        x, y, w, h = r["bbox"]
        assert set(r) == {"file_name", "category_name", "bbox", "score"}
        assert r["category_name"] in DEEPPCB_CLASSES and r["score"] >= 0.25
        assert 0 <= x and 0 <= y and w >= 0 and h >= 0 and x + w <= W + 0.01 and y + h <= H + 0.01
    assert main([*argv, "--allow-skips", "--json-layout", "detections"]) == 0
    assert json.loads(out_json.read_text()) == records  # v0.8's flat list of calls

    runtime = Runtime.load(checkpoint, device="cpu")
    for name in ("board_0.png", "board_1.png"):
        image = cv2.imread(str(boards / name), cv2.IMREAD_GRAYSCALE)
        expected = detect(runtime, [image])[0]
        got = [r for r in records if r["file_name"] == name]
        assert len(got) == len(expected)
        boxes = np.array([r["bbox"] for r in got]).reshape(-1, 4)
        want = expected.boxes.numpy().copy()
        want[:, 2:] -= want[:, :2]
        np.testing.assert_allclose(boxes, want, atol=0.02)
        assert [r["category_name"] for r in got] == expected.names

        annotated = cv2.imread(str(out_dir / name), cv2.IMREAD_UNCHANGED)
        assert annotated.shape == (H, W, 3)
        assert (annotated.astype(int).max(axis=2) - annotated.min(axis=2)).max() > 100  # coloured boxes on a gray board
    stamped = cv2.imread(str(out_dir / "broken.png"), cv2.IMREAD_UNCHANGED)  # a placeholder stamped NOT INSPECTED
    assert stamped is not None and (stamped[:, :, 2].astype(int) - stamped[:, :, 1]).max() > 100


def test_predict_video_writes_frames_jsonl_and_mp4(checkpoint: Path, tmp_path: Path) -> None:
    video = tmp_path / "line.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 5.0, (320, 240))
    for i in range(4):
        writer.write(cv2.cvtColor(generate_board(240, 320, np.random.default_rng(i))[0], cv2.COLOR_GRAY2BGR))
    writer.release()
    out_json, out_dir = tmp_path / "video.json", tmp_path / "out"
    argv = ["predict", str(video), "--weights", str(checkpoint), "--save-json", str(out_json), "--save-dir", str(out_dir), "--conf", "0.2"]
    assert main(argv) == 0
    records = json.loads(out_json.read_text())
    assert [r["frame"] for r in records] == [0, 1, 2, 3] and all(r["file_name"] == "line.avi" for r in records)
    assert all(r["verdict"] in ("pass", "fail") and "timestamp" in r for r in records)
    lines = [json.loads(line) for line in (tmp_path / "video.jsonl").read_text().splitlines()]
    assert lines == records
    capture = cv2.VideoCapture(str(out_dir / "line.mp4"))
    assert capture.isOpened() and int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == 4
    ok, first = capture.read()
    stamp = {"pass": (0, 140, 0), "fail": (0, 0, 200)}[records[0]["verdict"]]  # each video frame stamped with its verdict
    corners = [first[y : y + 16, x : x + 30].astype(int) for y in (4, 240 - 20) for x in (4, 320 - 34)]
    assert ok and max((np.abs(c - np.array(stamp)).max(axis=2) < 60).mean() for c in corners) > 0.5


def test_on_result_and_max_frames(checkpoint: Path, boards: Path) -> None:
    seen: list[tuple[int, str, tuple[int, ...] | None]] = []

    def record(result: Inspection) -> None:
        shape = None if result.detections is None else tuple(result.detections.stats.shape)
        seen.append((result.frame.index, result.frame.file_name, shape))

    with Inspector.load(checkpoint, device="cpu") as inspector:
        summary = inspector.run(str(boards), max_frames=2, on_result=record)
        layers = len(inspector.runtime.layer_names)
    assert seen == [(0, "board_0.png", (layers, 2)), (1, "board_1.png", (layers, 2))]
    assert summary["frames"] == 2 and summary["processed"] == 2 and summary["skipped"] == 0
    assert set(summary["mean_ms"]) == {"decode", "preprocess", "model", "postprocess"}
    assert summary["drift_monitoring"] is False  # the test checkpoint carries no baseline


def test_predict_errors(checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", str(tmp_path / "missing_dir"), "--weights", str(checkpoint)]) == 2
    assert "no such file" in capsys.readouterr().err
    assert cv2.imwrite(str(tmp_path / "a.png"), generate_board(64, 64, np.random.default_rng(0))[0])  # a black frame is blank
    assert main(["predict", str(tmp_path), "--weights", str(tmp_path / "missing.pt")]) == 2
    assert "weights file not found" in capsys.readouterr().err
    assert main(["predict", str(tmp_path), "--weights", str(checkpoint), "--tta", "d4"]) == 2
    assert "unknown TTA mode 'd4'" in capsys.readouterr().err
    keep_all = ["--conf", "0.001", "--save-json", str(tmp_path / "p.json")]
    assert main(["predict", str(tmp_path), "--weights", str(checkpoint), "--tta", "flip2", *keep_all]) == 0
    printed = capsys.readouterr().out
    assert "2 model passes per frame (test-time augmentation flip2)" in printed and "to score mAP" not in printed
    with Inspector.load(checkpoint, device="cpu") as inspector, pytest.raises(ValueError, match="--batch"):
        inspector.run(str(tmp_path), batch=0)


REF_H, REF_W = 240, 320


@pytest.fixture(scope="module")
def reference_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_checkpoint(tmp_path_factory.mktemp("ref_ckpt") / "ref.pt", IMGSZ, in_channels=2)


def _shifted(image: np.ndarray, dx: float, dy: float) -> np.ndarray:
    matrix = np.float32([[1, 0, dx], [0, 1, dy]])
    return cv2.warpAffine(image, matrix, (image.shape[1], image.shape[0]), borderMode=cv2.BORDER_REPLICATE)


@pytest.fixture(scope="module")
def board_pairs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two frames, a golden folder holding each frame's reference (moved by a few pixels), and a third frame
    whose reference is another board."""
    root = tmp_path_factory.mktemp("pairs")
    frames, golden = root / "frames", root / "golden"
    frames.mkdir()
    golden.mkdir()
    for i in range(3):
        board = generate_board(REF_H, REF_W, np.random.default_rng(10 + i))[0]
        assert cv2.imwrite(str(frames / f"board_{i}.png"), board)
        ref = _shifted(board, 3.0, -2.0) if i < 2 else generate_board(REF_H, REF_W, np.random.default_rng(99))[0]
        assert cv2.imwrite(str(golden / f"board_{i}.png"), ref)
    assert cv2.imwrite(str(frames / "no_golden.png"), generate_board(REF_H, REF_W, np.random.default_rng(7))[0])
    return frames, golden


def test_predict_with_a_reference_folder_gives_original_pixels_and_skips_unmatched_frames(
    reference_checkpoint: Path, board_pairs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from defect_detector.align.register import register

    frames, golden = board_pairs
    out_json = tmp_path / "pred.json"
    argv = ["predict", str(frames), "--weights", str(reference_checkpoint), "--reference", str(golden), "--save-json", str(out_json),
            "--threads", "1", "--device", "cpu", "--conf", "0.25"]  # fmt: skip
    assert main(argv) == 3
    printed = capsys.readouterr().out
    assert "golden-template model" in printed
    assert "NOT INSPECTED 2 (" in printed
    assert "no reference x1" in printed and "reference does not match x1" in printed
    frames_out = json.loads(out_json.read_text())
    assert sorted(f["verdict"] for f in frames_out).count("not_inspected") == 2
    records = [{"file_name": f["file_name"], **c} for f in frames_out for c in f["calls"]]
    assert {r["file_name"] for r in records} == {"board_0.png", "board_1.png"}
    runtime = Runtime.load(reference_checkpoint, device="cpu")
    for name in ("board_0.png", "board_1.png"):
        frame = cv2.imread(str(frames / name), cv2.IMREAD_GRAYSCALE)
        warped, reg = register(cv2.imread(str(golden / name), cv2.IMREAD_GRAYSCALE), frame)
        assert reg.ok
        (want,) = detect(runtime, [frame], conf=0.25, references=[warped])
        got = np.array([r["bbox"] for r in records if r["file_name"] == name], np.float32).reshape(-1, 4)
        assert len(got) == len(want) > 0
        wx, wy = want.boxes[:, 0].numpy(), want.boxes[:, 1].numpy()
        np.testing.assert_allclose(np.sort(got[:, 0]), np.sort(wx), atol=0.02)  # same boxes, in the frame's own pixels
        np.testing.assert_allclose(np.sort(got[:, 1]), np.sort(wy), atol=0.02)
        assert (got[:, 0] >= 0).all() and (got[:, 0] + got[:, 2] <= REF_W + 0.01).all() and (got[:, 1] + got[:, 3] <= REF_H + 0.01).all()


def test_predict_with_one_golden_image_for_every_frame(
    reference_checkpoint: Path, board_pairs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    frames, golden = board_pairs
    single = tmp_path / "frames"
    single.mkdir()
    board = cv2.imread(str(frames / "board_0.png"), cv2.IMREAD_GRAYSCALE)
    for i, (dx, dy) in enumerate(((0.0, 0.0), (1.5, -1.0), (-2.0, 2.5))):  # one fixture, the board placed slightly differently
        assert cv2.imwrite(str(single / f"shot_{i}.png"), _shifted(board, dx, dy))
    out_json = tmp_path / "pred.json"
    argv = ["predict", str(single), "--weights", str(reference_checkpoint), "--reference", str(golden / "board_0.png"),
            "--save-json", str(out_json), "--threads", "1", "--device", "cpu"]  # fmt: skip
    assert main(argv) == 0
    assert "NOT INSPECTED 0" in capsys.readouterr().out
    records = json.loads(out_json.read_text())
    assert [r["file_name"] for r in records] == [f"shot_{i}.png" for i in range(3)] and all(r["calls"] for r in records)


def test_reference_flag_must_match_the_model(
    checkpoint: Path, reference_checkpoint: Path, board_pairs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    frames, golden = board_pairs
    assert main(["predict", str(frames), "--weights", str(checkpoint), "--reference", str(golden), "--device", "cpu"]) == 2
    assert "is a single-image model: --reference needs a golden-template model" in capsys.readouterr().err
    assert main(["predict", str(frames), "--weights", str(reference_checkpoint), "--device", "cpu"]) == 2
    assert "is a golden-template model: give each frame's reference with --reference REF" in capsys.readouterr().err
    assert main(["predict", str(frames), "--weights", str(reference_checkpoint), "--reference", "nowhere", "--device", "cpu"]) == 2
    assert "nowhere: reference image or folder not found" in capsys.readouterr().err


def _blurred_samples(folder: Path, n: int) -> Path:
    """``n`` frames of the bundled sample boards seen through a defocused lens (sigma 2)."""
    from defect_detector.data.images import load_image_gray
    from defect_detector.monitor.faults import defocus

    boards = sorted((Path(__file__).resolve().parents[2] / "data" / "samples" / "deeppcb").glob("*.jpg"))
    folder.mkdir(parents=True)
    for i in range(n):
        assert cv2.imwrite(str(folder / f"frame_{i:03d}.png"), defocus(load_image_gray(boards[i % len(boards)]), 2.0))
    return folder


def test_plain_predict_with_the_bundled_model_monitors_drift_and_writes_alerts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    frames = _blurred_samples(tmp_path / "blurred", 24)
    with caplog.at_level("WARNING", logger="defect_detector.monitor"):
        assert main(["predict", str(frames), "--device", "cpu"]) == 0  # plain predict: the alert is logged
    assert any(" drift at frame " in r.getMessage() and "lens dirty" in r.getMessage() for r in caplog.records)
    assert "drift alerts 1" in capsys.readouterr().out
    alerts = tmp_path / "alerts.jsonl"
    assert main(["predict", str(frames), "--device", "cpu", "--alerts", str(alerts)]) == 0
    printed = capsys.readouterr()
    assert "one model pass per frame; drift monitoring on (baseline from the weights)" in printed.out
    events = [json.loads(line) for line in alerts.read_text().splitlines()]
    drift = [e for e in events if e["event"] == "drift"]
    assert len(drift) == 1 and drift[0]["frame"] < 24 and drift[0]["cause"] == "defocus"
    assert "lens dirty or out of focus" in drift[0]["reason"]
    assert main(["predict", str(frames), "--device", "cpu", "--no-monitor"]) == 0
    assert "drift monitoring off" in capsys.readouterr().out
    assert main(["predict", str(frames), "--device", "cpu", "--no-monitor", "--alerts", str(alerts)]) == 2
    assert "--no-monitor" in capsys.readouterr().err


def test_inspector_runs_a_folder_end_to_end_with_drift_events(checkpoint: Path, boards: Path, tmp_path: Path) -> None:
    from defect_detector.core.config import MonitorConfig
    from defect_detector.monitor.baseline import calibrate
    from defect_detector.monitor.faults import lighting_drop

    clean = [generate_board(240, 320, np.random.default_rng(50 + i))[0] for i in range(12)]
    runtime = Runtime.load(checkpoint, device="cpu")
    baseline = calibrate([d.stats for d in detect(runtime, clean)], runtime.layer_names, imgsz=runtime.imgsz)
    baseline.save(tmp_path / "baseline.json")
    stream = tmp_path / "stream"
    stream.mkdir()
    for i in range(30):  # 12 clean frames, then the light drops for 18
        image = clean[i % 12] if i < 12 else lighting_drop(clean[i % 12], 0.2)
        assert cv2.imwrite(str(stream / f"{i:03d}.png"), image)
    cfg = MonitorConfig(window=2, reference=4, debounce=2, recover=2)
    alerts = tmp_path / "alerts.jsonl"
    seen: list[Inspection] = []
    with Inspector.load(checkpoint, device="cpu", baseline=tmp_path / "baseline.json", monitor_config=cfg, alerts=alerts) as inspector:
        assert inspector.monitoring
        summary = inspector.run(str(stream), batch=4, save_json=str(tmp_path / "det.json"), on_result=seen.append)
    assert summary["processed"] == 30 and summary["drift_monitoring"]
    kinds = [(e["event"], e["frame"]) for e in summary["drift_events"]]
    assert kinds[0][0] == "rebaseline" and kinds[0][1] < 12  # the line's clean level, set from its first frames
    drift = [frame for kind, frame in kinds if kind == "drift"]
    assert drift and 12 <= drift[0] < 30 and not any(kind == "recovered" for kind, _ in kinds)
    assert [json.loads(line)["event"] for line in alerts.read_text().splitlines()] == [k for k, _ in kinds]
    assert seen[-1].drift in ("warning", "critical") and seen[0].drift == "warming_up" and seen[-1].score is not None
    records = json.loads((tmp_path / "det.json").read_text())
    since = next(e["since"] for e in summary["drift_events"] if e["event"] == "drift")
    flagged = [r["frame"] for r in records if r["drift"] in ("warning", "critical")]  # the JSON agrees with since (issue 33)
    assert flagged == list(range(since, 30)), (since, flagged)


def test_inspect_one_frame_through_the_api(checkpoint: Path) -> None:
    from defect_detector import Inspector as TopLevel

    assert TopLevel is Inspector
    board = generate_board(H, W, np.random.default_rng(0))[0]
    with Inspector.load(checkpoint, device="cpu", conf=0.01) as inspector:
        first, second = inspector.inspect(board, name="a.png"), inspector.inspect(board, name="b.png")
        want = detect(inspector.runtime, [board], conf=0.01)[0]
    assert (first.frame.index, second.frame.index) == (0, 1) and first.drift == "off" and first.score is None
    np.testing.assert_allclose(first.detections.boxes.numpy(), want.boxes.numpy(), atol=1e-4)
    with pytest.raises(ValueError, match="single-image model"):
        Inspector(Pipeline(Runtime.load(checkpoint, device="cpu"), references=object()))


def test_a_bgr_frame_with_a_golden_image_is_converted_before_registration(
    reference_checkpoint: Path, board_pairs: tuple[Path, Path]
) -> None:
    """v0.8 registered the golden image against the raw BGR frame and failed ("expected a non-empty uint8 [H, W]
    grayscale array"): gray conversion is the pipeline's entry, before registration."""
    frames, golden = board_pairs
    gray = cv2.imread(str(frames / "board_0.png"), cv2.IMREAD_GRAYSCALE)
    bgr = cv2.cvtColor(gray, cv2.COLOR_GRAY2BGR)
    golden_bgr = cv2.cvtColor(cv2.imread(str(golden / "board_0.png"), cv2.IMREAD_GRAYSCALE), cv2.COLOR_GRAY2BGR)
    with Inspector.load(reference_checkpoint, reference=golden, device="cpu", monitor=False) as inspector:
        from_bgr = inspector.inspect(bgr, name="board_0.png")
        from_gray = inspector.inspect(gray, name="board_0.png")
        given = inspector.inspect(bgr, name="board_0.png", reference=golden_bgr)
    assert from_bgr.verdict != "not_inspected" and given.verdict != "not_inspected"
    np.testing.assert_allclose(from_bgr.detections.boxes.numpy(), from_gray.detections.boxes.numpy(), atol=1e-4)
    np.testing.assert_allclose(given.detections.boxes.numpy(), from_gray.detections.boxes.numpy(), atol=1e-2)


def test_inspect_refuses_what_is_not_a_frame_and_a_closed_inspector(checkpoint: Path) -> None:
    inspector = Inspector.load(checkpoint, device="cpu")
    with pytest.raises(ValueError, match="expected a numpy array, got NoneType"):
        inspector.inspect(None)
    inspector.close()
    with pytest.raises(RuntimeError, match="closed"):
        inspector.inspect(np.zeros((64, 64), np.uint8))


def test_a_closed_inspector_raises_everywhere_and_touches_no_output(checkpoint: Path, boards: Path, tmp_path: Path) -> None:
    inspector = Inspector.load(checkpoint, device="cpu", monitor=False)
    inspector.close()
    with pytest.raises(RuntimeError, match="closed"):
        inspector.rebaseline()  # it returned None silently (monitoring looked off)
    with pytest.raises(RuntimeError, match="closed"):
        inspector.run(str(boards), save_json=str(tmp_path / "det.json"))
    assert list(tmp_path.iterdir()) == []


def test_the_summary_counts_undelivered_alerts(checkpoint: Path, boards: Path) -> None:
    from defect_detector.inspect.run_summary import summary_line

    with Inspector.load(checkpoint, device="cpu", monitor=False) as inspector:
        summary = inspector.run(str(boards))
    assert summary["alerts_undelivered"] == 0 and "not delivered" not in summary_line(summary)
    summary.update(drift_monitoring=True, alerts_undelivered=2)  # a webhook that failed or hung twice
    assert "drift alerts 0 (2 not delivered: see the webhook warnings)" in summary_line(summary)


def test_a_frame_or_golden_image_too_small_to_inspect_is_refused_and_the_run_goes_on(tmp_path: Path) -> None:
    """Issue 44: a 16x16 frame or golden image aborted a golden-template run (a registration traceback), and with the
    single-image model a 16x16 checkerboard and a 65535x1 frame each passed."""
    single = write_small_checkpoint(tmp_path / "single.pt", 64)
    checker = ((np.indices((16, 16)).sum(0) % 2) * 255).astype(np.uint8)
    with Inspector.load(single, device="cpu", threads=1, monitor=False) as inspector:
        for frame in (checker, np.full((1, 4000), 128, np.uint8)):
            record = inspector.inspect(frame, name="odd.png")
            assert record.verdict == "not_inspected" and record.refusal.kind == RefusalKind.TOO_SMALL, record.reason
    board = generate_board(96, 128, np.random.default_rng(3))[0]
    assert cv2.imwrite(str(tmp_path / "golden.png"), board)
    pair = write_small_checkpoint(tmp_path / "pair.pt", 64, in_channels=2)
    with Inspector.load(pair, reference=tmp_path / "golden.png", device="cpu", threads=1, monitor=False) as inspector:
        small = inspector.inspect(board[:16, :16], name="tiny.png", reference=board[:16, :16])
        assert small.refusal.kind == RefusalKind.TOO_SMALL and "16x16 px: too small to inspect" in small.reason
        tiny_golden = inspector.inspect(board, name="b.png", reference=board[:16, :16])
        assert tiny_golden.refusal.kind == RefusalKind.TOO_SMALL and "its golden image is 16x16 px" in tiny_golden.reason
        assert inspector.inspect(board, name="c.png", reference=board).verdict in ("pass", "fail")  # the run goes on


def test_a_binarized_line_whose_golden_images_are_binarized_too_is_inspected(tmp_path: Path) -> None:
    """Issue 58: DeepPCB boards and their golden images saved as lossless PNG of 0 and 255 only (a line-scan AOI's
    output) were all refused, "overexposed: 100.00% of the bright pixels saturated": the registered golden image's
    interpolated edges kept 3% of its bright pixels below saturation. Saturation is read from the golden image's own
    levels, so the boards are inspected, and their defects found."""
    samples = Path(__file__).resolve().parents[2] / "data" / "samples"
    (tmp_path / "frames").mkdir()
    (tmp_path / "golden").mkdir()
    for name in ("50600000_test", "92000030_test"):
        for folder, sub in (("deeppcb", "frames"), ("golden", "golden")):
            gray = cv2.imread(str(samples / folder / f"{name}.jpg"), cv2.IMREAD_GRAYSCALE)
            assert cv2.imwrite(str(tmp_path / sub / f"{name}.png"), np.where(gray > 127, 255, 0).astype(np.uint8))
    out = tmp_path / "det.json"
    argv = ["predict", str(tmp_path / "frames"), "--reference", str(tmp_path / "golden"), "--save-json", str(out)]
    assert main([*argv, "--no-monitor", "--threads", "1"]) == 0
    records = json.loads(out.read_text())
    assert [(r["file_name"], r["verdict"]) for r in records] == [("50600000_test.png", "fail"), ("92000030_test.png", "fail")]


def test_predict_reads_serials_by_pattern_and_counts_first_pass_yield(checkpoint: Path, tmp_path: Path, capsys, caplog) -> None:  # noqa: ANN001
    """Issue 58 item 4: ``--trace-pattern`` reads each frame's serial and lot from its name; a board inspected again (SN1
    twice) counts once in first-pass yield; the summary line, the JSON and the CSV say so."""
    frames = tmp_path / "frames"
    frames.mkdir()
    for i, name in enumerate(("SN1_L7_a.png", "SN1_L7_b.png", "SN2_L7_a.png", "board.png")):
        assert cv2.imwrite(str(frames / name), generate_board(240, 320, np.random.default_rng(i))[0])
    out_json, report = tmp_path / "det.json", tmp_path / "rep.csv"
    argv = ["predict", str(frames), "--weights", str(checkpoint), "--conf", "0.99", "--threads", "1", "--device", "cpu"]
    argv += ["--trace-pattern", r"(?P<serial>SN\d+)_(?P<lot>L\d+)", "--save-json", str(out_json), "--report", str(report)]
    with caplog.at_level(logging.WARNING, logger="defect_detector.inspect"):
        assert main(argv) == 0
    assert "first-pass yield 100.0% (3 of 3 boards)" in capsys.readouterr().out  # SN1, SN2 and board.png (no serial)
    assert caplog.text.count("does not match board.png: such frames have no serial") == 1
    records = json.loads(out_json.read_text())
    assert [(r["serial"], r["lot"]) for r in records] == [("SN1", "L7"), ("SN1", "L7"), ("SN2", "L7"), (None, None)]
    assert all(r["conf"] == 0.99 for r in records)
    lines = report.read_text().splitlines()
    assert lines[0].endswith(",conf,serial,lot,order,boards,tolerated") and lines[1].endswith(",0.99,SN1,L7,,,0")


def test_the_inspector_serves_yield_metrics_and_takes_a_serial(checkpoint: Path) -> None:
    """Issue 58 item 4: Prometheus counts boards by verdict and first passes (it counted calls and alerts only)."""
    import urllib.request

    from defect_detector.monitor.alerts import PrometheusSink

    board = generate_board(240, 320, np.random.default_rng(0))[0]
    with Inspector.load(checkpoint, device="cpu", threads=1, conf=0.99, metrics_port=0, metrics_addr="127.0.0.1") as inspector:
        sink = next(s for s in inspector.router.sinks if isinstance(s, PrometheusSink))
        first = inspector.inspect(board, serial="SN1", lot="L7")
        inspector.inspect(board, serial="SN1")  # the same board again: no first inspection
        inspector.inspect(np.zeros((240, 320), np.uint8), serial="SN2")  # blank: not inspected, never a pass
        text = urllib.request.urlopen(f"http://127.0.0.1:{sink.port}/metrics", timeout=10).read().decode()
        with pytest.raises(ValueError, match="serial must be one printable line"):
            inspector.inspect(board, serial="SN\n1")
    assert (first.trace.serial, first.trace.lot, first.verdict.value) == ("SN1", "L7", "pass")
    assert 'defect_detector_boards_total{verdict="pass"} 2.0' in text
    assert 'defect_detector_boards_total{verdict="not_inspected"} 1.0' in text
    assert "defect_detector_first_inspections_total 1.0" in text and "defect_detector_first_passes_total 1.0" in text
    assert "defect_detector_first_pass_yield 1.0" in text


def test_board_outlines_give_each_board_its_verdict_and_must_lie_inside_the_golden_image(tmp_path: Path) -> None:
    weights = write_small_checkpoint(tmp_path / "ref.pt", IMGSZ, in_channels=2)
    board, golden = generate_board_pair(240, 320, np.random.default_rng(0), (3, 4))[:2]
    assert cv2.imwrite(str(tmp_path / "golden.png"), golden)
    outlines = {"left": [0, 0, 160, 240], "right": [160, 0, 320, 240]}
    with Inspector.load(weights, reference=tmp_path / "golden.png", device="cpu", threads=1, conf=0.25, boards=outlines) as inspector:
        record = inspector.inspect(board, name="panel.png")
    assert [b.name for b in record.boards] == ["left", "right"] and len(record.call_boards) == len(record.detections)
    assert record.detections and all(b.verdict == ("fail" if b.calls else "pass") for b in record.boards)
    assert sum(b.calls for b in record.boards) == sum(name is not None for name in record.call_boards)
    with pytest.raises(ValueError, match="board right .* reaches outside the golden image golden.png \\(320x240 px\\)"):
        Inspector.load(weights, reference=tmp_path / "golden.png", device="cpu", threads=1, boards={"right": [160, 0, 400, 240]})
