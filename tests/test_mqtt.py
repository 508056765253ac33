"""The MQTT event bus against a real mosquitto broker started on a free loopback port: session
events of ``quicksilver run samples/jfk.wav --mqtt …`` on their topics (and the Hermes
``textCaptured``), cleanup over MQTT on Disfl-QA dev examples, a broker that is down at start,
killed mid-run, and restarted."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiomqtt
import pytest

from llm.data import load_disfl_qa
from server.app import ServerConfig
from server.mqtt import MqttBus, MqttSettings
from server.testing import ServerThread
from voice.metrics import word_error_rate

ROOT = Path(__file__).resolve().parent.parent
JFK = ROOT / "samples" / "jfk.wav"
JFK_TEXT = json.loads((ROOT / "samples" / "references.json").read_text())["jfk.wav"]["text"]
MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
WAIT_S = 30
RUN_TIMEOUT_S = 300

if not Path(MOSQUITTO).exists():
    pytest.fail("mosquitto is missing: apt-get install -y mosquitto (.ci/run installs it)", pytrace=False)


class Mosquitto:
    """A mosquitto broker on 127.0.0.1:``port`` (anonymous, no persistence) that a test can kill
    and start again on the same port."""

    def __init__(self, folder: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.config = folder / "mosquitto.conf"
        self.config.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
                               "log_dest stderr\n")
        self.log = folder / "mosquitto.log"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self) -> "Mosquitto":
        with self.log.open("ab") as log:
            self.process = subprocess.Popen([MOSQUITTO, "-c", str(self.config)], stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mosquitto exited: {self.log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("mosquitto did not start listening in 10 s")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def broker(tmp_path):
    running = Mosquitto(tmp_path)
    running.start()
    yield running
    running.kill()


class Subscriber:
    """A test client collecting every message of ``topics`` as (topic, qos, JSON payload)."""

    def __init__(self, port: int, *topics: str) -> None:
        self.port, self.topics = port, topics
        self.messages: list[tuple[str, int, dict]] = []
        self.client = aiomqtt.Client("127.0.0.1", port, timeout=10)
        self._task: asyncio.Task | None = None

    async def __aenter__(self) -> "Subscriber":
        await self.client.__aenter__()
        for topic in self.topics:
            await self.client.subscribe(topic, qos=1)
        self._task = asyncio.create_task(self._collect())
        return self

    async def _collect(self) -> None:
        async for message in self.client.messages:
            self.messages.append((str(message.topic), message.qos, json.loads(message.payload)))

    async def __aexit__(self, *exc) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        try:
            await self.client.__aexit__(None, None, None)
        except aiomqtt.MqttError:
            pass  # the broker is gone

    async def wait_for(self, predicate, timeout_s: float = WAIT_S) -> list:
        """The messages matching ``predicate`` once there is at least one (bounded wait)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = [m for m in self.messages if predicate(m)]
            if found:
                return found
            await asyncio.sleep(0.05)
        raise AssertionError(f"no matching message in {timeout_s} s; got {[m[0] for m in self.messages]}")

    def of(self, topic: str) -> list[dict]:
        return [m[2] for m in self.messages if m[0] == topic]


