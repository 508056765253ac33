"""Transcript cleanup as a service: the ``/cleanup`` websocket endpoint and live-caption streams.

- :class:`CleanupService` answers one cleanup request on the server's shared LM, for every
  client kind (``/ws`` ``cleanup.request``, ``/cleanup``, MQTT). The LM is the server's
  :class:`server.models.BatchingLanguageModel`: cleanups waiting at the same moment, from every
  connection, run as one batch (one forward pass per denoising step). Streamed requests
  (``stream: true``) run one at a time on the model, a ``cleanup.draft`` per denoising step.
- :class:`SentenceSplitter` cuts a growing transcript into completed sentences (no I/O).
- :class:`CleanupConnection` serves one ``/cleanup`` connection: many requests in flight,
  answered by id; ``cleanup.append`` streams, each completed sentence cleaned and sent as soon
  as it ends, in order. A bad request gets an ``error`` with its id; the others go on.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable

from websockets.exceptions import ConnectionClosed

from server import protocol
from server.metrics import ServerMetrics

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 256
"""Requests and open ``cleanup.append`` streams one ``/cleanup`` connection may have at once."""

Send = Callable[[dict], None]


class CleanupService:
    """Answers cleanup requests on a shared language model.

    Args:
        lm: a :class:`llm.backend.LanguageModel`; the server passes its batching LM.
        metrics: counts answered requests and errors (``None``: not counted).
    """

    def __init__(self, lm, metrics: ServerMetrics | None = None) -> None:
        self.lm = lm
        self.metrics = metrics

    async def clean(self, text: str, reasoning_effort: str = "low") -> str:
        """The cleaned ``text`` (batched with other waiting cleanups).

        Raises:
            ValueError: empty text or unknown effort.
            llm.backend.LanguageModelError: the backend failed.
        """
        return await self.lm.acleanup(text, reasoning_effort)

    async def answer(self, request: protocol.CleanupRequest, send: Send) -> None:
        """Answer ``request`` through ``send``: ``cleanup.draft`` events (``{"id", "text",
        "index"}``) when ``request.stream``, then ``cleanup.result`` (``{"id", "text",
        "latency_ms"}``), or an ``error`` ``cleanup_failed`` with the id. Never raises, except
        :class:`asyncio.CancelledError`."""
        started = time.perf_counter()
        try:
            if request.stream:
                text, index = "", 0
                async for text in self.lm.astream_cleanup(request.text, request.reasoning_effort):
                    send({"type": "cleanup.draft", "id": request.id, "text": text, "index": index})
                    index += 1
            else:
                text = await self.clean(request.text, request.reasoning_effort)
        except Exception as exc:  # noqa: BLE001 - one failed request never fails the others
            send(protocol.error_message("cleanup_failed", f"{type(exc).__name__}: {exc}", id=request.id))
            return
        if self.metrics is not None:
            self.metrics.cleanups.inc()
        send({"type": "cleanup.result", "id": request.id, "text": text,
              "latency_ms": round((time.perf_counter() - started) * 1000, 1)})


# -- live captions: sentences of a growing transcript -------------------------------------------

SENTENCE_END = re.compile(r"[.?!…]+[\"'”’)\]]*(?=\s|$)")
"""Terminal punctuation (closing quotes and brackets included) followed by a space or the end of
what has arrived so far."""
ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "e.g", "i.e", "approx"})
"""Words whose full stop does not end a sentence (single capital letters, initials, neither)."""


class SentenceSplitter:
    """Cuts a transcript that grows by appends into completed sentences (no I/O).

    A sentence ends at ``.``, ``?``, ``!`` or ``…`` followed by a space or by the end of the text
    received so far (so it is cleaned as soon as it ends), except after an abbreviation or an
    initial. Text that runs past ``max_chars`` without a sentence end is cut at its last space
    before ``max_chars`` (unpunctuated captions still come out).
    """

    def __init__(self, max_chars: int = protocol.MAX_TEXT_CHARS) -> None:
        self.max_chars = max_chars
        self.pending = ""

    def append(self, text: str) -> list[str]:
        """Add ``text`` verbatim; return the sentences it completed, in order, stripped."""
        self.pending += text
        sentences, start = [], 0
        for match in SENTENCE_END.finditer(self.pending):
            if match.group().startswith(".") and self._abbreviation_before(match.start()):
                continue
            sentence = self.pending[start:match.end()].strip()
            if sentence:
                sentences.append(sentence)
            start = match.end()
        self.pending = self.pending[start:]
        while len(self.pending) > self.max_chars:
            cut = self.pending.rfind(" ", 0, self.max_chars)
            cut = cut if cut > 0 else self.max_chars
            piece, self.pending = self.pending[:cut].strip(), self.pending[cut:]
            if piece:
                sentences.append(piece)
        return sentences

    def finish(self) -> list[str]:
        """The end of the transcript: what is pending, as a last sentence (``[]`` if blank)."""
        rest, self.pending = self.pending.strip(), ""
        return [rest] if rest else []

    def _abbreviation_before(self, dot: int) -> bool:
        word = self.pending[:dot].rsplit(None, 1)[-1] if self.pending[:dot].strip() else ""
        return word.lower() in ABBREVIATIONS or (len(word) == 1 and word.isupper())


class CaptionStream:
    """One ``cleanup.append`` stream: its splitter and the task of its last sentence (the next
    sentence is sent after it, so sentences arrive in order while being cleaned together)."""

    def __init__(self, stream_id: str) -> None:
        self.id = stream_id
        self.splitter = SentenceSplitter()
        self.sentences = 0
        self.last: asyncio.Task | None = None


# -- the /cleanup websocket endpoint -----------------------------------------------------------


class CleanupConnection:
    """Serves one ``/cleanup`` connection (protocol in ``docs/protocol.md``); :meth:`run`
    returns when it closes and every task of it has ended.

    Attributes:
        tasks: the connection's running request and sentence tasks.
        streams: open ``cleanup.append`` streams by id.
    """

    def __init__(self, websocket, service: CleanupService, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self.websocket = websocket
        self.service = service
        self.max_in_flight = max_in_flight
        self.requests: dict[str, asyncio.Task] = {}
        self.streams: dict[str, CaptionStream] = {}
        self.tasks: set[asyncio.Task] = set()
        self.closed = False
        self._outbox: asyncio.Queue = asyncio.Queue()

    def send(self, message: dict) -> None:
        """Queue an event for the client (never blocks; dropped once the connection closed)."""
        if self.closed:
            return
        if message["type"] == "error" and self.service.metrics is not None:
            self.service.metrics.errors.labels(message["code"]).inc()
        self._outbox.put_nowait(protocol.encode(message))

    async def run(self) -> None:
        """Serve until the client closes; then cancel and await the connection's tasks."""
        sender = asyncio.create_task(self._send_loop(), name="quicksilver cleanup send")
        try:
            async for data in self.websocket:
                if not isinstance(data, str):
                    self.send(protocol.error_message("malformed_message", "/cleanup takes JSON text messages only"))
                    continue
                try:
                    self._receive(protocol.parse_cleanup_message(data))
                except protocol.ProtocolError as exc:
                    self.send(protocol.protocol_error_message(exc))
        except ConnectionClosed:
            pass
        finally:
            self.closed = True
            pending = [t for t in self.tasks if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=2.0)
            sender.cancel()

    async def _send_loop(self) -> None:
        while True:
            message = await self._outbox.get()
            try:
                await self.websocket.send(message)
            except ConnectionClosed:
                return

    def _receive(self, message: protocol.CleanupRequest | protocol.CleanupAppend) -> None:
        if isinstance(message, protocol.CleanupRequest):
            if message.id in self.requests:
                raise protocol.InvalidField(f"cleanup.request: id {message.id!r} is already in flight",
                                            request_id=message.id)
            self._check_capacity(message.id)
            task = self._spawn(self.service.answer(message, self.send))
            self.requests[message.id] = task
            task.add_done_callback(lambda _, request_id=message.id: self.requests.pop(request_id, None))
            return
        stream = self.streams.get(message.id)
        if stream is None:
            self._check_capacity(message.id)
            stream = self.streams[message.id] = CaptionStream(message.id)
        received = time.perf_counter()
        sentences = stream.splitter.append(message.text)
        if message.final:
            sentences += stream.splitter.finish()
        for source in sentences:
            stream.last = self._spawn(self._sentence(stream, stream.sentences, source, message.reasoning_effort,
                                                     received, stream.last))
            stream.sentences += 1
        if message.final:
            del self.streams[message.id]
            self._spawn(self._stream_ended(stream))

    def _check_capacity(self, request_id: str) -> None:
        if len(self.requests) + len(self.streams) >= self.max_in_flight:
            raise protocol.InvalidField(
                f"too many requests in flight on this connection (the limit is {self.max_in_flight}); "
                "wait for answers", request_id=request_id)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _sentence(self, stream: CaptionStream, index: int, source: str, effort: str,
                        received: float, previous: asyncio.Task | None) -> None:
        try:
            text, error = await self.service.clean(source, effort), None
        except Exception as exc:  # noqa: BLE001 - reported with the stream id, the stream goes on
            text, error = None, exc
        if previous is not None:
            await asyncio.wait([previous])  # keep the sentences of a stream in order
        if error is not None:
            self.send(protocol.error_message("cleanup_failed", f"{type(error).__name__}: {error}",
                                             id=stream.id, index=index))
            return
        if self.service.metrics is not None:
            self.service.metrics.cleanups.inc()
        self.send({"type": "cleanup.sentence", "id": stream.id, "index": index, "source": source, "text": text,
                   "latency_ms": round((time.perf_counter() - received) * 1000, 1)})

    async def _stream_ended(self, stream: CaptionStream) -> None:
        if stream.last is not None:
            await asyncio.wait([stream.last])
        self.send({"type": "cleanup.ended", "id": stream.id, "sentences": stream.sentences})
