"""core/safe_text.py: secrets of URLs masked in every log line, CSV cells that a spreadsheet would run escaped."""

from __future__ import annotations

import csv
import io
import logging

import pytest

from defect_detector.core.safe_text import MaskingFilter, csv_cell, mask_secrets, mask_url, show_controls


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql://line:s3cret@db.example:5432/station", "postgresql://***@db.example:5432/station"),
        ("postgresql+psycopg://line@db/station", "postgresql+psycopg://***@db/station"),
        ("https://u:p@hooks.example/x?key=abc&room=7#tok", "https://***@hooks.example/x?key=***&room=***#***"),
        ("http://127.0.0.1:9000/hook?token", "http://127.0.0.1:9000/hook?***"),
        ("rtsp://admin:admin@10.0.0.5/stream1", "rtsp://***@10.0.0.5/stream1"),
        ("sqlite:////var/lib/station.db", "sqlite:////var/lib/station.db"),
        ("https://hooks.example/plain", "https://hooks.example/plain"),
    ],
)
def test_mask_url_hides_user_info_query_values_and_fragment(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_mask_secrets_masks_every_url_in_a_line_and_leaves_the_rest() -> None:
    line = "station database: postgresql://u:pw@db/x (serve it: defect-detector station --db postgresql://u:pw@db/x)"
    assert mask_secrets(line) == "station database: postgresql://***@db/x (serve it: defect-detector station --db postgresql://***@db/x)"
    assert mask_secrets("frames 3: pass 3") == "frames 3: pass 3"
    assert "pw" not in mask_secrets("webhook 'https://a:pw@h/p?k=pw': giving up")


def test_masking_filter_masks_the_formatted_message(caplog: pytest.LogCaptureFixture) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(MaskingFilter())
    logger = logging.getLogger("defect_detector.test_safe_text")
    logger.addHandler(handler)
    try:
        logger.warning("webhook %s: giving up after %d tries", "https://user:pw@hooks.example/x?key=SECRET", 3)
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert text == "webhook https://***@hooks.example/x?key=***: giving up after 3 tries\n"


@pytest.mark.parametrize("name", ["=1+2+cmd|calc!A0.jpg", "+1.jpg", "-2+3.jpg", "@SUM(A1).jpg", "\tx.jpg", "\rx.jpg"])
def test_csv_cell_escapes_what_a_spreadsheet_would_run(name: str) -> None:
    buffer = io.StringIO()
    csv.writer(buffer).writerow([csv_cell(name), csv_cell(-3), csv_cell("board.jpg")])
    cells = next(csv.reader(io.StringIO(buffer.getvalue())))
    assert cells == ["'" + name, "-3", "board.jpg"]


def test_bidirectional_controls_in_a_name_are_shown_not_obeyed() -> None:
    """Issue 44: a right-to-left override in a file name reached the pages and the CSV (``board_\\u202egpj.exe`` reads as
    ``board_exe.jpg``)."""
    name = "board_\u202egpj.exe"
    assert show_controls(name) == "board_<U+202E>gpj.exe" and csv_cell(name) == "board_<U+202E>gpj.exe"
    assert csv_cell("=\u2066x") == "'=<U+2066>x" and show_controls("plain.png") == "plain.png" and csv_cell(3) == 3
