"""An open station database for the web app and the export: its engine, images folder and known classes."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import SQLAlchemyError

from defect_detector.station.db import check_file, default_images_dir, describe, file_identity, make_engine, parse_url
from defect_detector.station.migrations import ensure_schema
from defect_detector.station.schema import classes, get_meta, set_meta


def images_root(conn: Connection, url: URL, explicit: Path | None, store: bool) -> Path:
    """The stored images' folder: ``explicit`` (remembered in the database when ``store``), else the one the database
    names, else beside a SQLite file, else ``./<database>.images`` (remembered when ``store``)."""
    if explicit is not None:
        if store:
            set_meta(conn, "images_root", str(explicit))
        return explicit
    stored = get_meta(conn, "images_root")
    if stored:
        return Path(stored)
    default = default_images_dir(url)
    if default is None:
        default = Path.cwd().resolve() / f"{url.database or 'station'}.images"
        if store:
            set_meta(conn, "images_root", str(default))
    return default


MIN_FREE = 1 << 20
"""Bytes that must stay free under the database and its images for the station to call itself healthy."""


class Store:
    """The station database at ``url`` (schema created or checked on open) and its images folder (``images``
    overrides the one the database names). Raises ``OSError`` with one line when the database cannot be opened and
    ``ValueError`` for a malformed URL or a newer schema."""

    def __init__(self, url: str, images: str | Path | None = None) -> None:
        self.url = parse_url(url)
        self.engine = make_engine(self.url)
        try:
            ensure_schema(self.engine)
            with self.engine.begin() as conn:
                self.images = images_root(conn, self.url, Path(images).resolve() if images is not None else None, store=False)
        except SQLAlchemyError as exc:
            self.engine.dispose()
            inner = getattr(exc, "orig", None) or exc
            first = (str(inner).strip().splitlines() or [type(inner).__name__])[0]
            raise OSError(f"{describe(self.url)}: cannot open the station database: {first}") from exc
        self._classes: list[str] | None = None
        self._lock = threading.Lock()
        self._identity = file_identity(self.url)

    def check(self) -> None:
        """``OSError`` (one line) when the database cannot take writes: its SQLite file was deleted or replaced since
        it was opened, or the disk under it or its images has less than :data:`MIN_FREE` bytes free."""
        check_file(self.url, self._identity)
        for folder in (Path(self.url.database).parent if self._identity else None, self.images):
            if folder is not None and folder.exists() and shutil.disk_usage(folder).free < MIN_FREE:
                raise OSError(f"{folder}: the disk under the station database is full")

    def classes(self, refresh: bool = False) -> list[str]:
        """The database's known class names, in the order they were first recorded (the model's order)."""
        with self._lock:
            if self._classes is None or refresh:
                with self.engine.connect() as conn:
                    self._classes = list(conn.execute(select(classes.c.name).order_by(classes.c.id)).scalars())
            return list(self._classes)

    def is_class(self, name: str) -> bool:
        """Whether ``name`` is a known class (the list is re-read once when it is not in the cached one)."""
        return name in self.classes() or name in self.classes(refresh=True)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
