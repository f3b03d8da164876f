"""End to end in headless Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright; no browser is downloaded):
the live page shows a frame with its boxes and updates itself, three calls are reviewed with the keyboard, one missed
defect is drawn with the mouse, the export holds exactly that; a second reviewer is handed another call than the first
(leases), and a frame that was not inspected shows on the live page with its reason, beside the design runs; one key
confirms every waiting call of a board, and the live page shows first-pass yield and the board's serial.
Screenshots of each page go to the test's tmp folder and to ``/tmp/station_shots/`` for a person to look at."""

from __future__ import annotations

import dataclasses
import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import select
from station_data import board_record

from defect_detector.cli.main import main
from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.station.app import create_app
from defect_detector.station.recorder import Recorder, RecorderTiming
from defect_detector.station.schema import calls, verdicts
from defect_detector.station.server import running
from defect_detector.station.store import Store

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = Path("/tmp/station_shots")
TIMEOUT_MS = 20_000

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed: browser tests skipped")
if not CHROMIUM.is_file():
    pytest.skip("chromium not installed (/usr/bin/chromium): browser tests skipped", allow_module_level=True)


def _open(p, errors: list[str]):  # noqa: ANN001, ANN202 - Playwright's sync API objects
    """``(browser, page)``: Debian's chromium launched headless as CI runs it, a 1400x1000 page whose script errors and
    console errors are appended to ``errors``."""
    browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    return browser, page


def _shot(page, tmp_path: Path, name: str) -> None:  # noqa: ANN001
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    SHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, SHOTS / path.name)


def _coloured_pixels(page, selector: str) -> int:  # noqa: ANN001
    """Pixels of a canvas whose channels differ (the frames are gray: only drawn boxes and tags are coloured)."""
    return page.evaluate(
        """(selector) => {
            const c = document.querySelector(selector);
            const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
            let n = 0;
            for (let i = 0; i < d.length; i += 4) if (Math.max(d[i], d[i + 1], d[i + 2]) - Math.min(d[i], d[i + 1], d[i + 2]) > 60) n++;
            return n;
        }""",
        selector,
    )


def test_live_page_review_by_keyboard_missed_box_and_export(tmp_path: Path) -> None:
    db = tmp_path / "station.db"
    recorder = Recorder(str(db), conf=0.5, classes=DEEPPCB_CLASSES, timing=RecorderTiming(live_every=0.0))
    recorder.record(board_record(0, height=480, width=640, calls=2))  # two calls to review (0.9, 0.7)
    recorder.record(board_record(1, height=480, width=640, calls=1))  # one (0.9)
    assert recorder.flush(60)
    store = Store(str(db))
    errors: list[str] = []
    offset = [timedelta(0)]
    try:
        with running(create_app(store, clock=lambda: datetime.now(timezone.utc) + offset[0])) as base, sync_api.sync_playwright() as p:
            browser, page = _open(p, errors)

            # live page: the newest frame with its boxes
            page.goto(f"{base}/")
            page.wait_for_selector("#frame[data-inspection]")
            assert page.get_attribute("#frame", "data-calls") == "2"  # frame 1: its 0.9 call and the 0.1 one
            assert _coloured_pixels(page, "#frame") > 100
            assert "line 1 · frame 1" in page.inner_text("#frame-meta")
            assert page.inner_text("#queue-link") == "3 calls on 2 frames waiting for review"
            _shot(page, tmp_path, "live")

            # review page: name once per session, three verdicts by keyboard, one missed box drawn
            page.goto(f"{base}/review")
            page.fill("#who-name", "ana")
            page.press("#who-name", "Enter")
            page.wait_for_selector("body[data-shown]")
            second = browser.new_page()  # a second reviewer at once: handed another call (the first is leased to ana)
            second.goto(f"{base}/review")
            second.fill("#who-name", "ben")
            second.press("#who-name", "Enter")
            second.wait_for_selector("body[data-shown]")
            assert second.get_attribute("body", "data-shown") != page.get_attribute("body", "data-shown")
            second.close()
            offset[0] = timedelta(seconds=121)  # ben's lease runs out: ana gets his call in turn
            shown = []
            for key in ("d", "2"):  # frame 0: defect as called; defect, corrected to class 2 (short)
                shown.append(page.get_attribute("body", "data-shown"))
                page.keyboard.press(key)
                page.wait_for_function("(prev) => document.body.dataset.shown !== prev", arg=shown[-1])
            assert page.inner_text("#call-frame").startswith("line 1 · frame 1")
            page.keyboard.press("m")
            box = page.locator("#full").bounding_box()
            width = page.evaluate("document.getElementById('full').width")
            scale = box["width"] / width

            def at(x: float, y: float) -> tuple[float, float]:
                return box["x"] + x * scale, box["y"] + y * scale

            page.mouse.move(*at(100, 120))
            page.mouse.down()
            page.mouse.move(*at(140, 150), steps=4)
            page.mouse.move(*at(160, 170), steps=4)
            page.mouse.up()
            page.wait_for_selector("#missed-form:not(.hidden)")
            page.keyboard.press("3")  # class 3: mousebite
            _shot(page, tmp_path, "review")
            page.keyboard.press("Enter")
            page.wait_for_selector("#missed-form.hidden", state="attached")
            page.wait_for_selector(".toast.show:has-text('missed mousebite saved')")
            page.keyboard.press("f")  # frame 1's call: a false call
            page.wait_for_selector("body[data-queue='empty']")
            page.reload()  # the name is kept for the browser session
            page.wait_for_selector("body[data-queue='empty']")
            assert not page.evaluate("document.getElementById('who').open")

            # a new frame appears on the live page by itself
            page.goto(f"{base}/")
            page.wait_for_selector("#frame[data-inspection]")
            before = page.get_attribute("#frame", "data-inspection")
            recorder.record(board_record(2, height=480, width=640, calls=0))  # below the operating point: not kept
            assert recorder.flush(60)
            page.wait_for_function("(prev) => document.getElementById('frame').dataset.inspection !== prev", arg=before)
            assert "frame 2" in page.inner_text("#frame-meta")
            _shot(page, tmp_path, "live_updated")
            refused = dataclasses.replace(
                board_record(3, height=480, width=640, calls=0),
                verdict="not_inspected",
                calls=(),
                reason="board_0003.png: reference does not match (41% of the frame unlike the golden image)",
                reason_kind="reference does not match",
                reference=None,
                reference_image=None,
            )
            recorder.record(refused)
            assert recorder.flush(60)
            page.wait_for_selector("#refused a:has-text('image')")
            assert "41% of the frame unlike the golden image" in page.inner_text("#refused")
            assert "design golden.png: frames 0-3 (4 boards, 1 not inspected)" in page.inner_text("#designs")
            assert "not inspected" in page.inner_text("#counts-summary") and "reference does not match" in page.inner_text("#counts-reason")
            _shot(page, tmp_path, "live_not_inspected")

            page.goto(f"{base}/report")
            page.wait_for_selector("table.report-table")
            _shot(page, tmp_path, "report")
            browser.close()
    finally:
        recorder.close()
        store.close()
    assert errors == []

    out = tmp_path / "export"
    assert main(["review", "export", "--db", str(db), "--out", str(out)]) == 0
    coco = json.loads((out / "annotations.json").read_text())
    names = {c["id"]: c["name"] for c in coco["categories"]}
    frames = {img["id"]: img["frame"] for img in coco["images"]}
    assert sorted(frames.values()) == [0, 1] and all("reference" in img for img in coco["images"])
    by_frame = {0: [], 1: []}
    for ann in coco["annotations"]:
        by_frame[frames[ann["image_id"]]].append((names[ann["category_id"]], [round(v) for v in ann["bbox"]]))
    first_calls = board_record(0, height=480, width=640, calls=2).calls
    assert sorted(c for c, _ in by_frame[0]) == sorted([first_calls[0].class_name, "short"])
    assert [c for c, _ in by_frame[1]] == ["mousebite"]  # the false call is absent, the drawn miss is there
    x, y, w, h = by_frame[1][0][1]
    assert abs(x - 100) <= 2 and abs(y - 120) <= 2 and abs(w - 60) <= 2 and abs(h - 50) <= 2


