"""voice.pipeline.VoiceSession lifecycle on real speech with the real models: speculative replies
dropped when the user goes on speaking, and no task left behind by a cancelled or closed session."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from audio.decode import decode_file
from audio.sinks import WavFileSink
from audio.sources import QueueSource
from audio.vad import VadConfig
from conftest_voice import recognizer, sample, synthesizer, voice_lm  # noqa: F401 - fixtures
from voice.events import (
    AudioChunk,
    CleanedTranscript,
    FinalTranscript,
    Interrupted,
    ReplyDraft,
    ReplyText,
    SpeechStarted,
    TraceReady,
)
from voice.metrics import word_error_rate
from voice.pipeline import PipelineConfig, VoicePipeline

pytestmark = pytest.mark.slow


class CountingLM:
    """The real LM backend, recording the transcripts it was asked to clean up."""

    def __init__(self, lm) -> None:
        self.lm = lm
        self.cleanups: list[str] = []
        self.cleanup_called = asyncio.Event()

    def __getattr__(self, name):
        return getattr(self.lm, name)

    async def acleanup(self, text, effort="low"):
        self.cleanups.append(text)
        self.cleanup_called.set()
        return await self.lm.acleanup(text, effort)


def other_tasks() -> set[asyncio.Task]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


async def wait_for(event: asyncio.Event, what: str, timeout_s: float = 60) -> None:
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except TimeoutError:
        pytest.fail(f"no {what} within {timeout_s:g} s")


async def test_reply_speculated_at_a_pause_is_dropped_when_the_user_goes_on(recognizer, synthesizer, voice_lm):
    """"go forward ten meters" … (a pause; the reply starts, held) … "one two three": one turn, one
    final covering both, and only the reply to the whole utterance is published."""
    lm = CountingLM(voice_lm)
    config = PipelineConfig(turn_taking="barge_in", vad=VadConfig(min_silence_ms=2000, complete_silence_ms=None))
    source = QueueSource()
    session = VoicePipeline(lm, synthesizer, recognizer, config).session(source)
    events = []
    session.subscribe(events.append)
    before = other_tasks()
    run = asyncio.create_task(session.run())
    await source.push(decode_file(sample("goforward_16k_s16le.raw"), raw_rate_hz=16000))
    await source.push(np.zeros(8000, np.int16))  # 0.5 s: a pause, far from the 2 s endpoint
    await wait_for(lm.cleanup_called, "speculative cleanup at the pause")  # the held reply is under way
    lm.cleanup_called.clear()
    await source.push(decode_file(sample("english_one_two_three.wav")))  # the user goes on
    await source.push(np.zeros(48000, np.int16))
    await source.end()
    traces = await asyncio.wait_for(run, timeout=120)

    assert len(traces) == 1 and traces[0].speculative  # the reply to the whole turn started at its last pause
    assert [type(e) for e in events if isinstance(e, (SpeechStarted, FinalTranscript))] == [SpeechStarted, FinalTranscript]
    final = next(e for e in events if isinstance(e, FinalTranscript))
    assert word_error_rate("go forward ten meters one two three", final.text) <= 0.15, final.text
    assert len(lm.cleanups) >= 2 and word_error_rate("go forward ten meters", lm.cleanups[0]) <= 0.25, lm.cleanups
    published = [e for e in events if isinstance(e, (CleanedTranscript, ReplyText))]
    assert [type(e) for e in published] == [CleanedTranscript, ReplyText]  # the dropped reply published nothing
    assert all(events.index(e) > events.index(final) for e in events if isinstance(e, (CleanedTranscript, ReplyDraft, AudioChunk)))
    assert word_error_rate("go forward ten meters one two three", published[0].text) <= 0.15, published[0].text
    assert sum(isinstance(e, TraceReady) for e in events) == 1
    assert other_tasks() == before, "tasks left behind"


async def test_cancelling_run_mid_reply_leaves_no_task(recognizer, synthesizer, voice_lm):
    session = VoicePipeline(voice_lm, synthesizer, recognizer, PipelineConfig(turn_taking="barge_in")).session(QueueSource())
    replying = asyncio.Event()
    session.subscribe(lambda e: replying.set() if isinstance(e, (ReplyDraft, AudioChunk)) else None)
    before = other_tasks()
    run = asyncio.create_task(session.run())
    await session.source.push(decode_file(sample("goforward_16k_s16le.raw"), raw_rate_hz=16000))
    await session.source.push(np.zeros(32000, np.int16))  # no end(): the session would go on listening
    await wait_for(replying, "reply")
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert other_tasks() == before, f"tasks left after cancelling run(): {other_tasks() - before}"


async def test_typed_reply_is_answered_cancelled_and_closed_without_leftovers(recognizer, synthesizer, voice_lm):
    session = VoicePipeline(voice_lm, synthesizer, recognizer, PipelineConfig(turn_taking="barge_in")).session(QueueSource())
    events = []
    done = asyncio.Event()
    session.subscribe(lambda e: (events.append(e), isinstance(e, TraceReady) and done.set()))
    before = other_tasks()
    run = asyncio.create_task(session.run())
    turn_id = session.reply_to_text("What can you help me with today?")
    await wait_for(done, "typed reply trace")
    kinds = [type(e) for e in events if e.turn_id == turn_id]
    assert kinds[0] is ReplyDraft and ReplyText in kinds and AudioChunk in kinds and kinds[-1] is TraceReady
    assert session.cancel_reply() is False  # nothing left to cancel
    second = session.reply_to_text("Tell me a long story about the sea.")
    assert session.cancel_reply() is True
    session.close()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert second == turn_id + 1 and session.traces[-1].interrupted
    assert other_tasks() == before, f"tasks left after close(): {other_tasks() - before}"


async def test_no_audio_is_published_after_the_interrupt(recognizer, synthesizer, voice_lm, tmp_path):
    """Cancelled at its first audio chunk, a reply plays nothing more — also when the sink never
    suspends, so the cancellation has not reached the playing task yet (a race CI once hit)."""
    sink = WavFileSink(tmp_path / "reply.wav", synthesizer.sample_rate_hz)  # not real time: write() never waits
    session = VoicePipeline(voice_lm, synthesizer, recognizer, PipelineConfig(turn_taking="barge_in")).session(QueueSource(), sink)
    events = []
    done = asyncio.Event()

    def on_event(event):
        events.append(event)
        if isinstance(event, AudioChunk) and not any(isinstance(e, Interrupted) for e in events):
            assert session.cancel_reply(stream_s=1.0) is True
        if isinstance(event, TraceReady):
            done.set()

    session.subscribe(on_event)
    run = asyncio.create_task(session.run())
    turn_id = session.reply_to_text("Tell me a long story about the sea.")
    await wait_for(done, "trace of the interrupted reply")
    session.close()
    with pytest.raises(asyncio.CancelledError):
        await run
    kinds = [type(e) for e in events if e.turn_id == turn_id]
    cut = kinds.index(Interrupted)
    assert kinds[cut - 1] is AudioChunk and kinds.count(AudioChunk) == 1
    assert kinds[cut + 1 :] == [TraceReady], kinds[cut + 1 :]
    assert session.traces[-1].interrupted and session.traces[-1].tts_done is None
