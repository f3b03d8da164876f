import dataclasses
import json
import logging
import socket
import threading
import urllib.request
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch

from defect_detector.core.config import MonitorConfig
from defect_detector.monitor.alerts import AlertRouter, JsonlSink, LogSink, PrometheusSink, Sink, WebhookSink
from defect_detector.monitor.baseline import calibrate
from defect_detector.monitor.drift import DriftDetector, DriftEvent
from defect_detector.monitor.setup import MonitorSetupError, build_monitoring, load_monitor_config

LAYERS = ["backbone.stem", "backbone.stage1", "neck.out3"]
DESIGN_KEYS = ["event", "frame", "source", "time", "severity", "score", "layers", "reason"]


def _event(frame: int = 7, event: str = "drift") -> DriftEvent:
    return DriftEvent(
        event=event,
        frame=frame,
        source="cam0",
        severity="warning" if event == "drift" else "info",
        score=2.5,
        layers=["backbone.stem", "neck.out3"],
        reason="activation contrast (std) fell 40% below baseline in 2 layers: lens dirty or out of focus?",
        statistic="std",
        observed={"backbone.stem": 0.3, "neck.out3": 0.2},
        baseline={"backbone.stem": 0.5, "neck.out3": 0.33},
        z={"backbone.stem": -3.0, "neck.out3": -2.5},
    )


def _baseline():
    rng = np.random.default_rng(0)
    return calibrate([rng.normal(1.0, 0.1, size=(100, len(LAYERS), 2))], LAYERS, space="linear")


