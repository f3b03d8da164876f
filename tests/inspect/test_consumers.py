"""A run's consumers (inspect/consumers.py): every record to every consumer in order, then close; a stop closes what
was taken; a failure discards it; the producer (its source) is closed whatever happens."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from defect_detector.core.errors import Stopped
from defect_detector.inspect.consumers import Callback, consume

BOARD = Path(__file__).resolve().parents[2] / "data" / "samples" / "deeppcb" / "50600000_test.jpg"


class _Kept:
    def __init__(self) -> None:
        self.taken: list[int] = []
        self.ended = ""

    def add(self, inspection: int) -> None:  # type: ignore[override]
        self.taken.append(inspection)

    def close(self) -> None:
        self.ended = "closed"

    def discard(self) -> None:
        self.ended = "discarded"


def _producer(n: int, closed: list[bool], fail_at: int | None = None, stop_at: int | None = None) -> Iterator[int]:
    try:
        for i in range(n):
            if i == fail_at:
                raise OSError("the camera is gone")
            if i == stop_at:
                raise Stopped(15, "SIGTERM")
            yield i
    finally:
        closed.append(True)


def test_every_record_reaches_every_consumer_in_order_then_each_is_closed() -> None:
    first, second, seen, closed = _Kept(), _Kept(), [], []
    assert consume(_producer(4, closed), [first, second, Callback(seen.append)]) is None
    assert first.taken == second.taken == seen == [0, 1, 2, 3] and first.ended == second.ended == "closed" and closed == [True]


def test_a_stop_signal_closes_what_was_taken_and_names_the_signal() -> None:
    kept, closed = _Kept(), []
    assert consume(_producer(5, closed, stop_at=2), [kept]) == "SIGTERM"
    assert kept.taken == [0, 1] and kept.ended == "closed" and closed == [True]


def test_a_failure_discards_every_consumer_and_a_failing_consumer_closes_the_producer() -> None:
    kept, closed = _Kept(), []
    with pytest.raises(OSError, match="the camera is gone"):
        consume(_producer(5, closed, fail_at=3), [kept])
    assert kept.taken == [0, 1, 2] and kept.ended == "discarded" and closed == [True]

    def broken(inspection: int) -> None:
        if inspection == 1:
            raise ValueError("the caller's own bug")

    kept, closed = _Kept(), []
    with pytest.raises(ValueError, match="own bug"):
        consume(_producer(5, closed), [kept, Callback(broken)])
    assert kept.ended == "discarded" and closed == [True]  # the source is not left open until garbage collection



def test_the_inspectors_own_consumers_send_the_yield_and_the_station_rows(tmp_path) -> None:  # noqa: ANN001
    """Issue 57: the line's yield and the station recorder are consumers of the one protocol: every record the
    inspector finishes, a single ``inspect()`` frame included, reaches them; closing the inspector closes them."""
    import numpy as np
    from sqlalchemy import select

    from defect_detector.data.images import load_image_gray
    from defect_detector.inspect.consumers import LineYield, StationRows
    from defect_detector.inspect.inspector import Inspector
    from defect_detector.model.checkpoint import DEFAULT_WEIGHTS
    from defect_detector.station.schema import inspections
    from defect_detector.station.store import Store

    class Router:
        def __init__(self) -> None:
            self.verdicts: list[tuple[str, bool]] = []

        def on_verdict(self, verdict: str, first: bool) -> None:
            self.verdicts.append((verdict, first))

    db = tmp_path / "line.db"
    with Inspector.load(DEFAULT_WEIGHTS, device="cpu", threads=1, monitor=False, db=str(db)) as inspector:
        assert [type(c) for c in inspector.handed] == [LineYield, StationRows]
        board = inspector.inspect(load_image_gray(BOARD), "board.png", serial="SN1")
        blank = inspector.inspect(np.zeros((64, 64), np.uint8), "blank.png", serial="SN1")
    assert inspector.handed == [] and inspector.recorder is None
    with Store(str(db)) as store, store.engine.connect() as conn:
        assert [r.name for r in conn.execute(select(inspections)).all()] == ["board.png", "blank.png"]
    router = Router()
    line = LineYield(router)
    for record in (board, board, blank):
        line.add(record)
    assert router.verdicts == [("fail", True), ("fail", False), ("not_inspected", False)]
