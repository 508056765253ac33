"""The whole pipeline on real speech with the real models: Whisper → local diffusion LM → Piper.

Uses ``llm.load_backend("local")`` (the shipped checkpoint in ``llm/checkpoint``) through the
interface the product uses; no stand-ins.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
import soundfile
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from audio.decode import decode_file
from audio.sinks import WavFileSink
from audio.sources import FileSource, QueueSource
from conftest_voice import REFERENCES, recognizer, sample, synthesizer, voice_lm  # noqa: F401 - fixtures
from voice.events import (
    AudioChunk,
    CleanedTranscript,
    FinalTranscript,
    Interrupted,
    ReplyText,
    SpeechStarted,
    TraceReady,
)
from voice.metrics import word_error_rate
from voice.pipeline import PipelineConfig, VoicePipeline
from voice.tracing import make_tracer, monotonic_to_epoch_ns

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
async def answered_turn(recognizer, synthesizer, voice_lm, tmp_path_factory):
    """One spoken command answered end to end, with events timed on receipt and spans recorded."""
    out = tmp_path_factory.mktemp("e2e") / "reply.wav"
    exporter = InMemorySpanExporter()
    pipeline = VoicePipeline(voice_lm, synthesizer, recognizer, PipelineConfig(turn_taking="wait"),
                             tracer=make_tracer(span_exporter=exporter))
    sink = WavFileSink(out, synthesizer.sample_rate_hz)
    source = FileSource(sample("goforward_16k_s16le.raw"), raw_rate_hz=16000, tail_silence_ms=900)
    session = pipeline.session(source, sink)
    received = []
    session.subscribe(lambda e: received.append((e, time.monotonic())))
    traces = await asyncio.wait_for(session.run(), timeout=120)
    return {"traces": traces, "received": received, "spans": exporter.get_finished_spans(), "out": out}


def first(received, kind):
    return next((e, t) for e, t in received if isinstance(e, kind))


def test_one_turn_with_transcript_cleanup_reply_and_audio(answered_turn):
    traces, received = answered_turn["traces"], answered_turn["received"]
    assert len(traces) == 1 and not traces[0].interrupted
    final, _ = first(received, FinalTranscript)
    assert word_error_rate(REFERENCES["goforward_16k_s16le.raw"]["text"], final.text) <= 0.15
    cleaned, _ = first(received, CleanedTranscript)
    assert cleaned.text.strip()
    reply, _ = first(received, ReplyText)
    assert any(c.isalpha() for c in reply.text), f"reply without words: {reply.text!r}"


def test_reply_audio_is_valid_speech(answered_turn):
    audio, rate = soundfile.read(answered_turn["out"], dtype="int16")
    assert rate == 22050 and audio.ndim == 1
    assert len(audio) / rate > 0.3, f"reply audio lasts {len(audio) / rate:.2f} s"
    assert np.sqrt(np.mean(audio.astype(np.float64) ** 2)) > 300
    chunks = [e for e, _ in answered_turn["received"] if isinstance(e, AudioChunk)]
    assert sum(len(c.frame.samples) for c in chunks) == len(audio)


def test_trace_holds_every_stage_in_order(answered_turn):
    t = answered_turn["traces"][0]
    chain = ["speech_end", "asr_start", "asr_final", "cleanup_start", "cleanup_done", "llm_start",
             "first_reply_draft", "reply_done", "tts_start", "first_tts_audio", "tts_done"]
    times = [getattr(t, name) for name in chain]
    assert None not in times, dict(zip(chain, times))
    assert times == sorted(times), dict(zip(chain, times))
    assert t.speech_end < t.endpoint <= t.cleanup_start  # the LM starts only once the endpoint confirms
    assert t.endpoint - t.speech_end == pytest.approx(t.hangover_s)
    d = t.durations()
    assert d["voice_to_voice_s"] > d["endpoint_delay_s"] > 0
    assert d["asr_rtf"] > 0 and d["tts_rtf"] > 0  # real-time factors: see bench/v2v.py
    trace_events = [e for e, _ in answered_turn["received"] if isinstance(e, TraceReady)]
    assert len(trace_events) == 1 and trace_events[0].trace["durations"]["voice_to_voice_s"] == d["voice_to_voice_s"]


def test_spans_cover_the_work_they_name(answered_turn):
    """Each span ends when its result reached a subscriber (timed independently, on receipt)."""
    spans = {s.name: s for s in answered_turn["spans"]}
    assert set(spans) == {"turn", "asr", "cleanup", "llm", "tts"}
    received = answered_turn["received"]
    tolerance_ns = 50e6  # 50 ms: the result reaches subscribers within a loop iteration or two
    checks = {"asr": FinalTranscript, "cleanup": CleanedTranscript, "llm": ReplyText}
    for name, kind in checks.items():
        _, at = first(received, kind)
        assert abs(spans[name].end_time - monotonic_to_epoch_ns(at)) < tolerance_ns, name
    _, cleaned_at = first(received, CleanedTranscript)
    _, reply_at = first(received, ReplyText)
    llm_wall_ns = (reply_at - cleaned_at) * 1e9
    assert abs((spans["llm"].end_time - spans["llm"].start_time) - llm_wall_ns) < tolerance_ns
    audio_times = [monotonic_to_epoch_ns(at) for e, at in received if isinstance(e, AudioChunk)]
    assert spans["tts"].start_time <= audio_times[0] and audio_times[-1] <= spans["tts"].end_time + tolerance_ns
    turn = spans["turn"]
    for name in ("asr", "cleanup", "llm", "tts"):
        assert turn.start_time <= spans[name].start_time and spans[name].end_time <= turn.end_time
        assert spans[name].parent.span_id == turn.context.span_id


async def test_speaking_over_the_reply_cancels_it(recognizer, synthesizer, voice_lm, tmp_path):
    pipeline = VoicePipeline(voice_lm, synthesizer, recognizer, PipelineConfig(turn_taking="barge_in"))
    sink = WavFileSink(tmp_path / "reply.wav", synthesizer.sample_rate_hz, realtime=True)  # plays in real time
    source = QueueSource()
    session = pipeline.session(source, sink)
    events: list = []
    playing = asyncio.Event()

    def on_event(event):
        events.append(event)
        if isinstance(event, AudioChunk):
            playing.set()

    session.subscribe(on_event)
    run = asyncio.create_task(session.run())
    command = decode_file(sample("goforward_16k_s16le.raw"), raw_rate_hz=16000)
    for i in range(0, len(command), 1600):  # 100 ms blocks at real-time pace
        await source.push(command[i : i + 1600])
        await asyncio.sleep(0.1)
    deadline = time.monotonic() + 60
    while not playing.is_set():  # the user is silent until the reply of turn 1 plays
        assert time.monotonic() < deadline, "no reply audio within 60 s"
        await source.push(np.zeros(1600, np.int16))
        await asyncio.sleep(0.1)
    await source.push(decode_file(sample("english_one_two_three.wav")))  # the user speaks over it
    await source.push(np.zeros(32000, np.int16))
    await source.end()
    traces = await asyncio.wait_for(run, timeout=120)

    interrupted = [e for e in events if isinstance(e, Interrupted)]
    assert [e.turn_id for e in interrupted] == [1]
    assert traces[0].turn_id == 1 and traces[0].interrupted and traces[0].tts_done is None
    cut = events.index(interrupted[0])
    assert isinstance(events[cut - 1], SpeechStarted) and events[cut - 1].turn_id == 2
    late = [e for e in events[cut:] if isinstance(e, (AudioChunk, ReplyText)) and e.turn_id == 1]
    assert late == [], "turn 1 kept producing after the barge-in"
    assert any(isinstance(e, FinalTranscript) and e.turn_id == 2 for e in events)


async def test_noise_and_empty_recordings_produce_no_turn(recognizer, synthesizer, voice_lm, tmp_path):
    pipeline = VoicePipeline(voice_lm, synthesizer, recognizer, PipelineConfig(turn_taking="wait"))
    for name in ("noise_doing_the_dishes.wav", "empty_header_only.wav"):
        sink = WavFileSink(tmp_path / f"{name}.wav", synthesizer.sample_rate_hz)
        session = pipeline.session(FileSource(sample(name)), sink)
        events = []
        session.subscribe(events.append)
        assert await asyncio.wait_for(session.run(), timeout=60) == []
        assert not any(isinstance(e, (FinalTranscript, ReplyText, AudioChunk)) for e in events)
        assert sink.samples_written == 0


async def test_replies_started_at_pauses_play_only_after_the_endpoint(recognizer, synthesizer, voice_lm, tmp_path):
    """jfk.wav live: pauses shorter than the hangover start replies that are dropped when the
    speech goes on; each turn publishes one reply, and no audio plays before its endpoint."""
    config = PipelineConfig(turn_taking="barge_in", speculative_reply=True)
    pipeline = VoicePipeline(voice_lm, synthesizer, recognizer, config)
    sink = WavFileSink(tmp_path / "reply.wav", synthesizer.sample_rate_hz, realtime=True)
    source = FileSource(sample("jfk.wav"), realtime=True, tail_silence_ms=1500)
    session = pipeline.session(source, sink)
    events = []
    session.subscribe(events.append)
    traces = await asyncio.wait_for(session.run(), timeout=60)
    assert len(traces) == 3
    for trace in traces:
        turn = [e for e in events if e.turn_id == trace.turn_id]
        assert sum(isinstance(e, FinalTranscript) for e in turn) == 1
        assert sum(isinstance(e, CleanedTranscript) for e in turn) <= 1
        assert sum(isinstance(e, ReplyText) for e in turn) <= 1
        final = next(e for e in turn if isinstance(e, FinalTranscript))
        for e in turn:  # held events are published after the final (stamped when they happened)
            if isinstance(e, (CleanedTranscript, ReplyText, AudioChunk)):
                assert turn.index(e) > turn.index(final)
        if trace.first_tts_audio is not None:
            assert trace.first_tts_audio >= trace.endpoint
            # the LM starts as soon as the pause's transcript is ready, not at the endpoint
            assert trace.cleanup_start - trace.asr_final < 0.05