async def wait_until(condition, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in {timeout_s} s")
        await asyncio.sleep(0.05)


def mean_wer(refs: list[str], hyps: list[str]) -> float:
    return sum(word_error_rate(r, h) for r, h in zip(refs, hyps)) / len(refs)


# -- settings ----------------------------------------------------------------------------------


def test_settings_from_url():
    s = MqttSettings.from_url("mqtt://alice:p%40ss@broker.local:1884", site_id="kitchen")
    assert (s.host, s.port, s.username, s.password, s.tls, s.site_id) == ("broker.local", 1884, "alice", "p@ss", False, "kitchen")
    assert MqttSettings.from_url("mqtts://broker.local").port == 8883
    assert MqttSettings.from_url("mqtt://h", ca_file="/ca.pem").tls
    assert MqttSettings.from_url("mqtt://h", username=None).username is None
    for bad in ("http://h:1883", "mqtt://:1883", "mqtt://h:99999"):
        with pytest.raises(ValueError, match="--mqtt"):
            MqttSettings.from_url(bad)


# -- the bus: broker down at start, killed, restarted ---------------------------------------------


async def test_broker_down_at_start_buffers_up_to_the_bound_then_delivers_when_it_comes_up(tmp_path):
    broker = Mosquitto(tmp_path)  # not started yet
    bus = MqttBus(MqttSettings("127.0.0.1", broker.port, buffer_messages=5, reconnect_min_s=0.1, reconnect_max_s=0.5))
    await bus.start()
    try:
        for n in range(8):  # never blocks, never raises
            bus.publish("test/events", {"n": n}, qos=1)
        assert (bus.dropped, bus.pending) == (3, 5)  # the oldest three made room
        broker.start()
        async with Subscriber(broker.port, "test/#") as subscriber:
            await wait_until(lambda: bus.connected.is_set())
            await bus.flush(WAIT_S)
            bus.publish("test/events", {"n": 8}, qos=1)
            await subscriber.wait_for(lambda m: m[2] == {"n": 8})
        # buffered messages may go out before the subscriber subscribed; the counts are exact
        await wait_until(lambda: bus.published == 6)
        assert bus.dropped == 3 and bus.pending == 0
        assert [m[2]["n"] for m in subscriber.messages][-1] == 8
    finally:
        await bus.close()
        broker.kill()


async def test_broker_killed_then_restarted_publishing_resumes(broker):
    bus = MqttBus(MqttSettings("127.0.0.1", broker.port, reconnect_min_s=0.1, reconnect_max_s=0.5))
    await bus.start()
    try:
        async with Subscriber(broker.port, "test/#") as subscriber:
            await wait_until(lambda: bus.connected.is_set())
            bus.publish("test/events", {"n": 1}, qos=1)
            await subscriber.wait_for(lambda m: m[2] == {"n": 1})
        broker.kill()
        await wait_until(lambda: not bus.connected.is_set())
        bus.publish("test/events", {"n": 2}, qos=1)  # buffered while the broker is away
        assert bus.connects == 1 and bus.dropped == 0
        broker.start()
        async with Subscriber(broker.port, "test/#") as subscriber:
            await wait_until(lambda: bus.connects == 2 and bus.connected.is_set())
            bus.publish("test/events", {"n": 3}, qos=1)
            await subscriber.wait_for(lambda m: m[2] == {"n": 3})
        await wait_until(lambda: bus.published == 3)  # the buffered one went out after the reconnect
        assert bus.dropped == 0 and bus.pending == 0
    finally:
        await bus.close()


# -- quicksilver run … --mqtt --------------------------------------------------------------------


def quicksilver_run(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "quicksilver.py"), "run", str(JFK), "--json", *args],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


async def finish(process: subprocess.Popen) -> tuple[int, list[dict], str]:
    """Wait for the run (bounded) without blocking the event loop; its exit code, JSON events, stderr."""
    out, err = await asyncio.to_thread(process.communicate, timeout=RUN_TIMEOUT_S)
    return process.returncode, [json.loads(line) for line in out.splitlines() if line.startswith("{")], err


@pytest.mark.slow
async def test_run_publishes_each_turn_on_its_topics_and_hermes_text_captured(broker, tmp_path):
    async with Subscriber(broker.port, "quicksilver/#", "hermes/#") as subscriber:
        run = quicksilver_run("--mqtt", broker.url, "--mqtt-site-id", "kitchen", "--out", str(tmp_path / "reply.wav"))
        code, events, err = await finish(run)
        assert code == 0, err
        finals = [e for e in events if e["type"] == "final"]
        cleaned = [e for e in events if e["type"] == "cleaned"]
        replies = [e for e in events if e["type"] == "reply"]
        traces = [e for e in events if e["type"] == "trace"]
        assert finals and len(cleaned) == len(replies) == len(traces) == len(finals)
        await subscriber.wait_for(lambda m: m[0].endswith("/trace") and m[2]["turn_id"] == traces[-1]["turn_id"])
    session = re.search(r"as session (run-[0-9a-f]{8})", err).group(1)
    assert re.search(r"(\d+) messages published, 0 dropped", err)
    base = f"quicksilver/{session}"
    assert {m[0] for m in subscriber.messages} == {f"{base}/transcript/final", f"{base}/transcript/cleaned",
                                                   f"{base}/reply", f"{base}/trace", "hermes/asr/textCaptured"}
    assert all(m[1] == (0 if m[0].endswith("/trace") else 1) for m in subscriber.messages)  # QoS per topic
    published = subscriber.of(f"{base}/transcript/final")
    assert [(m["type"], m["turn_id"], m["text"], m["session_id"]) for m in published] == [
        ("transcript.final", e["turn_id"], e["text"], session) for e in finals]
    assert [(m["turn_id"], m["text"]) for m in subscriber.of(f"{base}/transcript/cleaned")] == [
        (e["turn_id"], e["text"]) for e in cleaned]
    assert [(m["type"], m["text"]) for m in subscriber.of(f"{base}/reply")] == [("reply.text", e["text"]) for e in replies]
    assert [(m["type"], m["turn_id"]) for m in subscriber.of(f"{base}/trace")] == [("turn.trace", e["turn_id"]) for e in traces]
    hermes = subscriber.of("hermes/asr/textCaptured")
    assert [h["text"] for h in hermes] == [e["text"] for e in finals]
    speech = {e["turn_id"]: e["speech_end_s"] for e in events if e["type"] == "speech_stopped"}
    starts = {e["turn_id"]: e["stream_s"] for e in events if e["type"] == "speech_started"}
    for h, final in zip(hermes, finals):
        assert set(h) == {"text", "likelihood", "seconds", "siteId", "sessionId"}
        assert (h["siteId"], h["sessionId"]) == ("kitchen", session)
        assert 0 < h["likelihood"] <= 1
        assert h["seconds"] == pytest.approx(speech[final["turn_id"]] - starts[final["turn_id"]], abs=0.002)
    assert word_error_rate(JFK_TEXT, " ".join(h["text"] for h in hermes)) <= 0.15
    assert not any("audio" in m[0] for m in subscriber.messages)  # no raw audio over MQTT