def test_one_key_confirms_a_whole_board_and_the_live_page_shows_yield_and_serial(tmp_path: Path) -> None:
    """Issue 58 item 4: Shift+D gives every waiting call of the frame shown the verdict defect (1,088 calls were queued
    one at a time); the live page shows first-pass yield and the board's serial, lot and work order."""
    db = tmp_path / "station.db"
    recorder = Recorder(str(db), conf=0.05, classes=DEEPPCB_CLASSES, timing=RecorderTiming(live_every=0.0))
    trace = {"lot": "L7", "order": "WO9"}
    recorder.record(board_record(0, height=480, width=640, calls=3, serial="SN0042", **trace))  # every call waits (>= 0.05)
    passed = dataclasses.replace(board_record(1, height=480, width=640, serial="SN0043", **trace), verdict="pass", calls=())
    recorder.record(passed)
    assert recorder.flush(60)
    store = Store(str(db))
    errors: list[str] = []
    try:
        with running(create_app(store)) as base, sync_api.sync_playwright() as p:
            browser, page = _open(p, errors)
            page.goto(f"{base}/")
            page.wait_for_selector("#frame[data-inspection]")
            assert "SN0043 (lot L7, order WO9)" in page.inner_text("#frame-meta")
            assert "50.0% (1 of 2)" in page.inner_text("#counts-yield")  # SN0042 failed, SN0043 passed
            _shot(page, tmp_path, "live_yield")

            page.goto(f"{base}/review")
            page.fill("#who-name", "ana")
            page.press("#who-name", "Enter")
            page.wait_for_selector("body[data-shown]")
            waiting = int(page.inner_text("#board-waiting"))
            assert waiting >= 3 and "SN0042" in page.inner_text("#call-frame")
            _shot(page, tmp_path, "review_board")
            page.keyboard.press("Shift+D")
            page.wait_for_selector("body[data-queue='empty']")
            page.wait_for_selector(f".toast.show:has-text('{waiting} calls defect')")
            browser.close()
        with store.engine.connect() as conn:
            stored = conn.execute(select(calls.c.verdict, calls.c.verdict_class, calls.c.class_name)).all()
            reviewers = set(conn.execute(select(verdicts.c.reviewer)).scalars())
    finally:
        recorder.close()
        store.close()
    assert errors == []
    assert len(stored) == waiting and all(v == "defect" and confirmed == called for v, confirmed, called in stored) and reviewers == {"ana"}