def _http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode("utf-8")


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Receiver:
    """A loopback HTTP server (port 0) recording the JSON bodies POSTed to it."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.got = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                length = int(self.headers["Content-Length"])
                receiver.bodies.append(json.loads(self.rfile.read(length)))
                receiver.content_type = self.headers["Content-Type"]
                self.send_response(204)
                self.end_headers()
                receiver.got.set()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_jsonl_lines_follow_the_design(tmp_path: Path) -> None:
    path = tmp_path / "alerts" / "drift.jsonl"
    sink = JsonlSink(path)
    sink.on_event(_event(3))
    sink.on_event(_event(9, "recovered"))
    sink.close()
    JsonlSink(path).close()
    again = JsonlSink(path)
    again.on_event(_event(12))
    again.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["frame"] for line in lines] == [3, 9, 12]
    for line in lines:
        assert list(line)[: len(DESIGN_KEYS)] == DESIGN_KEYS
        assert line["event"] in ("drift", "recovered") and isinstance(line["frame"], int) and line["source"] == "cam0"
        assert isinstance(line["score"], float) and isinstance(line["layers"], list) and isinstance(line["reason"], str)
        assert line["time"].endswith("Z") and datetime.fromisoformat(line["time"].replace("Z", "+00:00")).tzinfo is not None
    assert lines[0]["observed"] == {"backbone.stem": 0.3, "neck.out3": 0.2} and lines[0]["statistic"] == "std"


def test_webhook_delivers_the_event_json() -> None:
    receiver = _Receiver()
    try:
        sink = WebhookSink(receiver.url, timeout=5.0)
        sink.on_event(_event(5))
        assert receiver.got.wait(10)
        sink.close(timeout=5)
    finally:
        receiver.close()
    assert receiver.bodies == [_event(5).to_dict() | {"time": receiver.bodies[0]["time"]}]
    assert receiver.content_type == "application/json"
    assert (sink.sent, sink.failed, sink.dropped) == (1, 0, 0)


def test_dead_webhook_never_blocks_and_counts_losses() -> None:
    sink = WebhookSink(f"http://127.0.0.1:{_closed_port()}/hook", timeout=0.5, max_queue=2, retries=2, backoff=0.5)
    for frame in range(10):
        sink.on_event(_event(frame))
    assert sink.dropped >= 1, "a full queue must drop instead of waiting"
    sink.close(timeout=10)
    assert sink.sent == 0 and sink.failed >= 1
    assert sink.failed + sink.dropped == 10
    sink.on_event(_event(11))
    assert sink.dropped + sink.failed == 11


def test_webhook_rejects_non_http_urls() -> None:
    with pytest.raises(ValueError, match="http"):
        WebhookSink("file:///etc/passwd")


@pytest.mark.parametrize("run", [1, 2])
def test_prometheus_serves_the_metrics(run: int) -> None:
    sink = PrometheusSink(0, addr="127.0.0.1")
    try:
        assert sink.port > 0
        stats = np.array([[0.5, 0.25], [1.5, 2.0], [-0.1, 0.3]])
        sink.on_frame(0, "cam0", stats, {"preprocess": 0.002, "model": 0.02, "postprocess": 0.001}, 3, 0.7, LAYERS)
        sink.on_frame(1, "cam0", stats, {"model": 0.03}, 0, 1.25, LAYERS)
        sink.on_event(_event())
        text = _http_get(f"http://127.0.0.1:{sink.port}/metrics")
    finally:
        sink.close()
    assert 'defect_detector_layer_activation{layer="backbone.stem",statistic="mean"} 0.5' in text
    assert 'defect_detector_layer_activation{layer="neck.out3",statistic="std"} 0.3' in text
    assert "defect_detector_drift_score 1.25" in text
    assert "defect_detector_frames_total 2.0" in text
    assert "defect_detector_detections_total 3.0" in text
    assert 'defect_detector_alerts_total{severity="warning"} 1.0' in text
    assert 'defect_detector_alerts_total{severity="critical"} 0.0' in text
    assert 'defect_detector_stage_latency_seconds_count{stage="model"} 2.0' in text
    assert 'defect_detector_stage_latency_seconds_bucket{le="0.025",stage="model"} 1.0' in text
    assert "defect_detector_drift_state 1.0" in text


class _Broken(Sink):
    def on_event(self, event: DriftEvent) -> None:
        raise RuntimeError("sink is down")


class _Recorder(Sink):
    def __init__(self) -> None:
        self.frames: list[tuple] = []
        self.events: list[DriftEvent] = []
        self.closed = False

    def on_frame(self, frame_index, source, stats, timings, num_detections, score, layer_names) -> None:
        self.frames.append((frame_index, source, stats, dict(timings), num_detections, score, list(layer_names)))

    def on_event(self, event: DriftEvent) -> None:
        self.events.append(event)

    def close(self) -> None:
        self.closed = True


def test_router_feeds_detector_and_survives_a_broken_sink(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    baseline = _baseline()
    cfg = MonitorConfig(window=2, reference=0, z_warn=3.0, z_alert=6.0, baseline_margin=0.0, debounce=2, recover=2)
    recorder = _Recorder()
    router = AlertRouter(DriftDetector(baseline, cfg), [_Broken(), LogSink(), JsonlSink(tmp_path / "a.jsonl"), recorder])
    high = torch.tensor(baseline.mean + 8 * baseline.std, dtype=torch.float32)
    events = []
    with caplog.at_level(logging.WARNING, logger="defect_detector.monitor"):
        for t in range(6):
            events += router.on_frame(t, "cam0", high.unsqueeze(0) if t % 2 else high, {"model": 0.01}, 1)
    router.close()
    assert [e.event for e in events] == ["drift"] and events[0].severity == "critical"
    assert router.sink_errors == 1 and recorder.closed
    assert len(recorder.frames) == 6 and recorder.frames[-1][6] == LAYERS and recorder.frames[-1][5] >= 6.0
    assert [json.loads(line)["event"] for line in (tmp_path / "a.jsonl").read_text().splitlines()] == ["drift"]
    assert any("critical drift at frame" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match="shape"):
        router.on_frame(9, "cam0", torch.zeros(2, 2))


def test_a_router_on_anothers_sinks_sends_its_events_and_metrics_there_and_closes_none(tmp_path: Path) -> None:
    """Issue 58 item 1: the inspector of a design routed to other bundled weights had sinks of its own (the log only),
    so ``--alerts`` and ``--webhook`` never heard its alerts. Built with ``sinks_of``, its events and frame metrics go to
    the first router's sinks, a failing one counted there; closing it closes none of them."""
    recorder = _Recorder()
    first = AlertRouter(None, [_Broken(), recorder, JsonlSink(tmp_path / "a.jsonl")], LAYERS)
    cfg = MonitorConfig(window=2, reference=0, z_warn=3.0, z_alert=6.0, baseline_margin=0.0, debounce=2, recover=2)
    second = build_monitoring(LAYERS, embedded=_baseline().to_dict(), monitor_config=cfg, sinks_of=first)
    assert second is not None and second.detector is not None
    high = torch.tensor(_baseline().mean + 8 * _baseline().std, dtype=torch.float32)
    events = [e for t in range(4) for e in second.on_frame(t, "cam0", high, {"model": 0.01}, 2)]
    second.close()
    assert [e.event for e in events] == ["drift"] and [e.event for e in recorder.events] == ["drift"]
    assert [f[0] for f in recorder.frames] == [0, 1, 2, 3] and recorder.frames[-1][5] >= 6.0 and not recorder.closed
    assert [json.loads(line)["event"] for line in (tmp_path / "a.jsonl").read_text().splitlines()] == ["drift"]
    assert first.event_errors == 1 and second.undelivered == 0 and first.undelivered == 1
    first.close()
    assert recorder.closed


