"""One ``/ws`` connection: one voice pipeline session, driven by the protocol of
:mod:`server.protocol`.

Three kinds of tasks per connection, all owned here and all cancelled when it closes:

- the receive loop (the connection handler itself): client messages → :class:`ClientStream` →
  audio pushed into the session's :class:`audio.sources.QueueSource`, or a control action;
- the sender: the one task that writes to the websocket, from an outbox queue, so pipeline
  events (published synchronously) and reply audio keep their order;
- the pipeline session (``VoiceSession.run``, which owns its typed-input replies) and cleanup requests
  (answered by :class:`server.cleanup_service.CleanupService`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
from dataclasses import dataclass

from websockets.exceptions import ConnectionClosed

from audio.frames import AudioFrame
from audio.sources import QueueSource
from server import protocol
from server.cleanup_service import CleanupService
from server.metrics import ServerMetrics
from voice.events import event_to_dict

log = logging.getLogger(__name__)

_CLOSE = object()  # outbox marker: close the connection after what is queued
_session_ids = itertools.count(1)


@dataclass(frozen=True)
class SessionLimits:
    """Per-session limits (the ``serve`` command's flags).

    Attributes:
        idle_timeout_s: close a session after this long without a client message or an event.
        audio_lead_s: how far ahead of real time reply audio is sent (the client's buffer).
        teardown_timeout_s: how long closing waits for the session's tasks to end.
    """

    idle_timeout_s: float = 60.0
    audio_lead_s: float = 0.5
    teardown_timeout_s: float = 1.0


class WebSocketAudioSink:
    """Reply audio → binary messages on the outbox, paced to at most ``lead_s`` ahead of real
    time, so the reply lasts as long as it plays and barge-in can still cut it."""

    def __init__(self, connection: "VoiceConnection", lead_s: float) -> None:
        self.connection = connection
        self.lead_s = lead_s
        self._play_until = 0.0

    async def write(self, frame: AudioFrame) -> None:
        self.connection.send_audio(frame)
        now = time.monotonic()
        self._play_until = max(self._play_until, now) + frame.duration_s
        ahead = self._play_until - now - self.lead_s
        if ahead > 0:
            await asyncio.sleep(ahead)

    def interrupt(self) -> None:
        self._play_until = 0.0

    async def close(self) -> None:
        pass


class VoiceConnection:
    """Serves one ``/ws`` connection; :meth:`run` returns when it is closed and every task of
    the session has ended.

    Attributes:
        sent_after_close: messages the session tried to send after the connection closed
            (dropped; a test asserts it stays 0).
        tasks: every task this session started (for the no-task-left check).
    """

    def __init__(self, websocket, pipeline, metrics: ServerMetrics, limits: SessionLimits,
                 interims_allowed=lambda: True, cleanup: CleanupService | None = None) -> None:
        self.websocket = websocket
        self.pipeline = pipeline
        self.metrics = metrics
        self.cleanup = cleanup or CleanupService(pipeline.lm, metrics)
        self.subscribers: list = []  # more subscribers of the voice session (the MQTT publisher)
        self.limits = limits
        self.session_id = f"s{next(_session_ids)}"
        self.stream = protocol.ClientStream()
        self.source: QueueSource | None = None
        self.session = None  # voice.pipeline.VoiceSession after session.start
        self.sink = WebSocketAudioSink(self, limits.audio_lead_s)
        self.interims_allowed = interims_allowed
        self.tasks: list[asyncio.Task] = []
        self.sent_after_close = 0
        self.closed = False
        self._outbox: asyncio.Queue = asyncio.Queue()
        self._audio_turn: int | None = None
        self._audio_samples = 0
        self._speech_start_s: float | None = None
        self._last_activity = time.monotonic()

    # -- sending -----------------------------------------------------------------------------

    def send(self, message: dict) -> None:
        """Queue a JSON event for the client (never blocks)."""
        if self.closed:
            self.sent_after_close += 1
            return
        if message["type"] == "error":
            self.metrics.errors.labels(message["code"]).inc()
        self._outbox.put_nowait(protocol.encode(message))

    def send_audio(self, frame: AudioFrame) -> None:
        if self.closed:
            self.sent_after_close += 1
            return
        self._audio_samples += len(frame.samples)
        self._outbox.put_nowait(frame.samples.astype("<i2").tobytes())

    def close_after_queued(self, code: int = 1000, reason: str = "") -> None:
        if not self.closed:
            self._outbox.put_nowait((_CLOSE, code, reason))

    async def _send_loop(self) -> None:
        while True:
            item = await self._outbox.get()
            self._last_activity = time.monotonic()
            if isinstance(item, tuple) and item[0] is _CLOSE:
                await self.websocket.close(item[1], item[2])
                return
            try:
                await self.websocket.send(item)
            except ConnectionClosed:
                return

    # -- pipeline events -> protocol events -------------------------------------------------

    def on_event(self, event) -> None:
        """Subscriber of the voice session: every event, in order, on the event loop."""
        self._last_activity = time.monotonic()
        data = event_to_dict(event)
        kind = data["type"]
        if kind == "audio":
            if self._audio_turn != event.turn_id:
                self._end_audio()
                self._audio_turn, self._audio_samples = event.turn_id, 0
                self.send({"type": "audio.start", "turn_id": event.turn_id, "sample_rate": data["sample_rate_hz"],
                           "format": "pcm16", "channels": 1})
            return
        if kind == "speech_started":
            self._speech_start_s = event.stream_s
        if kind == "speech_stopped" and self._speech_start_s is not None:
            max_s = self.session.config.vad.max_speech_s
            if event.speech_end_s - self._speech_start_s >= max_s - 0.05:  # cut by the VAD, not a pause
                self.send(protocol.error_message(
                    "utterance_too_long", f"an utterance is cut at {max_s:g} s; what follows is a new turn",
                    turn_id=event.turn_id))
        if kind in ("trace", "interrupted", "error") and self._audio_turn == event.turn_id:
            self._end_audio(interrupted=kind == "interrupted")
        if kind == "trace":
            self.metrics.observe_trace(data["trace"])
        message = protocol.event_message(data)
        if message is not None:
            self.send(message)

    def _end_audio(self, interrupted: bool = False) -> None:
        if self._audio_turn is None:
            return
        rate = self.pipeline.synthesizer.sample_rate_hz
        self.send({"type": "audio.end", "turn_id": self._audio_turn, "samples": self._audio_samples,
                   "duration_s": round(self._audio_samples / rate, 3), "interrupted": interrupted})
        self._audio_turn = None

    # -- receiving ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the connection until it closes; then cancel and await every task of it."""
        self.metrics.sessions.inc()
        self.metrics.active_sessions.inc()
        sender = self._start(self._send_loop(), "send")
        try:
            await self._receive_loop()
        except ConnectionClosed:
            pass
        finally:
            self.closed = True
            self.metrics.active_sessions.dec()
            await self._teardown(sender)

    async def _receive_loop(self) -> None:
        while True:
            timeout = self._last_activity + self.limits.idle_timeout_s - time.monotonic()
            try:
                async with asyncio.timeout(max(timeout, 0.0)):
                    data = await self.websocket.recv()
            except TimeoutError:
                if time.monotonic() - self._last_activity < self.limits.idle_timeout_s:
                    continue  # an event went out meanwhile
                self.send(protocol.error_message(
                    "idle_timeout", f"no message for {self.limits.idle_timeout_s:g} s; closing the session"))
                self.close_after_queued(1000, "idle timeout")
                await self.websocket.wait_closed()
                return
            self._last_activity = time.monotonic()
            try:
                if isinstance(data, str):
                    await self._on_message(self.stream.receive_text(data))
                else:
                    audio = self.stream.receive_audio(data)  # raises before session.start
                    await self.source.push(audio)
            except protocol.ProtocolError as exc:
                self.send(protocol.protocol_error_message(exc))

    async def _on_message(self, message: protocol.ClientMessage) -> None:
        if isinstance(message, protocol.SessionStart):
            self._start_session(message)
        elif isinstance(message, protocol.CleanupRequest):
            self._start(self.cleanup.answer(message, self.send), f"cleanup {message.id}")
        elif isinstance(message, protocol.InputText):
            if self.session.config.reply is False:
                raise protocol.InvalidField("input.text needs a session with voice.reply true")
            self.session.reply_to_text(message.text)  # cancels a reply in progress
        elif isinstance(message, protocol.ResponseCancel):
            self.session.cancel_reply()
        elif isinstance(message, protocol.SessionEnd):
            await self.source.end()

    def _start_session(self, start: protocol.SessionStart) -> None:
        base = self.pipeline.config
        # a client's own hangover applies to every turn: no early endpoint on a complete-looking transcript
        vad = base.vad if start.min_silence_ms is None else dataclasses.replace(
            base.vad, min_silence_ms=start.min_silence_ms, complete_silence_ms=None)
        config = dataclasses.replace(
            base, vad=vad, turn_taking="barge_in", reply=start.reply, cleanup=start.cleanup,
            interims=start.interims and self.interims_allowed(), reasoning_effort=start.reasoning_effort,
        )
        self.source = QueueSource(start.sample_rate_hz)
        self.session = self.pipeline.session(self.source, self.sink if start.reply else None, config)
        self.session.subscribe(self.on_event)
        for subscriber in self.subscribers:
            self.session.subscribe(subscriber)
        self.send({
            "type": "session.started", "protocol": protocol.PROTOCOL_VERSION, "session_id": self.session_id,
            "input": {"sample_rate": start.sample_rate_hz, "format": start.format, "channels": 1},
            "output": {"sample_rate": self.pipeline.synthesizer.sample_rate_hz, "format": "pcm16", "channels": 1},
            "limits": {"max_message_bytes": protocol.MAX_MESSAGE_BYTES, "max_utterance_s": vad.max_speech_s,
                       "idle_timeout_s": self.limits.idle_timeout_s, "max_text_chars": protocol.MAX_TEXT_CHARS},
        })
        self._start(self._run_pipeline(), "pipeline")

    def set_interims(self, allowed: bool) -> None:
        """Turn interim transcripts on or off for the rest of the session (load shedding: every
        interim re-decodes the utterance on the shared Whisper model, which finals wait for)."""
        if self.session is not None:
            wanted = allowed and self.stream.start.interims
            if self.session.config.interims != wanted:
                self.session.config = dataclasses.replace(self.session.config, interims=wanted)

    async def _run_pipeline(self) -> None:
        try:
            traces = await self.session.run()
        except Exception as exc:  # noqa: BLE001 - reported to the client, the server keeps serving
            log.exception("session %s: pipeline failed", self.session_id)
            self.send(protocol.error_message("pipeline_error", f"{type(exc).__name__}: {exc}"))
            self.close_after_queued(1011, "pipeline failed")
            return
        self._end_audio()
        self.send({"type": "session.ended", "session_id": self.session_id, "turns": len(traces)})
        self.close_after_queued(1000, "session ended")

    # -- tasks -------------------------------------------------------------------------------

    def _start(self, coro, what: str) -> asyncio.Task:
        task = asyncio.create_task(coro, name=f"quicksilver {self.session_id} {what}")
        self.tasks.append(task)
        self.tasks = [t for t in self.tasks if not t.done() or t is task]
        return task

    async def _teardown(self, sender: asyncio.Task) -> None:
        """Cancel every task of the session and wait (bounded) until they have ended."""
        if self.session is not None:
            self.session.close()  # no more events; cancels the session's own tasks (replies, decodes)
        tasks = [t for t in self.tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=self.limits.teardown_timeout_s)
            if pending:
                log.warning("session %s: %d tasks still running %.1f s after close", self.session_id,
                            len(pending), self.limits.teardown_timeout_s)
        if not sender.done():
            sender.cancel()