@pytest.mark.slow
async def test_run_completes_and_reports_drops_when_the_broker_dies_mid_run(broker, tmp_path):
    async with Subscriber(broker.port, "quicksilver/+/transcript/final") as subscriber:
        run = quicksilver_run("--mqtt", broker.url, "--out", str(tmp_path / "reply.wav"))
        await subscriber.wait_for(lambda m: True, timeout_s=RUN_TIMEOUT_S)  # the first turn's final
        broker.kill()
        code, events, err = await finish(run)
    assert code == 0, err
    traces = [e for e in events if e["type"] == "trace"]
    assert traces and len(traces) == len([e for e in events if e["type"] == "final"])  # every turn finished
    dropped = int(re.search(r"messages published, (\d+) dropped", err).group(1))
    assert dropped >= len(traces)  # at least every trace came after the broker died
    print(f"\nbroker killed mid-run: {dropped} messages dropped, the run finished its {len(traces)} turns")


# -- quicksilver serve --mqtt: cleanup over MQTT, session events ------------------------------------


@pytest.fixture
def mqtt_server(broker):
    settings = MqttSettings("127.0.0.1", broker.port, reconnect_min_s=0.1, reconnect_max_s=0.5)
    with ServerThread(ServerConfig(port=0, mqtt=settings)) as running:
        deadline = time.monotonic() + WAIT_S
        while not running.server.mqtt.connected.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert running.server.mqtt.connected.is_set()
        yield running


async def test_cleanup_over_mqtt_answers_disfl_qa_dev_examples(mqtt_server, broker):
    pairs = load_disfl_qa("dev")[:16]
    async with Subscriber(broker.port, "quicksilver/cleanup/response/#", "quicksilver/cleanup/errors",
                          "answers/#") as subscriber:
        for n, pair in enumerate(pairs):
            request = {"id": f"q{n}", "text": pair.disfluent}
            if n % 4 == 0:
                request["reply_to"] = f"answers/client-7/q{n}"
            await subscriber.client.publish("quicksilver/cleanup/request", json.dumps(request), qos=1)
        await subscriber.client.publish("quicksilver/cleanup/request", json.dumps(
            {"id": "bad-effort", "text": "uh hi", "reasoning_effort": "max"}), qos=1)
        await subscriber.client.publish("quicksilver/cleanup/request", b"not json", qos=1)
        topics = [f"answers/client-7/q{n}" if n % 4 == 0 else f"quicksilver/cleanup/response/q{n}"
                  for n in range(len(pairs))]
        for topic in [*topics, "quicksilver/cleanup/response/bad-effort", "quicksilver/cleanup/errors"]:
            await subscriber.wait_for(lambda m, topic=topic: m[0] == topic)
    answers = [subscriber.of(topic)[0] for topic in topics]
    assert [(a["type"], a["id"]) for a in answers] == [("cleanup.result", f"q{n}") for n in range(len(pairs))]
    refs = [pair.fluent for pair in pairs]
    cleaned, raw = mean_wer(refs, [a["text"] for a in answers]), mean_wer(refs, [p.disfluent for p in pairs])
    assert cleaned < raw, (cleaned, raw)
    error = subscriber.of("quicksilver/cleanup/response/bad-effort")[0]
    assert (error["type"], error["code"], error["id"]) == ("error", "invalid_field", "bad-effort")
    assert subscriber.of("quicksilver/cleanup/errors")[0]["code"] == "malformed_message"
    print(f"\ncleanup over MQTT on {len(pairs)} Disfl-QA dev items: WER {raw:.3f} → {cleaned:.3f}")


async def test_serve_publishes_the_events_of_a_websocket_session(mqtt_server, broker):
    from websockets.asyncio.client import connect

    async with Subscriber(broker.port, "quicksilver/#") as subscriber:
        async with connect(f"ws://127.0.0.1:{mqtt_server.port}/ws", ping_interval=None, open_timeout=30) as ws:
            await ws.send(json.dumps({"type": "session.start", "sample_rate": 16000}))
            started = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
            session = started["session_id"]
            await ws.send(json.dumps({"type": "input.text", "text": "What time is it?"}))
            replies = await subscriber.wait_for(lambda m: m[0] == f"quicksilver/{session}/reply")
            await ws.send(json.dumps({"type": "session.end"}))
    assert replies[0][1] == 1
    assert replies[0][2]["type"] == "reply.text" and replies[0][2]["text"].strip()
    assert replies[0][2]["session_id"] == session
