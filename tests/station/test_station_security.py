"""Who may use the station: loopback without a token, any other address only with one; with a token every request
needs it (a header, or the cookie a page opened with ``?token=`` gets); stored paths never leave the images folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from defect_detector.cli.main import main
from defect_detector.station import server
from defect_detector.station.app import create_app
from defect_detector.station.images import resolve
from defect_detector.station.security import check_bind, is_loopback
from defect_detector.station.store import Store

TestClient = pytest.importorskip("fastapi.testclient").TestClient
TOKEN = "s3cret-token"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("localhost", True),
        ("::1", True),
        ("0.0.0.0", False),
        ("10.1.2.3", False),
        ("line-pc", False),
    ],
)
def test_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    if loopback:
        check_bind(host, None)
    else:
        with pytest.raises(ValueError, match="without a token"):
            check_bind(host, None)
        check_bind(host, TOKEN)


def test_station_refuses_another_address_without_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served = []
    monkeypatch.setattr("uvicorn.run", lambda app, **kw: served.append(kw))
    monkeypatch.delenv("DEFECT_DETECTOR_TOKEN", raising=False)
    db = str(tmp_path / "s.db")
    assert main(["station", "--db", db, "--create", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "without a token" in err and not served
    monkeypatch.setenv("DEFECT_DETECTOR_TOKEN", TOKEN)  # the environment's token counts
    assert main(["station", "--db", db, "--create", "--host", "0.0.0.0", "--port", "8123"]) == 0
    assert served == [{"host": "0.0.0.0", "port": 8123, "log_level": "warning", "access_log": False}]
    assert main(["station", "--db", "postgresql://u@127.0.0.1:1/none"]) == 2
    assert "cannot open the station database" in capsys.readouterr().err
    assert main(["station", "--db", "mysql://u@host/db"]) == 2
    assert "unsupported database" in capsys.readouterr().err


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(str(tmp_path / "s.db")) as s:
        yield s


def test_every_request_needs_the_token(store: Store) -> None:
    client = TestClient(create_app(store, token=TOKEN), base_url="http://localhost")
    for path in (
        "/",
        "/review",
        "/report",
        "/healthz",
        "/api/inspections",
        "/api/review/next",
        "/static/live.js",
        "/api/inspections/1/image",
    ):
        response = client.get(path)
        assert response.status_code == 401, path
        assert response.json() == {"detail": response.json()["detail"]} and "token" in response.json()["detail"]
    assert client.get("/healthz", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/healthz", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
    assert client.get("/healthz", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert client.post("/api/calls/1/verdict", params={"token": TOKEN}, json={"verdict": "skip", "reviewer": "a"}).status_code == 401


def test_a_browser_gives_the_token_once_and_keeps_it_in_an_httponly_cookie(store: Store) -> None:
    client = TestClient(create_app(store, token=TOKEN), base_url="http://localhost", follow_redirects=False)
    first = client.get("/review", params={"token": TOKEN, "x": "1 2"})
    assert first.status_code == 303 and first.headers["location"] == "/review?x=1+2"  # the token leaves the address bar
    cookie = first.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert client.get("/review").status_code == 200 and client.get("/static/review.js").status_code == 200  # the cookie
    assert TestClient(create_app(store, token=TOKEN), base_url="http://localhost").get("/", params={"token": "nope"}).status_code == 401


def test_without_a_token_loopback_needs_none(store: Store) -> None:
    response = TestClient(create_app(store), base_url="http://localhost").get("/healthz")
    assert response.status_code == 200 and response.headers["x-frame-options"] == "DENY"


def test_stored_paths_never_leave_the_images_folder(tmp_path: Path) -> None:
    root = tmp_path / "images"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x.png").write_bytes(b"png")
    (tmp_path / "secret.txt").write_text("no")
    assert resolve(root, "a/x.png") == (root / "a" / "x.png").resolve()
    assert resolve(root, "../secret.txt") is None and resolve(root, str(tmp_path / "secret.txt")) is None
    assert resolve(root, None) is None and resolve(root, "a/missing.png") is None


def test_serve_checks_before_opening(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--port"):
        server.serve(str(tmp_path / "s.db"), port=70000)
    with pytest.raises(ValueError, match="empty"):
        server.serve(str(tmp_path / "s.db"), token=" ")


def test_a_missing_sqlite_file_is_refused_unless_asked_to_create_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 44: ``station --db <missing path>`` silently created and served an empty database (a mistyped path)."""
    served = []
    monkeypatch.setattr("uvicorn.run", lambda app, **kw: served.append(kw))
    db = tmp_path / "typo.db"
    assert main(["station", "--db", str(db)]) == 2 and not served and not db.exists()
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no such station database" in err and "--create" in err
    assert main(["station", "--db", str(db), "--create"]) == 0 and len(served) == 1 and db.exists()
    assert main(["station", "--db", f"sqlite:///{db}"]) == 0 and len(served) == 2  # it exists now
