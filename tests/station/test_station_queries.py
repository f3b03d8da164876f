"""The pages' queries are served by indexes (SQLite's query plans): no full-table scan on the live page, the review
queue or a page of inspections; a table is only walked in primary-key order, newest first, up to a LIMIT."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

from sqlalchemy import event
from station_data import frames_with_drift

from defect_detector.station import queries
from defect_detector.station.recorder import Recorder
from defect_detector.station.report import report
from defect_detector.station.store import Store


def test_page_queries_use_indexes(tmp_path: Path) -> None:
    db = str(tmp_path / "q.db")
    with Recorder(db, conf=0.5) as recorder:
        for record in frames_with_drift(8):
            recorder.record(record)
    seen: list[tuple[str, object]] = []
    with Store(db) as store:

        def capture(conn, cursor, statement, params, context, executemany) -> None:  # noqa: ANN001
            seen.append((statement, params))

        event.listen(store.engine, "before_cursor_execute", capture)
        now = datetime.now(timezone.utc)
        with store.engine.connect() as conn:
            queries.live_summary(conn, now.replace(tzinfo=None), (now - timedelta(hours=8)).replace(tzinfo=None))
            assert queries.review_next(conn) is not None
            assert len(queries.list_inspections(conn, 3, before=5)) == 3
            queries.events_since(conn, (now - timedelta(days=1)).replace(tzinfo=None))
            report(conn, now - timedelta(hours=1), now)
        event.remove(store.engine, "before_cursor_execute", capture)
        assert len(seen) > 15
        with store.engine.connect() as conn:
            for statement, params in seen:
                plan = [row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()]
                for step in plan:
                    scan = re.match(r"SCAN (\w+)", step)  # a table, or an index of it, walked whole
                    if scan and scan.group(1) != "CONSTANT":  # fine only newest first by primary key, up to a LIMIT
                        table = scan.group(1)
                        assert step == f"SCAN {table}" and re.search(rf"ORDER BY {table}\.id DESC\s+LIMIT", statement), (statement, plan)
