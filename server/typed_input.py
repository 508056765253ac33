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


class TypedReply:
    """A typed user turn answered like a spoken one: reply drafts, reply text, speech on the
    session's sink, and a trace (no ASR, no cleanup). Starts at once; :meth:`cancel` stops it.

    The turn's ``turn.trace`` is published when the task ends, even when it is cancelled before
    it ran, unless :attr:`silent` is set (the connection is closing).
    """

    def __init__(self, session, text: str) -> None:
        session._turn_ids += 1
        self.session = session
        self.turn_id = session._turn_ids
        self.trace = TurnTrace(self.turn_id)
        self.silent = False
        self.task = asyncio.create_task(self._answer(text), name=f"quicksilver typed reply {self.turn_id}")
        self.task.add_done_callback(self._finished)

    def done(self) -> bool:
        return self.task.done()

    def cancel(self, sink=None) -> None:
        """Stop the reply (``response.cancel`` or barge-in) and publish ``Interrupted``."""
        if self.task.done():
            return
        self.task.cancel()
        self.trace.interrupted = True
        if sink is not None:
            sink.interrupt()
        self.session.publish(Interrupted(turn_id=self.turn_id, stream_s=0.0))

    def _finished(self, task: asyncio.Task) -> None:
        if not self.silent:
            self.session.publish(TraceReady(turn_id=self.turn_id, trace=self.trace.to_dict()))

    async def _answer(self, text: str) -> None:
        session, trace, turn_id = self.session, self.trace, self.turn_id
        lm, synthesizer = session.pipeline.lm, session.pipeline.synthesizer
        stable, draft, index = StableSentences(), "", 0
        try:
            trace.mark("llm_start")
            pending: list[str] = []
            async for draft in lm.astream_respond(session.history, text, session.config.reasoning_effort):
                trace.mark("first_reply_draft")
                session.publish(ReplyDraft(turn_id=turn_id, text=draft, index=index))
                index += 1
                pending += stable.update(draft)
            trace.mark("reply_done")
            if not draft.strip():
                raise LanguageModelError("the language model returned an empty reply")
            session.publish(ReplyText(turn_id=turn_id, text=draft.strip()))
            for sentence in pending + stable.finish(draft):
                await self._speak(sentence, synthesizer)
            trace.mark("tts_done")
            session.history += [Turn("user", text), Turn("assistant", draft.strip())]
        except (LanguageModelError, ValueError) as exc:
            session.publish(PipelineError(turn_id=turn_id, stage="llm", message=str(exc)))

    async def _speak(self, sentence: str, synthesizer) -> None:
        rate, step = synthesizer.sample_rate_hz, int(PLAYBACK_CHUNK_S * synthesizer.sample_rate_hz)
        self.trace.mark("tts_start")
        chunks = iter(synthesizer.synthesize(sentence))
        while (pcm := await asyncio.to_thread(next, chunks, None)) is not None:
            for i in range(0, len(pcm), step):
                frame = AudioFrame(pcm[i : i + step], rate, 0.0)
                self.trace.mark("first_tts_audio")
                self.session.publish(AudioChunk(turn_id=self.turn_id, frame=frame, text=sentence))
                if self.session.sink is not None:
                    await self.session.sink.write(frame)


def cancel_reply(session, typed: TypedReply | None, sink, stream_s: float | None) -> None:
    """Stop the reply being produced or played: a typed reply, or the voice reply."""
    if session is None:
        return
    if typed is not None and not typed.done():
        typed.cancel(sink)
        return
    task = getattr(session, "_reply_task", None)
    if task is not None and not task.done():
        session._barge_in(stream_s or 0.0)


def orphaned_reply_task(session) -> asyncio.Task | None:
    """The voice reply task, which cancelling ``VoiceSession.run`` does not cancel."""
    return getattr(session, "_reply_task", None) if session is not None else None