def test_build_monitoring_modes(tmp_path: Path) -> None:
    baseline = _baseline()
    path = tmp_path / "baseline.json"
    baseline.save(path)
    assert build_monitoring(LAYERS) is None
    with pytest.raises(MonitorSetupError, match="need a drift baseline"):
        build_monitoring(LAYERS, alerts=tmp_path / "a.jsonl")
    with pytest.raises(MonitorSetupError, match="calibrate again"):
        build_monitoring(LAYERS[:2], baseline=path)
    with pytest.raises(MonitorSetupError, match="not found"):
        build_monitoring(LAYERS, baseline=tmp_path / "nope.json")
    with pytest.raises(MonitorSetupError, match="--no-monitor"):
        build_monitoring(LAYERS, embedded=baseline.to_dict(), monitor=False, alerts=tmp_path / "a.jsonl")
    assert build_monitoring(LAYERS, embedded=baseline.to_dict(), monitor=False) is None

    router = build_monitoring(LAYERS, baseline=path, alerts=tmp_path / "a.jsonl")
    assert router is not None and router.detector is not None
    assert [type(s).__name__ for s in router.sinks] == ["LogSink", "JsonlSink"]
    router.close()

    router = build_monitoring(LAYERS, embedded=baseline.to_dict())  # on by default when the weights carry a baseline
    assert router is not None and router.detector is not None and router.detector.baseline.to_dict() == baseline.to_dict()
    router.close()

    router = build_monitoring(LAYERS, metrics_port=0, metrics_addr="127.0.0.1")
    try:
        assert router is not None and router.detector is None
        router.on_frame(0, "cam0", torch.zeros(len(LAYERS), 2), {"model": 0.01}, 2)
        text = _http_get(f"http://127.0.0.1:{router.sinks[0].port}/metrics")
        assert "defect_detector_frames_total 1.0" in text and "defect_detector_detections_total 2.0" in text
    finally:
        router.close()


