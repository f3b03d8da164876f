"""Station test fixtures: a station database of each kind (SQLite always; PostgreSQL where
``DEFECT_DETECTOR_TEST_POSTGRES`` names a server whose user may create databases: ``.ci/run`` starts one)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy", reason="station extra not installed (sqlalchemy)")

POSTGRES_ENV = "DEFECT_DETECTOR_TEST_POSTGRES"
POSTGRES_SKIP = f"{POSTGRES_ENV} not set: PostgreSQL station tests skipped"


@dataclass(frozen=True)
class StationDB:
    """A fresh station database: its URL and the folder for its stored images."""

    url: str
    images: Path
    kind: str


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The URL of the test PostgreSQL server (any database on it; fresh databases are created per test)."""
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(POSTGRES_SKIP)
    return url


def _postgres_database(server: str) -> Iterator[str]:
    from sqlalchemy import create_engine, text

    from defect_detector.station.db import parse_url

    admin_url = parse_url(server)
    name = f"station_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.set(drivername="postgresql", database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def postgres_db(postgres_server: str, tmp_path: Path) -> Iterator[StationDB]:
    """A fresh PostgreSQL station database (dropped afterwards)."""
    for url in _postgres_database(postgres_server):
        yield StationDB(url, tmp_path / "images", "postgresql")


@pytest.fixture(params=["sqlite", "postgresql"])
def station_db(request: pytest.FixtureRequest, tmp_path: Path) -> StationDB:
    """A fresh station database of each kind; SQLite keeps its images beside the file."""
    if request.param == "sqlite":
        path = tmp_path / "station.db"
        return StationDB(str(path), Path(f"{path}.images"), "sqlite")
    return request.getfixturevalue("postgres_db")
