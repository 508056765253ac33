"""The websocket server over real websockets on 127.0.0.1 with the real models (Whisper tiny.en,
the shipped diffusion LM, Piper): samples/jfk.wav streamed in real time, concurrency, limits,
bad input, disconnect mid-reply, authentication, HTTP endpoints.

One server per module (models loaded once per process by ``server.models.load_pipeline``);
servers with other limits share its models.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import soundfile
import soxr
from websockets.asyncio.client import connect as _connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from server.app import ServerConfig
from server.client import pcm16_of
from server.client import stream_pcm as _stream_pcm
from server.session import SessionLimits
from server.testing import ServerThread
from voice.metrics import word_error_rate

pytestmark = pytest.mark.slow

SAMPLES = __import__("pathlib").Path(__file__).resolve().parent.parent / "samples"
JFK = SAMPLES / "jfk.wav"
JFK_TEXT = json.loads((SAMPLES / "references.json").read_text())["jfk.wav"]["text"]
ONE_UTTERANCE = {"voice": {"min_silence_ms": 1300}}  # jfk.wav pauses 1.1 s between its phrases
STEP_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def server():
    with ServerThread(ServerConfig(port=0)) as running:
        yield running


def connect(url: str, **kwargs):
    """A client connection without keepalive pings: a machine busy with training or other tests
    may not answer a ping in time, and keepalive is not what these tests check."""
    kwargs.setdefault("open_timeout", 30)
    return _connect(url, ping_interval=None, **kwargs)


def stream_pcm(url: str, pcm: bytes, **kwargs):
    """:func:`server.client.stream_pcm` without keepalive pings (see :func:`connect`)."""
    return _stream_pcm(url, pcm, ping_interval_s=None, **kwargs)


def other_server(shared: ServerThread, **config) -> ServerThread:
    """A server with other limits and the same (already loaded) models."""
    return ServerThread(ServerConfig(port=0, **config), pipeline=shared.pipeline)


async def recv_event(ws, timeout_s: float = STEP_TIMEOUT_S) -> dict:
    """The next JSON event (binary audio skipped)."""
    while True:
        message = await asyncio.wait_for(ws.recv(), timeout_s)
        if isinstance(message, str):
            return json.loads(message)


async def started(ws, **fields) -> dict:
    await ws.send(json.dumps({"type": "session.start", "sample_rate": 16000, **fields}))
    event = await recv_event(ws)
    assert event["type"] == "session.started", event
    return event


def assert_in_order(types: list[str], expected: list[str]) -> None:
    positions = [types.index(t) for t in expected]
    assert positions == sorted(positions), f"events out of order: {types}"


# -- the real pipeline end to end --------------------------------------------------------------


async def test_jfk_in_real_time_gives_ordered_events_accurate_transcript_and_reply_audio(server):
    result = await stream_pcm(server.ws_url, pcm16_of(JFK), start=ONE_UTTERANCE)

    types = result.types
    assert types[0] == "session.started" and types[-1] == "session.ended", types
    assert "error" not in types, result.of_type("error")
    assert_in_order(types, ["session.started", "speech.started", "transcript.interim", "speech.stopped",
                            "transcript.final", "transcript.cleaned", "reply.draft", "reply.text",
                            "audio.end", "turn.trace", "session.ended"])
    assert types.index("audio.start") < types.index("audio.end") < types.index("turn.trace")
    wer = word_error_rate(JFK_TEXT, result.final_text)
    assert wer <= 0.15, (wer, result.final_text)
    assert result.of_type("transcript.cleaned")[0]["text"].strip()
    assert result.of_type("reply.text")[0]["text"].strip()
    ends = result.of_type("audio.end")
    assert result.audio_bytes > 0 and result.audio_bytes == 2 * sum(e["samples"] for e in ends)
    assert result.of_type("audio.start")[0]["sample_rate"] == server.pipeline.synthesizer.sample_rate_hz
    trace = result.of_type("turn.trace")[0]["trace"]
    assert trace["durations"]["voice_to_voice_s"] > 0
    assert result.close_code == 1000
    metrics = urllib.request.urlopen(server.url + "/metrics", timeout=5).read().decode()
    assert re.search(r"^quicksilver_turns_total [1-9]", metrics, re.M)
    assert re.search(r'^quicksilver_stage_latency_seconds_count\{stage="voice_to_voice"\} [1-9]', metrics, re.M)
    print(f"\njfk over /ws: WER {wer:.1%}, voice-to-voice {trace['durations']['voice_to_voice_s'] * 1000:.0f} ms "
          f"(server trace), {result.voice_to_voice_s * 1000:.0f} ms (client), reply audio {result.audio_bytes} bytes")


async def test_two_concurrent_sessions_complete_with_one_set_of_models(server):
    from server.models import load_pipeline
    from voice.asr import load_whisper_model

    pcm = pcm16_of(JFK)
    loads_before = load_pipeline.cache_info().misses, load_whisper_model.cache_info().misses
    first, second = await asyncio.gather(
        stream_pcm(server.ws_url, pcm, start=ONE_UTTERANCE),
        stream_pcm(server.ws_url, pcm, start=ONE_UTTERANCE),
    )
    for result in (first, second):
        assert "error" not in result.types, result.of_type("error")
        assert word_error_rate(JFK_TEXT, result.final_text) <= 0.15, result.final_text
        assert result.audio_bytes > 0 and result.of_type("turn.trace")
    assert (load_pipeline.cache_info().misses, load_whisper_model.cache_info().misses) == loads_before  # no new model
    deadline = time.monotonic() + 2
    while server.server.connections and time.monotonic() < deadline:  # the server's side of the close
        await asyncio.sleep(0.02)
    assert not server.server.connections
    assert server.server.metrics.active_sessions._value.get() == 0


async def test_typed_input_is_answered_with_text_and_audio_and_cancel_interrupts_it(server):
    async with connect(server.ws_url) as ws:
        await started(ws)
        await ws.send(json.dumps({"type": "input.text", "text": "What can you help me with today?"}))
        kinds, audio_bytes = [], 0
        while "turn.trace" not in kinds:
            message = await asyncio.wait_for(ws.recv(), STEP_TIMEOUT_S)
            if isinstance(message, bytes):
                audio_bytes += len(message)
            else:
                kinds.append(json.loads(message)["type"])
        assert_in_order(kinds, ["reply.draft", "reply.text", "audio.start", "audio.end", "turn.trace"])
        assert audio_bytes > 0
        # a second typed turn, cancelled while the LM works on it
        await ws.send(json.dumps({"type": "input.text", "text": "Tell me a long story about the sea."}))
        await ws.send(json.dumps({"type": "response.cancel"}))
        events = []
        while not events or events[-1]["type"] != "turn.trace":
            events.append(await recv_event(ws))
        kinds = [e["type"] for e in events]
        assert "interrupted" in kinds, kinds
        assert all(e["interrupted"] for e in events if e["type"] == "audio.end"), events
        await ws.send(json.dumps({"type": "session.end"}))
        assert (await recv_event(ws))["type"] == "session.ended"


async def test_cleanup_requests_are_answered_by_id_and_batched(server):
    texts = {f"r{i}": text for i, text in enumerate([
        "so um I want uh a table for two", "I need to I mean I want to fly to boston",
        "uh what is the the weather tomorrow", "play play some music please"])}
    async with connect(server.ws_url) as ws:
        for request_id, text in texts.items():
            await ws.send(json.dumps({"type": "cleanup.request", "id": request_id, "text": text}))
        await ws.send(json.dumps({"type": "cleanup.request", "id": "bad", "text": "hi", "reasoning_effort": "max"}))
        answers = {}
        while len(answers) < len(texts) + 1:
            event = await recv_event(ws)
            answers[event["id"]] = event
    assert answers["bad"]["type"] == "error" and answers["bad"]["code"] == "invalid_field"
    for request_id in texts:
        assert answers[request_id]["type"] == "cleanup.result" and answers[request_id]["text"].strip()
        assert answers[request_id]["latency_ms"] > 0
    assert max(server.pipeline.lm.batches) > 1, server.pipeline.lm.batches


# -- bad input: an error event and the session (or server) still serving ------------------------


@pytest.mark.parametrize("send, code", [
    ("{not json", "malformed_message"),
    ('{"type": "session.begin"}', "unknown_message_type"),
    (b"\x00\x01" * 160, "out_of_order"),  # audio before session.start
    ('{"type": "session.start", "sample_rate": 12345}', "unsupported_audio"),
])
async def test_bad_message_before_start_gets_its_error_and_the_session_goes_on(server, send, code):
    async with connect(server.ws_url) as ws:
        await ws.send(send)
        error = await recv_event(ws)
        assert error["type"] == "error" and error["code"] == code, error
        if code == "unsupported_audio":
            assert "16000" in error["message"] and "48000" in error["message"]
        await started(ws)  # still serving


async def test_odd_byte_count_is_refused_and_the_session_goes_on(server):
    async with connect(server.ws_url) as ws:
        await started(ws)
        await ws.send(b"\x00" * 321)
        error = await recv_event(ws)
        assert error["code"] == "bad_audio_frame" and "even" in error["message"]
        await ws.send(b"\x00" * 640)
        await ws.send(json.dumps({"type": "session.end"}))
        assert (await recv_event(ws))["type"] == "session.ended"


async def test_oversized_message_closes_with_1009_and_the_server_still_serves(server):
    async with connect(server.ws_url, max_size=None) as ws:
        await started(ws)
        await ws.send(b"\x00" * (2**20 + 2))
        with pytest.raises(ConnectionClosed):
            await recv_event(ws)
        assert ws.close_code == 1009
    async with connect(server.ws_url) as ws:
        await started(ws)


async def test_stereo_44k_bytes_sent_as_16k_mono_do_not_become_a_confident_transcript(server):
    data, rate = soundfile.read(str(JFK), dtype="float32")
    stereo = soxr.resample(data, rate, 44100)[: 44100 * 3]
    interleaved = (np.repeat(stereo[:, None], 2, axis=1) * 32767).astype("<i2").tobytes()  # 3 s of 44.1 kHz stereo
    result = await stream_pcm(server.ws_url, interleaved, start={"voice": {"reply": False}}, realtime=False,
                              tail_silence_s=1.5, wait_reply_s=0)
    assert result.close_code == 1000 and result.types[-1] == "session.ended"
    finals = result.of_type("transcript.final")
    rejected = result.of_type("transcript.rejected")
    print(f"\ngarbled input: finals {[f['text'] for f in finals]}, rejected {[(r['text'], r['reason']) for r in rejected]}")
    assert not finals, finals


async def test_an_utterance_longer_than_the_limit_is_cut_with_a_notice(server):
    # 60 s of English read with short pauses; with a 2 s hangover one of its utterances reaches the cut
    pcm = pcm16_of(SAMPLES / "silero_en_60s.wav")
    result = await stream_pcm(server.ws_url, pcm, realtime=False,
                              start={"voice": {"reply": False, "interims": False, "min_silence_ms": 2000}},
                              wait_reply_s=0)
    notices = [e for e in result.of_type("error") if e["code"] == "utterance_too_long"]
    assert notices and "28 s" in notices[0]["message"], result.types
    assert result.of_type("transcript.final") and result.types[-1] == "session.ended"


async def test_disconnect_mid_reply_cancels_every_task_of_the_session_within_1s(server):
    async def task_names() -> set[str]:
        return {t.get_name() for t in asyncio.all_tasks() if t is not asyncio.current_task()}

    baseline = server.call(task_names)
    finished_before = len(server.server.finished)
    pcm = pcm16_of(JFK) + bytes(16000 * 2 * 30)  # silence: keep streaming until the reply starts
    async with connect(server.ws_url) as ws:
        await started(ws, **ONE_UTTERANCE)
        frame = 16000 * 20 // 1000 * 2
        replying = False
        start = time.monotonic()
        for i, offset in enumerate(range(0, len(pcm), frame)):
            await asyncio.sleep(max(0.0, start + i * 0.02 - time.monotonic()))
            await ws.send(pcm[offset : offset + frame])
            while True:  # drain what arrived
                try:
                    message = await asyncio.wait_for(ws.recv(), 0.001)
                except TimeoutError:
                    break
                if isinstance(message, bytes) or json.loads(message)["type"] in ("reply.draft", "audio.start"):
                    replying = True
            if replying:
                break
        assert replying, "no reply started before the end of the recording"
        disconnected_at = time.monotonic()
    # the client side is gone; the server must have torn the session down within 1 s
    while len(server.server.finished) == finished_before and time.monotonic() - disconnected_at < 5:
        await asyncio.sleep(0.02)
    connection = server.server.finished[-1]
    teardown_s = time.monotonic() - disconnected_at
    assert teardown_s < 1.5, teardown_s  # 1 s of teardown + the close handshake
    assert all(task.done() for task in connection.tasks)
    await asyncio.sleep(0.2)
    left = server.call(task_names) - baseline
    assert not left, f"tasks left after the session closed: {left}"
    assert connection.sent_after_close == 0
    async with connect(server.ws_url) as ws:  # still serving
        await started(ws)


# -- limits and authentication -----------------------------------------------------------------


async def test_max_sessions_refuses_one_more_with_server_full(server):
    with other_server(server, max_sessions=1) as small:
        async with connect(small.ws_url) as first:
            await started(first)
            async with connect(small.ws_url) as second:
                error = await recv_event(second)
                assert error["code"] == "server_full" and "1 sessions" in error["message"]
                with pytest.raises(ConnectionClosed):
                    await recv_event(second)
                assert second.close_code == 1013
            await first.send(json.dumps({"type": "session.end"}))
            assert (await recv_event(first))["type"] == "session.ended"


async def test_interims_are_shed_while_more_sessions_are_open_than_allowed(server):
    def interims() -> list[bool]:
        async def read():
            return [c.session.config.interims for c in small.server.connections if c.session is not None]
        return sorted(small.call(read))

    with other_server(server, max_interim_sessions=1) as small:
        async with connect(small.ws_url) as first:
            await started(first)
            assert interims() == [True]
            async with connect(small.ws_url) as second:
                await started(second)
                assert interims() == [False, False]
            for _ in range(100):  # the server's side of the second close
                if interims() == [True]:
                    break
                await asyncio.sleep(0.02)
            assert interims() == [True]


async def test_idle_session_is_closed_with_idle_timeout(server):
    with other_server(server, limits=SessionLimits(idle_timeout_s=0.5)) as quick:
        async with connect(quick.ws_url) as ws:
            await started(ws)
            error = await recv_event(ws, timeout_s=5)
            assert error["code"] == "idle_timeout"
            with pytest.raises(ConnectionClosed):
                await recv_event(ws, timeout_s=5)
            assert ws.close_code == 1000


async def test_token_is_checked_before_the_upgrade(server):
    with other_server(server, token="s3cret") as guarded:
        for url, headers in ((guarded.ws_url, None), (guarded.ws_url + "?token=wrong", None),
                             (guarded.ws_url, {"Authorization": "Bearer wrong"})):
            with pytest.raises(InvalidStatus) as info:
                async with connect(url, additional_headers=headers):
                    pass
            assert info.value.response.status_code == 401
        async with connect(guarded.ws_url + "?token=s3cret") as ws:
            await started(ws)
        async with connect(guarded.ws_url, additional_headers={"Authorization": "Bearer s3cret"}) as ws:
            await started(ws)
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(guarded.url + "/metrics", timeout=5)
        assert info.value.code == 401


async def test_foreign_origin_is_refused_and_own_origin_accepted(server):
    with pytest.raises(InvalidStatus) as info:
        async with connect(server.ws_url, origin="http://evil.example"):
            pass
    assert info.value.response.status_code == 403
    async with connect(server.ws_url, origin=server.url) as ws:
        await started(ws)


def test_http_endpoints(server):
    def get(path: str) -> tuple[int, str, str]:
        try:
            with urllib.request.urlopen(server.url + path, timeout=5) as response:
                return response.status, response.headers["Content-Type"], response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers["Content-Type"], exc.read().decode()

    status, kind, body = get("/")
    assert status == 200 and kind.startswith("text/html") and 'src="/static/app.js"' in body
    status, kind, body = get("/static/app.js")
    assert status == 200 and kind.startswith("text/javascript")
    assert get("/static/../app.py")[0] == 404 and get("/static/%2e%2e/app.py")[0] == 404 and get("/nothing")[0] == 404
    status, kind, body = get("/healthz")
    assert status == 200 and json.loads(body)["status"] == "ok"
    status, kind, body = get("/metrics")
    assert status == 200 and "quicksilver_active_sessions" in body and "quicksilver_stage_latency_seconds" in body