def test_monitor_config_yaml(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text("name: x\nmonitor:\n  window: 4\n  z_warn: 2.0\n")
    (tmp_path / "section.yaml").write_text("window: 6\nreference: 0\n")
    (tmp_path / "bad.yaml").write_text("windw: 6\n")
    assert load_monitor_config(tmp_path / "run.yaml") == MonitorConfig(window=4, z_warn=2.0)
    assert load_monitor_config(tmp_path / "section.yaml") == MonitorConfig(window=6, reference=0)
    with pytest.raises(MonitorSetupError, match="windw"):
        load_monitor_config(tmp_path / "bad.yaml")
    baseline = _baseline()
    router = build_monitoring(LAYERS, embedded=baseline.to_dict(), monitor_config=tmp_path / "section.yaml")
    assert router.detector.cfg.window == 6
    router.close()


class _Hanging:
    """A loopback TCP server that accepts connections and never answers (a webhook that hangs)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"

    def close(self) -> None:
        self.sock.close()


def test_a_hanging_webhook_is_counted_logged_and_served(caplog: pytest.LogCaptureFixture) -> None:
    server = _Hanging()
    webhook = WebhookSink(server.url, timeout=0.3, retries=0)
    metrics = PrometheusSink(0, addr="127.0.0.1")
    router = AlertRouter(None, [webhook, metrics], LAYERS)
    try:
        for frame in range(3):
            router.emit(_event(frame))  # never blocks, whatever the server does
        with caplog.at_level(logging.WARNING, logger="defect_detector.monitor"):
            webhook.close(timeout=0.1)  # (a 60-frame run ended before one POST timed out: reported nowhere)
        assert webhook.sent == 0 and router.undelivered == webhook.undelivered == 3
        assert "drift events not delivered" in caplog.text and server.url in caplog.text
        assert "defect_detector_alerts_undelivered_total 3.0" in _http_get(f"http://127.0.0.1:{metrics.port}/metrics")
    finally:
        router.close()
        server.close()


def test_metrics_port_in_use_names_the_port() -> None:
    first = PrometheusSink(0, addr="127.0.0.1")
    try:
        with pytest.raises(MonitorSetupError, match=rf"--metrics-port {first.port}: cannot serve metrics on 127.0.0.1:{first.port}: "):
            build_monitoring(LAYERS, monitor=False, metrics_port=first.port, metrics_addr="127.0.0.1")
    finally:
        first.close()


def test_webhook_warnings_mask_user_info_and_query_keys(caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://hookuser:hookpass@127.0.0.1:{_closed_port()}/hook?key=SECRETKEY"
    sink = WebhookSink(url, timeout=0.5, retries=0)
    with caplog.at_level(logging.WARNING, logger="defect_detector"):
        sink.on_event(_event(1))
        sink.close(timeout=10)
    assert sink.failed == 1
    text = caplog.text
    assert "giving up" in text and f"http://***@127.0.0.1:{url.split(':')[3].split('/')[0]}/hook?key=***" in text
    assert "hookuser" not in text and "hookpass" not in text and "SECRETKEY" not in text
    with pytest.raises(ValueError) as info:
        WebhookSink("ftp://u:pw@host/x?key=SECRETKEY")
    assert "pw" not in str(info.value) and "SECRETKEY" not in str(info.value)


def test_changeovers_on_every_frame_fold_into_one_log_line_and_never_hide_a_drift_alert(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 33, item 8: 39 INFO lines for 40 boards, each with its own golden image. The first changeover is logged,
    the rest of the run folded into one line written before the next other event, and a later design run that starts
    far from the last changeover is logged on its own again."""
    sink = LogSink(logging.getLogger("test.changeovers"))
    with caplog.at_level(logging.INFO, logger="test.changeovers"):
        for frame in range(40):
            sink.on_event(_event(frame, "changeover"))
        sink.on_event(_event(40, "drift"))
        sink.on_event(_event(100, "changeover"))
        sink.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4, lines
    assert lines[0].startswith("changeover at frame 0 of cam0")
    assert lines[1].startswith("39 more changeovers, frames 1-39") and "the alerts file lists each" in lines[1]
    assert lines[2].startswith("warning drift at frame 40 of cam0")  # after the fold, never buried in it
    assert lines[3].startswith("changeover at frame 100 of cam0")


def test_folding_changeovers_holds_nothing_per_changeover(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 58 item 11: the log sink kept the frame of every folded changeover in a list until the next other event, so
    a line whose every board has its own golden image grew by one entry a frame for the whole run. It keeps a count
    and the first and last frame: the same line, and memory flat."""
    import tracemalloc

    sink = LogSink(logging.getLogger("test.changeovers"))
    changeover = _event(0, "changeover")
    tracemalloc.start()
    try:
        for frame in range(6000):
            sink.on_event(dataclasses.replace(changeover, frame=frame))
            if frame == 1000:
                held = tracemalloc.get_traced_memory()[0]
        grown = tracemalloc.get_traced_memory()[0] - held
    finally:
        tracemalloc.stop()
    assert grown < 2000, grown  # a list of 5,000 more frames holds 40 KB
    with caplog.at_level(logging.INFO, logger="test.changeovers"):
        sink.on_event(_event(6000))
    assert "5999 more changeovers, frames 1-5999" in caplog.text
