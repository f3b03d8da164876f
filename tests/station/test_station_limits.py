"""What a request must pass (issue 36): a 1 MiB body limit (from Content-Length, and while a chunked body is read),
dates that cannot overflow (400, never 500), the allowed-hosts check against DNS rebinding, redirects that stay on the
station, drawn missed boxes of a sensible size, and a token that need not show in ``ps`` (a file or the environment)."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from station_data import board_record

from defect_detector.cli.main import main
from defect_detector.core.constants import DEEPPCB_CLASSES
from defect_detector.station.app import create_app
from defect_detector.station.limits import MAX_BODY, allowed_hosts, host_of
from defect_detector.station.recorder import Recorder
from defect_detector.station.security import read_token
from defect_detector.station.server import running
from defect_detector.station.store import Store

TestClient = pytest.importorskip("fastapi.testclient").TestClient
TOKEN = "s3cret-token"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    db = str(tmp_path / "s.db")
    with Recorder(db, conf=0.5, classes=DEEPPCB_CLASSES) as recorder:
        recorder.record(board_record(0))  # one 320x240 board with calls
    with Store(db) as s:
        yield s


@pytest.fixture
def client(store: Store) -> TestClient:
    return TestClient(create_app(store), base_url="http://localhost")


def _one_line(response, status: int) -> str:  # noqa: ANN001
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail and "\n" not in detail
    return detail


def _raw(base: str, head: str, chunks: list[bytes] = ()) -> tuple[int, bytes]:
    """Send a request by hand (``head`` without the final blank line), then ``chunks`` chunked; the status and body."""
    parts = urlsplit(base)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(head.encode("latin-1") + b"\r\n\r\n")
        try:
            for chunk in chunks:
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            if chunks:
                sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the station answered and closed before the whole body was sent
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, response.read()


def test_bodies_over_a_mebibyte_are_refused_without_being_read(store: Store) -> None:
    with running(create_app(store)) as base:
        host = urlsplit(base).netloc
        post = f"POST /api/calls/1/verdict HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        status, body = _raw(base, post + "Content-Length: 300000000")  # 300 MB announced, none sent: refused at once
        assert status == 413 and b"over 1048576 bytes" in body
        status, body = _raw(base, post + "Transfer-Encoding: chunked", [b" " * 65536] * 40)  # 2.5 MiB, no length given
        assert status == 413 and b"over 1048576 bytes" in body
        small = b'{"verdict": "skip", "reviewer": "ana"}'
        status, _ = _raw(base, post + "Transfer-Encoding: chunked", [small])
        assert status == 200
    assert MAX_BODY == 1 << 20


@pytest.mark.parametrize("since", ["0001-01-01", "9999-12-31T23:59:59-01:00", "1969-12-31", "2020-13-45", "x" * 60])
def test_dates_are_validated_never_a_500(client: TestClient, since: str) -> None:
    assert "since" in _one_line(client.get("/report", params={"since": since}), 400)
    assert "since" in _one_line(client.get("/api/events", params={"since": since}), 400)


def test_only_allowed_hosts_are_answered(store: Store) -> None:
    app = create_app(store)
    assert TestClient(app, base_url="http://localhost:8080").get("/healthz").status_code == 200
    assert TestClient(app, base_url="http://127.0.0.1:8080").get("/healthz").status_code == 200
    assert TestClient(app, base_url="http://[::1]:8080").get("/healthz").status_code == 200
    rebound = TestClient(app, base_url="http://evil.example:8080")  # DNS rebinding: another name, this address
    assert "evil.example" in _one_line(rebound.get("/healthz"), 400)
    assert rebound.post("/api/calls/1/verdict", json={"verdict": "skip", "reviewer": "a"}).status_code == 400
    wide = create_app(store, allowed_hosts=allowed_hosts("10.0.0.5", ["line-pc"]))
    assert TestClient(wide, base_url="http://line-pc").get("/healthz").status_code == 200
    assert TestClient(wide, base_url="http://10.0.0.5:8080").get("/healthz").status_code == 200
    assert TestClient(wide, base_url="http://evil.example").get("/healthz").status_code == 400
    assert TestClient(create_app(store, allowed_hosts=["*"]), base_url="http://any.name").get("/healthz").status_code == 200
    assert socket.gethostname().lower() in allowed_hosts("0.0.0.0")  # bound to every address: this machine's name too
    assert host_of("[::1]:80") == "::1" and host_of("LocalHost.:80") == "localhost" and host_of("::1") == "::1"


def test_the_token_redirect_never_leaves_the_station(store: Store) -> None:
    with running(create_app(store, token=TOKEN)) as base:
        host = urlsplit(base).netloc
        for path in ("//evil.example/", "/\\evil.example/", "///evil.example/x"):  # sent as is, as a browser's address bar would
            parts = urlsplit(base)
            with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
                sock.sendall(f"GET {path}?token={TOKEN}&x=1 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
                response = http.client.HTTPResponse(sock)
                response.begin()
                location = response.getheader("location")
            assert response.status == 303 and location.startswith("/") and not location.startswith(("//", "/\\")), (path, location)
            assert location.endswith("evil.example/?x=1") or location.endswith("evil.example/x?x=1"), location  # a path here


@pytest.mark.parametrize(
    ("box", "match"),
    [([0, 0, 320, 240], "covers more than 50%"), ([10, 10, 300, 200], "covers more than 50%"), ([10, 10, 13, 40], "at least 4 pixels")],
)
def test_a_missed_box_is_smaller_than_the_frame_and_a_few_pixels(client: TestClient, box: list, match: str) -> None:
    inspection = client.get("/api/inspections").json()["items"][0]["id"]
    url = f"/api/inspections/{inspection}/missed"
    assert match in _one_line(client.post(url, json={"box": box, "class": "open", "reviewer": "ana"}), 422)
    assert client.post(url, json={"box": [10, 10, 14, 14], "class": "open", "reviewer": "ana"}).status_code == 201


def test_the_token_from_a_file_or_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.delenv("DEFECT_DETECTOR_TOKEN", raising=False)
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    assert read_token(None, token_file) == TOKEN and read_token(None, None) is None
    monkeypatch.setenv("DEFECT_DETECTOR_TOKEN", "from-env")
    assert read_token(None, None) == "from-env" and read_token("flag", None) == "flag" and read_token(None, token_file) == TOKEN
    (tmp_path / "empty").write_text("\n")
    bad_inputs = ((("flag", token_file), "not both"), ((None, tmp_path / "empty"), "empty"), ((None, tmp_path / "none"), "cannot read"))
    for bad, match in bad_inputs:
        with pytest.raises(ValueError, match=match):
            read_token(*bad)
    monkeypatch.delenv("DEFECT_DETECTOR_TOKEN")
    served = []
    monkeypatch.setattr("uvicorn.run", lambda app, **kw: served.append(app))
    db = str(tmp_path / "s.db")
    argv = ["station", "--db", db, "--create", "--host", "0.0.0.0", "--token-file", str(token_file), "--allowed-host", "line-pc"]
    assert main(argv) == 0 and len(served) == 1
    client = TestClient(served[0], base_url="http://line-pc")
    assert client.get("/healthz").status_code == 401
    assert client.get("/healthz", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert main(["station", "--db", db, "--create", "--host", "0.0.0.0", "--token-file", str(tmp_path / "none")]) == 2
    assert "--token-file" in capsys.readouterr().err
