"""``review export``: the reviewed frames as a COCO training set that ``train`` (``CocoDetectionDataset``) reads as is.

A frame is exported once it is fully reviewed: it has at least one verdict, and every call that went to its review
queue has a ``defect`` or ``false_call`` verdict (a skipped or pending call keeps the frame out: its truth is unknown,
and an unlabelled defect would teach the model to miss it); a frame that was not inspected never is. Confirmed calls
become annotations under the class the reviewer confirmed; false calls are absent; missed defects the reviewer drew
are added. Layout of ``DIR``::

    annotations.json          COCO; info.images_root ".", image entries carry "reference" where there is one, and the
                              board's "serial", "lot" and "order" where known
    images/<id>.png           the stored frame (id: the inspection's id)
    references/<id>.png       its golden image, registered into the frame's pixels

Every file is written to a temp file and renamed; ``annotations.json`` last. With no fully reviewed frame nothing is
written: the summary says how far the review is (``verdicts``, ``waiting``) and ``review export`` refuses in one line.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, true
from sqlalchemy.engine import Connection, Row

from defect_detector.core.io import atomic_write_bytes, atomic_write_json
from defect_detector.station.db import describe, iso
from defect_detector.station.images import resolve
from defect_detector.station.records import utc_now
from defect_detector.station.schema import calls, inspections, verdicts
from defect_detector.station.store import Store

_CHUNK = 500


def _reviewed_ids(conn: Connection) -> list[int]:
    return sorted(int(i) for i in conn.execute(select(verdicts.c.inspection_id).distinct()).scalars())


def _complete(call_rows: list[Row[Any]], has_verdict: bool) -> bool:
    """Whether a frame's review is finished: some verdict, no skipped call, no reviewed-call without a verdict."""
    if not has_verdict or any(c.verdict == "skip" for c in call_rows):
        return False
    return all(c.verdict in ("defect", "false_call") for c in call_rows if c.review)


def _annotations(call_rows: list[Row[Any]], missed: list[Row[Any]]) -> list[tuple[str, list[float]]]:
    """``(class, xyxy)`` of a frame's confirmed calls and drawn misses."""
    out = [(c.verdict_class or c.class_name, [c.x1, c.y1, c.x2, c.y2]) for c in call_rows if c.verdict == "defect"]
    return out + [(m.class_name, [m.x1, m.y1, m.x2, m.y2]) for m in missed]


def _copy(source: Path, target: Path) -> None:
    atomic_write_bytes(target, source.read_bytes())


def export_review(url: str, out: str | Path, images: str | Path | None = None) -> dict[str, Any]:
    """Write the reviewed frames of the station database at ``url`` to ``out`` (module docstring); returns a summary
    ``{"annotations_file", "images", "annotations", "skipped": {reason: count}, "verdicts", "reviewed_frames",
    "waiting"}`` (``verdicts``: verdicts given on calls and misses drawn, ``reviewed_frames``: frames with one,
    ``waiting``: calls still in the review queue). With no image to export nothing is written and
    ``annotations_file`` is None."""
    out = Path(out)
    store = Store(url, images)
    try:
        with store.engine.connect() as conn:
            coco, skipped = _build(conn, store, out)
            progress = _progress(conn)
    finally:
        store.close()
    written = None
    if coco["images"]:
        coco["info"]["database"] = describe(store.url)
        atomic_write_json(out / "annotations.json", coco)
        written = str(out / "annotations.json")
    return {
        "annotations_file": written,
        "images": len(coco["images"]),
        "annotations": len(coco["annotations"]),
        "skipped": dict(skipped),
        **progress,
    }


def _progress(conn: Connection) -> dict[str, int]:
    """How far the review is: ``verdicts`` given (on calls, and misses drawn), ``reviewed_frames`` with one, and calls
    ``waiting`` in the queue."""
    verdict_count = conn.execute(select(func.count()).select_from(verdicts)).scalar() or 0
    frames = conn.execute(select(func.count(func.distinct(verdicts.c.inspection_id)))).scalar() or 0
    waiting = conn.execute(select(func.count()).select_from(calls).where(calls.c.pending == true())).scalar() or 0
    return {"verdicts": int(verdict_count), "reviewed_frames": int(frames), "waiting": int(waiting)}


def _build(conn: Connection, store: Store, out: Path) -> tuple[dict[str, Any], Counter[str]]:
    names = store.classes()
    images_out: list[dict[str, Any]] = []
    anns: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()
    ids = _reviewed_ids(conn)
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        rows = conn.execute(select(inspections).where(inspections.c.id.in_(chunk)).order_by(inspections.c.id)).all()
        call_rows: dict[int, list[Row[Any]]] = {i: [] for i in chunk}
        for c in conn.execute(select(calls).where(calls.c.inspection_id.in_(chunk)).order_by(calls.c.id)):
            call_rows[c.inspection_id].append(c)
        missed: dict[int, list[Row[Any]]] = {i: [] for i in chunk}
        stmt = select(verdicts).where(verdicts.c.inspection_id.in_(chunk), verdicts.c.call_id.is_(None)).order_by(verdicts.c.id)
        has_verdict = set(chunk)  # every id here has a verdict: it came from the verdicts table
        for m in conn.execute(stmt):
            missed[m.inspection_id].append(m)
        for row in rows:
            if row.verdict == "not_inspected":  # its picture is kept to be seen, never to train on
                skipped["not inspected"] += 1
                continue
            if not _complete(call_rows[row.id], row.id in has_verdict):
                skipped["not fully reviewed"] += 1
                continue
            frame = resolve(store.images, row.image)
            if frame is None or not row.width or not row.height:
                skipped["no stored image"] += 1
                continue
            entry = {"id": int(row.id), "file_name": f"images/{row.id}.png", "width": int(row.width), "height": int(row.height)}
            _copy(frame, out / entry["file_name"])
            golden = resolve(store.images, row.reference_image)
            if golden is not None:
                entry["reference"] = f"references/{row.id}.png"
                _copy(golden, out / entry["reference"])
            entry.update(source=row.source, frame=int(row.frame), name=row.name, time=iso(row.time), model=row.model)
            entry.update({k: v for k, v in (("serial", row.serial), ("lot", row.lot), ("order", row.work_order)) if v is not None})
            images_out.append(entry)
            for class_name, (x1, y1, x2, y2) in _annotations(call_rows[row.id], missed[row.id]):
                if class_name not in names:
                    names.append(class_name)
                w, h = float(x2) - float(x1), float(y2) - float(y1)
                anns.append(
                    {
                        "id": len(anns) + 1,
                        "image_id": int(row.id),
                        "category_id": names.index(class_name) + 1,
                        "bbox": [float(x1), float(y1), w, h],
                        "area": w * h,
                        "iscrowd": 0,
                    }
                )
    coco = {
        "info": {"description": "defect_detector station: reviewed frames", "date_created": utc_now().isoformat(), "images_root": "."},
        "images": images_out,
        "annotations": anns,
        "categories": [{"id": i + 1, "name": n, "supercategory": "defect"} for i, n in enumerate(names)],
    }
    return coco, skipped
