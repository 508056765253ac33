"""Typed turns and reply cancellation for a ``voice.pipeline.VoiceSession`` (a thin adapter).

``VoiceSession`` answers audio only and cancels a reply only on barge-in. The server also needs
to answer ``input.text`` and to cancel on ``response.cancel``; until the session offers both as
public methods, this module does it with the session's public pieces (``publish``, ``history``,
the shared models) and, where there is no public way, the attributes named here:
``_turn_ids`` (turn numbering), ``_reply_task`` and ``_barge_in`` (the voice reply).
"""

from __future__ import annotations

import asyncio

from audio.frames import AudioFrame
from llm.backend import LanguageModelError, Turn
from voice.events import AudioChunk, Interrupted, PipelineError, ReplyDraft, ReplyText, TraceReady
from voice.tracing import TurnTrace
from voice.tts import StableSentences

PLAYBACK_CHUNK_S = 0.1


async def answer_text(session, text: str) -> None:
    """Answer a typed user turn like a spoken one: reply drafts, reply text, speech on the
    session's sink, a trace (no ASR, no cleanup). Cancel the task to stop it."""
    session._turn_ids += 1
    turn_id = session._turn_ids
    trace = TurnTrace(turn_id)
    lm, synthesizer, effort = session.pipeline.lm, session.pipeline.synthesizer, session.config.reasoning_effort
    stable, draft, index, played_s = StableSentences(), "", 0, 0.0
    rate = synthesizer.sample_rate_hz

    async def speak(sentence: str) -> None:
        nonlocal played_s
        trace.mark("tts_start")
        chunks = iter(synthesizer.synthesize(sentence))
        while (pcm := await asyncio.to_thread(next, chunks, None)) is not None:
            step = int(PLAYBACK_CHUNK_S * rate)
            for i in range(0, len(pcm), step):
                frame = AudioFrame(pcm[i : i + step], rate, played_s)
                played_s += frame.duration_s
                trace.mark("first_tts_audio")
                session.publish(AudioChunk(turn_id=turn_id, frame=frame, text=sentence))
                if session.sink is not None:
                    await session.sink.write(frame)

    try:
        trace.mark("llm_start")
        pending: list[str] = []
        async for draft in lm.astream_respond(session.history, text, effort):
            trace.mark("first_reply_draft")
            session.publish(ReplyDraft(turn_id=turn_id, text=draft, index=index))
            index += 1
            pending += stable.update(draft)
        trace.mark("reply_done")
        if not draft.strip():
            raise LanguageModelError("the language model returned an empty reply")
        session.publish(ReplyText(turn_id=turn_id, text=draft.strip()))
        for sentence in pending + stable.finish(draft):
            await speak(sentence)
        trace.mark("tts_done")
        session.history += [Turn("user", text), Turn("assistant", draft.strip())]
    except (LanguageModelError, ValueError) as exc:
        session.publish(PipelineError(turn_id=turn_id, stage="llm", message=str(exc)))
    finally:
        session.publish(TraceReady(turn_id=turn_id, trace=trace.to_dict()))


def cancel_reply(session, typed: asyncio.Task | None, sink, stream_s: float | None) -> None:
    """Stop the reply being produced or played: a typed reply's task, or the voice reply."""
    if session is None:
        return
    if typed is not None and not typed.done():
        typed.cancel()
        if sink is not None:
            sink.interrupt()
        session.publish(Interrupted(turn_id=session._turn_ids, stream_s=stream_s or 0.0))
        return
    task = getattr(session, "_reply_task", None)
    if task is not None and not task.done():
        session._barge_in(stream_s or 0.0)


def orphaned_reply_task(session) -> asyncio.Task | None:
    """The voice reply task, which cancelling ``VoiceSession.run`` does not cancel."""
    return getattr(session, "_reply_task", None) if session is not None else None
