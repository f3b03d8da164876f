"""inspect/outputs.py: the --report CSV escaped, every output finished whatever happens to another (a full disk)."""

from __future__ import annotations

import csv
import io

from defect_detector.inspect.outputs import report_csv


def test_report_csv_escapes_file_names_a_spreadsheet_would_run() -> None:
    records = [
        {"file_name": "=1+2+cmd|calc!A0.jpg", "frame": 0, "verdict": "pass", "reason": None, "calls": [], "dropped": 0, "drift": "normal"},
        {"file_name": "@x.png", "frame": 1, "verdict": "not_inspected", "reason": "-bad: unreadable", "calls": [], "dropped": 0}
        | {"drift": "-"},
        {"file_name": "board.png", "frame": 2, "verdict": "fail", "reason": None, "calls": [{"category_name": "open"}], "dropped": 0,
         "drift": "normal"},
    ]
    rows = list(csv.reader(io.StringIO(report_csv(records, ["open", "short"]))))
    assert rows[0] == ["file_name", "frame", "verdict", "reason", "calls", "open", "short", "dropped", "drift"]
    assert rows[1][0] == "'=1+2+cmd|calc!A0.jpg" and rows[2][0] == "'@x.png" and rows[2][3] == "'-bad: unreadable"
    assert rows[2][8] == "'-" and rows[3][:6] == ["board.png", "2", "fail", "", "1", "1"]
