"""The voice pipeline: speech in, a spoken reply out, every step published as an event.

One :class:`VoicePipeline` holds the models (shared by every session of the process); each
:class:`VoiceSession` runs one conversation as four stages joined by bounded asyncio queues::

    source ──frames──▶ detect_speech ──speech──▶ transcribe ──utterances──▶ converse ──▶ sink
                       (Silero VAD,              (Whisper interims,          (LM cleanup, LM reply,
                        endpointing, barge-in)    final + filters)            Piper TTS, playback)

Model calls (VAD, Whisper, LM, Piper) run on worker threads; the event loop only moves data.
A full queue makes the stage before it wait, so memory stays bounded on a 10-minute input.

Turn taking (``PipelineConfig.turn_taking``):

- ``"barge_in"`` (live use, ``--realtime``): the user may speak at any time; speech starting while
  a reply is being produced or played cancels it (LM and TTS) and publishes ``Interrupted``.
- ``"wait"`` (a recording processed as fast as possible): after each endpoint the recording is
  paused until the reply is done, as if the speaker waited for the answer.

Latency: the VAD announces a pause ``pause_ms`` into the silence, before the endpoint
(``min_silence_ms``). The final decode starts there and, in ``barge_in`` mode, so do cleanup,
reply and synthesis (``speculative_reply``); their events and audio are held until the endpoint
confirms the turn, and dropped if the user goes on speaking. Voice-to-voice latency is then the
hangover or the processing time, whichever is longer, instead of their sum. In ``barge_in`` mode
the hangover itself is shortened to ``complete_silence_ms`` when the transcript decoded at the
pause reads as a finished turn (``voice.endpointing``: semantic endpointing).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from audio.buffer import StreamBuffer
from audio.frames import PIPELINE_RATE_HZ, AudioFrame
from audio.vad import EndpointDetector, SpeechPause, SpeechStart, VadConfig
from llm.backend import LanguageModel, LanguageModelError, Turn
from voice.asr import AsrConfig, StreamingTranscriber, WhisperRecognizer
from voice.endpointing import reads_as_complete
from voice.events import (
    AudioChunk,
    CleanedTranscript,
    Event,
    FinalTranscript,
    InterimTranscript,
    Interrupted,
    PipelineError,
    ReplyDraft,
    ReplyText,
    SpeechStarted,
    SpeechStopped,
    TraceReady,
    TranscriptRejected,
)
from voice.tracing import TurnTrace
from voice.tts import SpeechSynthesizer, StableSentences

log = logging.getLogger(__name__)

_END = None  # end-of-stream marker on every queue
PLAYBACK_CHUNK_S = 0.1
INTERIM_SILENCE_S = 0.1
"""No interim decode starts after this much trailing silence: the final decode starts soon."""


@dataclass(frozen=True)
class PipelineConfig:
    """Settings of a session.

    Attributes:
        turn_taking: ``"barge_in"`` or ``"wait"`` (see the module docstring).
        reply: ``False`` stops after the final transcript (transcription only: no LM, no TTS).
        cleanup: run LM transcript cleanup before the reply.
        reasoning_effort: ``low``/``medium``/``high`` for both LM calls (see ``llm.effort``).
        interims: publish interim transcripts while the user speaks.
        history_turns: user/assistant exchanges kept as LM context.
        queue_frames: capacity of the frame queues (32 ms frames: 64 ≈ 2 s).
        speculative_reply: with ``barge_in``, start cleanup, reply and synthesis at the VAD pause
            (``speech_pad_ms`` into the silence) instead of at the endpoint, holding the reply's
            events and audio until the endpoint confirms the turn; dropped if the user goes on.
            The hangover then overlaps the LM and TTS work instead of preceding it.
    """

    vad: VadConfig = VadConfig()
    asr: AsrConfig = AsrConfig()
    turn_taking: Literal["barge_in", "wait"] = "barge_in"
    reply: bool = True
    cleanup: bool = True
    reasoning_effort: str = "low"
    interims: bool = True
    history_turns: int = 6
    queue_frames: int = 64
    speculative_reply: bool = True


@dataclass
class TurnState:
    """One user turn as it moves through the stages."""

    turn_id: int
    trace: TurnTrace
    done: asyncio.Event = field(default_factory=asyncio.Event)
    transcript: str = ""


@dataclass
class Utterance:
    """The transcribe stage's output: a turn, its accepted final transcript, and the stream time
    where its audio was cut (``end_s``, which identifies the decode)."""

    turn: TurnState
    text: str
    end_s: float


@dataclass
class Speculation(Utterance):
    """A transcript decoded at a pause, before the endpoint: the reply may start, held back."""


@dataclass
class Discard:
    """The user went on speaking after a pause: drop the reply speculated there."""


@dataclass
class Reply:
    """A reply in the making: its task, the trace it marks, and its gate.

    A reply started at a pause (speculative) holds its events and audio until the endpoint
    :meth:`confirm` s the turn; a reply started at the endpoint is confirmed from the start.
    Once cancelled (barge-in, :meth:`VoiceSession.cancel_reply`) it publishes and plays nothing more, even in the
    loop iteration before the cancellation reaches its tasks.
    """

    turn: TurnState
    end_s: float
    trace: TurnTrace
    confirmed: asyncio.Event = field(default_factory=asyncio.Event)
    held: list = field(default_factory=list)
    task: asyncio.Task | None = None
    stopped: bool = False

    def emit(self, session: "VoiceSession", event: Event) -> None:
        if self.stopped:
            return
        if self.confirmed.is_set():
            session.publish(event)
        else:
            self.held.append(event)

    def confirm(self, session: "VoiceSession") -> None:
        """The endpoint confirmed the turn: adopt its ASR marks, release held events and audio."""
        asr = self.turn.trace
        for name in ("speech_end", "endpoint", "asr_start", "asr_final"):
            setattr(self.trace, name, getattr(asr, name))
        self.trace.hangover_s, self.trace.asr_audio_s, self.trace.asr_decode_s = asr.hangover_s, asr.asr_audio_s, asr.asr_decode_s
        self.trace.speculative = True
        self.turn.trace = self.trace
        self.confirmed.set()
        for event in self.held:
            session.publish(event)
        self.held.clear()

    def cancel(self) -> None:
        self.stopped = True
        if self.task is not None:
            self.task.cancel()

    @property
    def active(self) -> bool:
        """Being produced or played, and not stopped yet."""
        return not self.stopped and self.task is not None and not self.task.done()


class VoicePipeline:
    """The models of the voice pipeline, loaded once and shared by every session.

    Args:
        lm: the language-model backend (``llm.load_backend(...)``); ``None`` only when every
            session runs with ``reply=False``.
        synthesizer: a :class:`voice.tts.SpeechSynthesizer` (``PiperSynthesizer()``).
        recognizer: a :class:`voice.asr.WhisperRecognizer`; created from ``config.asr`` if ``None``.
        tracer: an OpenTelemetry tracer (``voice.tracing.make_tracer``) or ``None``.
    """

    def __init__(
        self,
        lm: LanguageModel | None,
        synthesizer: SpeechSynthesizer | None,
        recognizer: WhisperRecognizer | None = None,
        config: PipelineConfig = PipelineConfig(),
        tracer=None,
    ) -> None:
        if config.reply and (lm is None or synthesizer is None):
            raise ValueError("a pipeline that replies needs a language model and a synthesizer")
        self.lm = lm
        self.synthesizer = synthesizer
        self.recognizer = recognizer or WhisperRecognizer(config.asr)
        self.config = config
        self.tracer = tracer

    def warm_up(self) -> None:
        """Run each model once (blocking) so the first turn does not pay one-time costs
        (ONNX/CTranslate2 first-call allocation, PyTorch kernel selection)."""
        import numpy as np

        self.recognizer.decode(np.zeros(PIPELINE_RATE_HZ, dtype=np.int16))
        if self.synthesizer is not None:
            for _ in self.synthesizer.synthesize("Hello."):
                pass
        if self.lm is not None and self.config.reply:
            self.lm.cleanup("hello there", self.config.reasoning_effort)
            self.lm.respond([], "hello there", self.config.reasoning_effort)

    def close(self) -> None:
        """Release the shared models' resources: the LM's worker threads and processes (after
        the batches in flight). Sessions must have ended; the pipeline is unusable afterwards."""
        if self.lm is not None:
            self.lm.close()

    def session(self, source, sink=None, config: PipelineConfig | None = None) -> "VoiceSession":
        """A conversation reading ``source`` (async iterable of 16 kHz frames) and playing the reply
        audio on ``sink`` (``write``/``interrupt``/``close``; ``None`` = events only)."""
        return VoiceSession(self, source, sink, config or self.config)


class VoiceSession:
    """One conversation: run it with :meth:`run`; receive events through :meth:`subscribe`."""

    def __init__(self, pipeline: VoicePipeline, source, sink, config: PipelineConfig) -> None:
        self.pipeline = pipeline
        self.source = source
        self.sink = sink
        self.config = config
        self.history: list[Turn] = []
        self.traces: list[TurnTrace] = []
        self._subscribers: list[Callable[[Event], None]] = []
        self._spoken: Reply | None = None  # the reply of a spoken turn in progress
        self._detector: EndpointDetector | None = None
        self._typed: Reply | None = None
        self._turn_ids = 0
        self._tasks: set[asyncio.Task] = set()  # every task started outside the stage group
        self._run_task: asyncio.Task | None = None
        self._closed = False

    def subscribe(self, callback: Callable[[Event], None]) -> None:
        """Call ``callback(event)`` on the event loop for every event, in order."""
        self._subscribers.append(callback)

    def publish(self, event: Event) -> None:
        """Hand ``event`` to every subscriber (nothing after :meth:`close`)."""
        if self._closed:
            return
        for callback in self._subscribers:
            try:
                callback(event)
            except Exception:  # a broken subscriber must not stop the conversation
                log.exception("event subscriber failed on %s", event.type)

    # -- the pipeline, top to bottom ----------------------------------------------------------

    async def run(self) -> list[TurnTrace]:
        """Run until the source ends and the last reply (spoken or typed) is done; return the
        turn traces. Cancelling it (or :meth:`close`) cancels and awaits every task the session
        started: stages, interim and final decodes, replies.

        Raises:
            audio.AudioError: the source failed (unreadable file, device error).
        """
        size = self.config.queue_frames
        frames: asyncio.Queue = asyncio.Queue(size)
        speech: asyncio.Queue = asyncio.Queue(size)
        utterances: asyncio.Queue = asyncio.Queue(4)
        self._run_task = asyncio.current_task()
        finished = False
        try:
            async with asyncio.TaskGroup() as stages:
                stages.create_task(self._read_source(frames))
                stages.create_task(self._detect_speech(frames, speech))
                stages.create_task(self._transcribe(speech, utterances))
                stages.create_task(self._converse(utterances))
            while typed := [t for t in self._tasks if not t.done()]:  # a typed reply still playing
                await asyncio.wait(typed)
            finished = True
        except BaseExceptionGroup as group:  # report the first real failure, not the group
            raise group.exceptions[0] from None
        finally:
            if not finished:
                await self._cancel_tasks()
            if self.sink is not None:
                await self.sink.close()
        return self.traces

    def close(self) -> None:
        """End the conversation now: no event is published any more, and every task of the
        session (including :meth:`run`) is cancelled; :meth:`run` returns once they have ended."""
        self._closed = True
        for task in [*self._tasks, self._run_task]:
            if task is not None and not task.done():
                task.cancel()

    async def _cancel_tasks(self) -> None:
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:  # shielded: a second cancellation must not leave them behind
            await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))

    def _spawn(self, coro, name: str) -> asyncio.Task:
        """Start a task the session owns (cancelled with it)."""
        task = asyncio.create_task(coro, name=f"quicksilver {name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _read_source(self, frames: asyncio.Queue) -> None:
        """Stage 1: frames from the source (file, microphone, network)."""
        async for frame in self.source:
            await frames.put(frame)
        await frames.put(_END)  # on failure the exception ends the session instead

    async def _detect_speech(self, frames: asyncio.Queue, speech: asyncio.Queue) -> None:
        """Stage 2: Silero VAD endpointing; forwards frames and speech start/end; barge-in."""
        detector = self._detector = EndpointDetector(self.config.vad)
        turn: TurnState | None = None
        while (frame := await frames.get()) is not _END:
            await speech.put(frame)
            for event in await asyncio.to_thread(detector.process, frame):
                turn = await self._on_vad_event(event, turn, speech)
        for event in detector.flush():
            turn = await self._on_vad_event(event, turn, speech)
        await speech.put(_END)

    async def _on_vad_event(self, event, turn: TurnState | None, speech: asyncio.Queue) -> TurnState | None:
        if isinstance(event, SpeechStart):
            self._turn_ids += 1
            turn = TurnState(self._turn_ids, TurnTrace(self._turn_ids))
            self.publish(SpeechStarted(turn_id=turn.turn_id, stream_s=event.start_s))
            self._barge_in(event.detected_s)
            await speech.put((event, turn))
            return turn
        if isinstance(event, SpeechPause):
            await speech.put((event, turn))
            return turn
        # SpeechEnd: the endpoint. The true end of speech is one hangover earlier.
        now = time.monotonic()
        turn.trace.mark("endpoint", now)
        turn.trace.mark("speech_end", now - event.hangover_s)
        turn.trace.hangover_s = event.hangover_s
        self.publish(SpeechStopped(turn_id=turn.turn_id, stream_s=event.detected_s, speech_end_s=event.speech_end_s))
        await speech.put((event, turn))
        if self.config.turn_taking == "wait":
            await turn.done.wait()  # the recording pauses while the assistant answers
        return None

    async def _transcribe(self, speech: asyncio.Queue, utterances: asyncio.Queue) -> None:
        """Stage 3: Whisper interims while the user speaks, one filtered final per utterance.

        At a pause (``SpeechPause``) the utterance is decoded at once; when the endpoint confirms
        that pause, that decode is the final, so the final is usually ready at the endpoint.
        """
        preroll = StreamBuffer(max_s=2.0)
        transcriber: StreamingTranscriber | None = None
        interim: asyncio.Task | None = None
        early_final: tuple[float, asyncio.Task] | None = None  # (utterance end_s, decode)
        while (item := await speech.get()) is not _END:
            if isinstance(item, AudioFrame):
                preroll.append(item)
                if transcriber is None:
                    continue
                transcriber.extend(item.samples)
                idle = interim is None or interim.done()
                voiced = self._detector.trailing_silence_s < INTERIM_SILENCE_S  # keep Whisper free for the final
                if self.config.interims and early_final is None and idle and voiced and transcriber.interim_due():
                    interim = self._spawn(self._publish_interim(turn, transcriber), f"interim {turn.turn_id}")
                continue
            event, turn = item
            if isinstance(event, SpeechStart):
                transcriber = StreamingTranscriber(self.pipeline.recognizer, self.config.asr)
                transcriber.extend(preroll.slice(event.start_s))
                continue
            audio = transcriber.audio()[: round((event.end_s - event.start_s) * PIPELINE_RATE_HZ)]
            if early_final is not None and early_final[0] != event.end_s:
                early_final[1].cancel()  # speech went on after the last pause: no speculation from it
                await utterances.put(Discard())
                early_final = None
            if isinstance(event, SpeechPause):
                decode = self._spawn(self._decode_at_pause(turn, transcriber, audio, event, utterances), f"decode {turn.turn_id}")
                early_final = (event.end_s, decode)
                continue
            # SpeechEnd: the endpoint. Use the decode started at the pause if it covers this end.
            if early_final is not None:
                decode = early_final[1]
            else:
                decode = self._spawn(self._decode_final(turn, transcriber, audio), f"final {turn.turn_id}")
            transcriber = interim = early_final = None
            await self._finalize(turn, await decode, event.end_s, utterances)
        await utterances.put(_END)

    async def _publish_interim(self, turn: TurnState, transcriber: StreamingTranscriber) -> None:
        try:
            interim = await transcriber.interim()
        except Exception as exc:  # an interim is optional: report it, keep listening
            log.exception("interim decode failed")
            self.publish(PipelineError(turn_id=turn.turn_id, stage="asr", message=f"interim: {exc}"))
            return
        self.publish(InterimTranscript(turn_id=turn.turn_id, committed=interim.committed, tentative=interim.tentative))

    async def _decode_final(self, turn: TurnState, transcriber: StreamingTranscriber, audio):
        """The final decode of ``audio``; returns (hypothesis, rejection reason, start, end)."""
        started = time.monotonic()
        hyp, rejected = await transcriber.final(audio)
        return hyp, rejected, started, time.monotonic()

    async def _decode_at_pause(self, turn, transcriber, audio, pause: SpeechPause, utterances: asyncio.Queue):
        """The final decode started at a pause; an accepted transcript may start a held reply,
        and one that reads as a finished turn lets the VAD end the turn early."""
        decoded = await self._decode_final(turn, transcriber, audio)
        hyp, rejected = decoded[0], decoded[1]
        if not rejected and self._ends_early and reads_as_complete(hyp.text):
            self._detector.end_early(pause.speech_end_s)
        if not rejected and self._speculates:
            await utterances.put(Speculation(turn, hyp.text, pause.end_s))
        return decoded

    @property
    def _ends_early(self) -> bool:
        # live only: a recording fed faster than real time would race the decode against the VAD
        return self.config.turn_taking == "barge_in" and self.config.vad.complete_silence_ms is not None

    @property
    def _speculates(self) -> bool:
        c = self.config
        return c.reply and c.speculative_reply and c.turn_taking == "barge_in"

    async def _finalize(self, turn: TurnState, decoded, end_s: float, utterances: asyncio.Queue) -> None:
        hyp, rejected, started, finished = decoded
        trace = turn.trace
        trace.mark("asr_start", started)
        trace.mark("asr_final", finished)
        trace.asr_audio_s, trace.asr_decode_s = hyp.audio_s, hyp.decode_s
        if rejected:
            self.publish(TranscriptRejected(turn_id=turn.turn_id, text=hyp.text, reason=rejected))
            self._finish_turn(turn, publish_trace=False)
            return
        turn.transcript = hyp.text
        self.publish(FinalTranscript(turn_id=turn.turn_id, text=hyp.text, avg_logprob=hyp.avg_logprob, no_speech_prob=hyp.no_speech_prob))
        if not self.config.reply:
            self._finish_turn(turn)
            return
        await utterances.put(Utterance(turn, hyp.text, end_s))

    async def _converse(self, utterances: asyncio.Queue) -> None:
        """Stage 4: for each turn, LM cleanup → LM reply → TTS → sink, as a cancellable task.

        A :class:`Speculation` starts a held reply; the turn's :class:`Utterance` confirms it (same
        cut) or replaces it; :class:`Discard` drops it.
        """
        pending: Reply | None = None
        while (item := await utterances.get()) is not _END:
            if isinstance(item, Speculation):
                if pending is not None:
                    pending.cancel()
                pending = self._start_reply(item, confirmed=False)
                continue
            if isinstance(item, Discard):
                if pending is not None:
                    pending.cancel()
                pending = None
                continue
            if pending is not None and pending.turn is item.turn and pending.end_s == item.end_s:
                reply = pending
                reply.confirm(self)
            else:
                if pending is not None:
                    pending.cancel()
                reply = self._start_reply(item, confirmed=True)
            pending = None
            self._spoken = reply
            await asyncio.wait([reply.task])  # barge-in cancels the task, not this stage
            if not reply.task.cancelled() and (error := reply.task.exception()) is not None:
                log.error("reply failed", exc_info=error)
                self.publish(PipelineError(turn_id=item.turn.turn_id, stage="reply", message=repr(error)))
            self._spoken = None
            self._finish_turn(item.turn)
        if pending is not None:  # the stream ended after a pause the endpoint never confirmed
            pending.cancel()

    def _start_reply(self, utterance: Utterance, confirmed: bool) -> Reply:
        trace = utterance.turn.trace if confirmed else TurnTrace(utterance.turn.turn_id)
        reply = Reply(utterance.turn, utterance.end_s, trace)
        if confirmed:
            reply.confirmed.set()
        reply.task = self._spawn(self._reply(reply, utterance.text), f"reply {utterance.turn.turn_id}")
        return reply

    # -- typed turns and cancellation (the server's input.text / response.cancel) -----------

    def reply_to_text(self, text: str) -> int:
        """Answer a typed user turn like a spoken one: reply drafts, reply text, speech on the
        sink and a trace (no ASR, no cleanup). A reply still in progress is cancelled first.
        Call on the event loop; returns the new turn's id. The trace is published when the reply
        ends, also when it is cancelled before it started."""
        self.cancel_reply()
        self._turn_ids += 1
        turn = TurnState(self._turn_ids, TurnTrace(self._turn_ids))
        reply = Reply(turn, 0.0, turn.trace)
        reply.confirmed.set()
        reply.task = self._spawn(self._reply(reply, text, cleanup=False), f"typed reply {turn.turn_id}")
        reply.task.add_done_callback(lambda task: self._typed_reply_done(turn, task))
        self._typed = reply
        return turn.turn_id

    def cancel_reply(self, stream_s: float = 0.0) -> bool:
        """Stop the reply being produced or played (spoken or typed turn): cancel its LM and TTS
        work, cut the sink, publish ``Interrupted``. Returns whether there was one."""
        interrupted = []
        # a cancelled reply may take a while to end (the LM finishes its current step on its
        # thread): it is interrupted once, not again by the next speech start
        for reply in (self._spoken, self._typed):
            if reply is not None and reply.active:
                reply.cancel()
                interrupted.append(reply.turn)
        self._typed = None
        if not interrupted:
            return False
        if self.sink is not None and hasattr(self.sink, "interrupt"):
            self.sink.interrupt()
        for turn in interrupted:
            turn.trace.interrupted = True
            self.publish(Interrupted(turn_id=turn.turn_id, stream_s=stream_s))
        return True

    def _typed_reply_done(self, turn: TurnState, task: asyncio.Task) -> None:
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("typed reply failed", exc_info=error)
            self.publish(PipelineError(turn_id=turn.turn_id, stage="reply", message=repr(error)))
        self._finish_turn(turn)

    # -- one reply ----------------------------------------------------------------------------

    async def _reply(self, reply: Reply, transcript: str, cleanup: bool = True) -> None:
        lm, effort, trace, turn_id = self.pipeline.lm, self.config.reasoning_effort, reply.trace, reply.turn.turn_id
        try:
            user_text = transcript
            if self.config.cleanup and cleanup:
                trace.mark("cleanup_start")
                user_text = (await lm.acleanup(transcript, effort)).strip() or transcript
                trace.mark("cleanup_done")
                reply.emit(self, CleanedTranscript(turn_id=turn_id, text=user_text))
            sentences: asyncio.Queue = asyncio.Queue(8)
            async with asyncio.TaskGroup() as tg:
                text = tg.create_task(self._generate_reply(reply, user_text, sentences))
                tg.create_task(self._speak(reply, sentences))
            self.history += [Turn("user", user_text), Turn("assistant", text.result())]
            del self.history[: -2 * self.config.history_turns]
        except* (LanguageModelError, ValueError) as group:
            reply.emit(self, PipelineError(turn_id=turn_id, stage="llm", message=str(group.exceptions[0])))

    async def _generate_reply(self, reply: Reply, user_text: str, sentences: asyncio.Queue) -> str:
        """LM reply drafts → settled sentences on ``sentences``; returns the final reply text."""
        trace, turn_id, stable, draft, index = reply.trace, reply.turn.turn_id, StableSentences(), "", 0
        trace.mark("llm_start")
        try:
            async for draft in self.pipeline.lm.astream_respond(self.history, user_text, self.config.reasoning_effort):
                trace.mark("first_reply_draft")
                reply.emit(self, ReplyDraft(turn_id=turn_id, text=draft, index=index))
                index += 1
                for sentence in stable.update(draft):
                    await sentences.put(sentence)
            trace.mark("reply_done")
            if not draft.strip():
                raise LanguageModelError("the language model returned an empty reply")
            reply.emit(self, ReplyText(turn_id=turn_id, text=draft.strip()))
            for sentence in stable.finish(draft):
                await sentences.put(sentence)
        finally:
            await sentences.put(_END)
        return draft.strip()

    async def _speak(self, reply: Reply, sentences: asyncio.Queue) -> None:
        """Synthesise each sentence (worker thread) and play it; the first plays while the rest
        is synthesised. Nothing plays before the turn is confirmed."""
        synthesizer, trace, turn_id = self.pipeline.synthesizer, reply.trace, reply.turn.turn_id
        rate = synthesizer.sample_rate_hz
        played_s = 0.0
        while (sentence := await sentences.get()) is not _END:
            trace.mark("tts_start")
            chunks = iter(synthesizer.synthesize(sentence))
            while True:
                started = time.perf_counter()
                pcm = await asyncio.to_thread(next, chunks, None)
                if pcm is None:
                    break
                trace.tts_synth_s += time.perf_counter() - started
                trace.tts_audio_s += len(pcm) / rate
                await reply.confirmed.wait()
                step = int(PLAYBACK_CHUNK_S * rate)
                for i in range(0, len(pcm), step):
                    if reply.stopped:  # barged in: the cancellation has not reached this task yet
                        return
                    frame = AudioFrame(pcm[i : i + step], rate, played_s)
                    played_s += frame.duration_s
                    trace.mark("first_tts_audio")
                    self.publish(AudioChunk(turn_id=turn_id, frame=frame, text=sentence))
                    if self.sink is not None:
                        await self.sink.write(frame)
        trace.mark("tts_done")

    # -- turn bookkeeping ---------------------------------------------------------------------

    def _barge_in(self, stream_s: float) -> None:
        """Speech started: cancel a reply that is being produced or played."""
        if self.config.turn_taking == "barge_in":
            self.cancel_reply(stream_s)

    def _finish_turn(self, turn: TurnState, publish_trace: bool = True) -> None:
        """A turn is over (answered, interrupted, or rejected as non-speech): trace it, release it."""
        if publish_trace:
            self.traces.append(turn.trace)
            if self.pipeline.tracer is not None:
                turn.trace.export(self.pipeline.tracer)
            self.publish(TraceReady(turn_id=turn.turn_id, trace=turn.trace.to_dict()))
        turn.done.set()
