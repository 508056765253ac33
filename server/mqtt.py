"""The MQTT event bus (aiomqtt): voice session events out, cleanup requests in.

- :class:`MqttBus` keeps one connection to the broker in the background. Publishing never
  blocks and never fails: messages wait in a bounded buffer while the broker is away (the oldest
  is dropped, and counted, when it is full) and the client reconnects with exponential backoff.
  A broker that is down at start or goes away mid-run never stops or slows the voice pipeline.
- :class:`SessionEventPublisher` is a voice-session subscriber: it publishes each turn's
  final transcript, cleaned transcript, reply and trace as JSON under
  ``<prefix>/<session>/…``, and the final transcript in the Hermes convention of
  Rhasspy / Home Assistant satellites (``hermes/asr/textCaptured``). No audio is ever published.
- :class:`MqttCleanupResponder` answers ``quicksilver/cleanup/request`` on the shared LM.

Topics and payloads are documented in ``docs/protocol.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import random
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from urllib.parse import unquote, urlsplit

import aiomqtt

from server import protocol
from voice.events import event_to_dict

log = logging.getLogger(__name__)

SESSION_TOPICS = {
    "final": ("transcript/final", 1),
    "cleaned": ("transcript/cleaned", 1),
    "reply": ("reply", 1),
    "trace": ("trace", 0),
}
"""Voice pipeline event type → (topic under ``<prefix>/<session>/``, QoS)."""
HERMES_TEXT_CAPTURED = "hermes/asr/textCaptured"
CLEANUP_REQUEST_TOPIC = "quicksilver/cleanup/request"
CLEANUP_RESPONSE_TOPIC = "quicksilver/cleanup/response/{id}"
CLEANUP_ERROR_TOPIC = "quicksilver/cleanup/errors"
"""Where errors of cleanup requests without a usable id go."""


@dataclass(frozen=True)
class MqttSettings:
    """Where and how to connect (the ``--mqtt*`` flags).

    Attributes:
        host, port: the broker (1883, or 8883 with TLS, by default).
        username, password: MQTT credentials (``None``: anonymous).
        tls: connect over TLS; ``ca_file`` / ``cert_file`` / ``key_file`` are PEM files (the
            system CAs when ``ca_file`` is ``None``); ``tls_insecure`` skips the host name check.
        client_id: the MQTT client identifier (``None``: a random one).
        site_id: ``siteId`` of the Hermes messages.
        prefix: first level of the session topics.
        buffer_messages: messages kept while the broker is away; beyond it the oldest is dropped.
        reconnect_min_s, reconnect_max_s: backoff between connection attempts (doubling, with
            jitter, reset by a successful connection).
        publish_timeout_s: how long one QoS 1 publish waits for the broker's acknowledgement.
        flush_timeout_s: how long :meth:`MqttBus.close` waits for buffered messages to go out.
    """

    host: str
    port: int = 1883
    username: str | None = None
    password: str | None = None
    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    tls_insecure: bool = False
    client_id: str | None = None
    site_id: str = "default"
    prefix: str = "quicksilver"
    buffer_messages: int = 1000
    reconnect_min_s: float = 0.5
    reconnect_max_s: float = 30.0
    publish_timeout_s: float = 5.0
    flush_timeout_s: float = 3.0

    @classmethod
    def from_url(cls, url: str, **options) -> "MqttSettings":
        """Settings from ``mqtt://[user[:password]@]host[:port]`` (``mqtts://`` = TLS) and
        ``options`` (any attribute; ``None`` values are ignored).

        Raises:
            ValueError: another scheme, no host, or a bad port.
        """
        parts = urlsplit(url)
        if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
            raise ValueError(f"--mqtt {url!r}: expected mqtt://host[:port] or mqtts://host[:port]")
        try:
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"--mqtt {url!r}: {exc}") from None
        tls = parts.scheme == "mqtts"
        settings = cls(host=parts.hostname, port=port or (8883 if tls else 1883), tls=tls,
                       username=unquote(parts.username) if parts.username else None,
                       password=unquote(parts.password) if parts.password else None)
        settings = replace(settings, **{k: v for k, v in options.items() if v is not None})
        if settings.ca_file or settings.cert_file:
            settings = replace(settings, tls=True)
        return settings

    @property
    def url(self) -> str:
        """The broker's address without credentials."""
        return f"{'mqtts' if self.tls else 'mqtt'}://{self.host}:{self.port}"


def add_mqtt_options(parser: argparse.ArgumentParser) -> None:
    """The ``--mqtt*`` flags of ``serve``, ``run`` and ``mic``."""
    parser.add_argument("--mqtt", metavar="URL", help="publish events to this MQTT broker: mqtt://host:port "
                        "(mqtts:// for TLS; user:password@ allowed)")
    parser.add_argument("--mqtt-username", help="MQTT user name")
    parser.add_argument("--mqtt-password", default=os.environ.get("QUICKSILVER_MQTT_PASSWORD"),
                        help="MQTT password (default: $QUICKSILVER_MQTT_PASSWORD)")
    parser.add_argument("--mqtt-ca-file", metavar="PEM", help="CA certificates for TLS (turns TLS on)")
    parser.add_argument("--mqtt-cert-file", metavar="PEM", help="client certificate for TLS")
    parser.add_argument("--mqtt-key-file", metavar="PEM", help="client key for TLS")
    parser.add_argument("--mqtt-tls-insecure", action="store_true", help="do not check the broker's host name")
    parser.add_argument("--mqtt-site-id", default="default", help="siteId of the Hermes messages (default: %(default)s)")


def settings_from_args(args) -> MqttSettings | None:
    """The :class:`MqttSettings` the flags of :func:`add_mqtt_options` chose (``None``: no
    ``--mqtt``). Raises ``ValueError`` on a bad URL."""
    if not getattr(args, "mqtt", None):
        return None
    return MqttSettings.from_url(args.mqtt, username=args.mqtt_username, password=args.mqtt_password,
                                 ca_file=args.mqtt_ca_file, cert_file=args.mqtt_cert_file,
                                 key_file=args.mqtt_key_file, tls_insecure=args.mqtt_tls_insecure or None,
                                 site_id=args.mqtt_site_id)


Handler = Callable[[aiomqtt.Message], object]


class MqttBus:
    """One MQTT connection kept open in the background (start it with :meth:`start`).

    Attributes:
        published: messages the broker accepted (QoS 1: acknowledged).
        dropped: messages lost: pushed out of the full buffer, or still buffered at :meth:`close`.
        connects: successful connections so far (a reconnect adds one).
        connected: set while connected.
    """

    def __init__(self, settings: MqttSettings) -> None:
        self.settings = settings
        self.published = 0
        self.dropped = 0
        self.connects = 0
        self.connected = asyncio.Event()
        self._buffer: deque[tuple[str, bytes, int]] = deque()
        self._in_flight: tuple[str, bytes, int] | None = None
        self._wakeup = asyncio.Event()
        self._handlers: dict[str, Handler] = {}
        self._handler_tasks: set[asyncio.Task] = set()
        self._task: asyncio.Task | None = None
        self._warned_at = 0

    # -- publishing -------------------------------------------------------------------------

    def publish(self, topic: str, message: dict, qos: int = 0) -> None:
        """Queue ``message`` as JSON for ``topic``; never blocks. When the buffer is full the
        oldest message is dropped and counted (a warning is logged at the first drop and every
        100th)."""
        if len(self._buffer) >= self.settings.buffer_messages:
            self._buffer.popleft()
            self._count_drops(1)
        self._buffer.append((topic, protocol.encode(message).encode(), qos))
        self._wakeup.set()

    def _count_drops(self, count: int) -> None:
        self.dropped += count
        if self.dropped - self._warned_at >= 100 or self._warned_at == 0:
            self._warned_at = self.dropped
            log.warning("MQTT %s unreachable: %d messages dropped so far", self.settings.url, self.dropped)

    @property
    def pending(self) -> int:
        """Messages not yet accepted by the broker."""
        return len(self._buffer) + (self._in_flight is not None)

    def summary(self) -> str:
        """One line for a person: published and dropped counts."""
        return f"mqtt {self.settings.url}: {self.published} messages published, {self.dropped} dropped"

    # -- subscribing ------------------------------------------------------------------------

    def subscribe(self, topic: str, handler: Handler) -> None:
        """Call ``handler(message)`` (a function or coroutine function, run as a task) for every
        message on ``topic`` (no wildcards); subscribed again after each reconnect."""
        self._handlers[topic] = handler

    # -- lifetime ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start connecting in the background; returns at once (the broker may be down)."""
        self._task = asyncio.create_task(self._connect_forever(), name="quicksilver mqtt")

    async def flush(self, timeout_s: float) -> bool:
        """Wait until every buffered message went out, at most ``timeout_s``; whether it did."""
        deadline = time.monotonic() + timeout_s
        while self.pending and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return not self.pending

    async def close(self) -> None:
        """Flush (at most ``settings.flush_timeout_s``), disconnect, and count what is still
        buffered as dropped."""
        if self._task is None:
            return
        if self.connected.is_set():
            await self.flush(self.settings.flush_timeout_s)
        for task in [self._task, *self._handler_tasks]:
            task.cancel()
        await asyncio.gather(self._task, *self._handler_tasks, return_exceptions=True)
        self._task = None
        if self.pending:
            self._count_drops(self.pending)
            self._buffer.clear()
            self._in_flight = None

    async def _connect_forever(self) -> None:
        delay = self.settings.reconnect_min_s
        while True:
            try:
                async with self._client() as client:
                    self.connects += 1
                    delay = self.settings.reconnect_min_s
                    for topic in self._handlers:
                        await client.subscribe(topic, qos=1)
                    self.connected.set()
                    log.info("MQTT connected to %s", self.settings.url)
                    async with asyncio.TaskGroup() as tasks:
                        tasks.create_task(self._send(client))
                        tasks.create_task(self._receive(client))
            except Exception as exc:  # noqa: BLE001 - any connection failure: retry later
                error = exc.exceptions[0] if isinstance(exc, BaseExceptionGroup) else exc
                log.warning("MQTT %s: %s: %s; reconnecting in %.1f s", self.settings.url,
                            type(error).__name__, error, delay)
            finally:
                self.connected.clear()
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, self.settings.reconnect_max_s)

    def _client(self) -> aiomqtt.Client:
        s = self.settings
        tls = None
        if s.tls:
            tls = aiomqtt.TLSParameters(ca_certs=s.ca_file, certfile=s.cert_file, keyfile=s.key_file,
                                        cert_reqs=ssl.CERT_REQUIRED)
        return aiomqtt.Client(s.host, s.port, username=s.username, password=s.password, identifier=s.client_id,
                              tls_params=tls, tls_insecure=s.tls_insecure if s.tls else None,
                              timeout=s.publish_timeout_s, keepalive=30)

    async def _send(self, client: aiomqtt.Client) -> None:
        while True:
            if self._in_flight is None:  # a message cut off by a disconnect is sent again first
                if not self._buffer:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                self._in_flight = self._buffer.popleft()
            topic, payload, qos = self._in_flight
            await client.publish(topic, payload, qos=qos)
            self._in_flight = None
            self.published += 1

    async def _receive(self, client: aiomqtt.Client) -> None:
        # Iterating the messages also ends this connection (MqttError) when the broker goes away.
        async for message in client.messages:
            handler = self._handlers.get(str(message.topic))
            if handler is None:
                continue
            result = handler(message)
            if asyncio.iscoroutine(result):
                task = asyncio.create_task(result)
                self._handler_tasks.add(task)
                task.add_done_callback(self._handler_tasks.discard)


# -- voice session events -----------------------------------------------------------------------


class SessionEventPublisher:
    """Publishes the events of one voice session (use :meth:`on_event` as its subscriber).

    ``<prefix>/<session_id>/transcript/final`` / ``transcript/cleaned`` / ``reply`` (QoS 1) and
    ``…/trace`` (QoS 0) carry the ``/ws`` protocol's JSON event (``server.protocol.event_message``)
    plus ``session_id``; each final transcript is also published to ``hermes/asr/textCaptured``
    as ``{"text", "likelihood", "seconds", "siteId", "sessionId"}`` (QoS 1): ``likelihood`` is
    ``exp(avg_logprob)`` of Whisper's decode, ``seconds`` the utterance's speech duration.
    """

    def __init__(self, bus: MqttBus, session_id: str) -> None:
        self.bus = bus
        self.session_id = session_id
        self._speech_start_s: dict[int, float] = {}
        self._speech_s: dict[int, float] = {}

    def on_event(self, event) -> None:
        """Voice session subscriber (called on the event loop; never blocks)."""
        data = event_to_dict(event)
        kind, turn_id = data["type"], data["turn_id"]
        if kind == "speech_started":
            self._speech_start_s[turn_id] = data["stream_s"]
        elif kind == "speech_stopped" and turn_id in self._speech_start_s:
            self._speech_s[turn_id] = data["speech_end_s"] - self._speech_start_s.pop(turn_id)
        topic = SESSION_TOPICS.get(kind)
        if topic is None:
            return
        settings = self.bus.settings
        self.bus.publish(f"{settings.prefix}/{self.session_id}/{topic[0]}",
                         {**protocol.event_message(data), "session_id": self.session_id}, qos=topic[1])
        if kind == "final":
            seconds = self._speech_s.pop(turn_id, None)
            self.bus.publish(HERMES_TEXT_CAPTURED, {
                "text": data["text"],
                "likelihood": round(min(1.0, math.exp(data["avg_logprob"])), 4),
                "seconds": round(seconds, 3) if seconds is not None else None,
                "siteId": settings.site_id,
                "sessionId": self.session_id,
            }, qos=1)


@contextlib.asynccontextmanager
async def publishing(session, settings: MqttSettings, session_id: str):
    """``async with publishing(session, settings, id) as bus:`` — publish ``session``'s events
    on a fresh :class:`MqttBus` while the block runs; closed (flushed, bounded) after it."""
    bus = MqttBus(settings)
    session.subscribe(SessionEventPublisher(bus, session_id).on_event)
    await bus.start()
    try:
        yield bus
    finally:
        await bus.close()


# -- cleanup over MQTT --------------------------------------------------------------------------


class MqttCleanupResponder:
    """Answers cleanup requests published to ``quicksilver/cleanup/request``.

    A request ``{"id", "text", "reasoning_effort"?, "reply_to"?}`` is cleaned by ``service``
    (a :class:`server.cleanup_service.CleanupService`, batched with every other cleanup of the
    server) and answered on ``reply_to``, or ``quicksilver/cleanup/response/<id>``, with
    ``{"type": "cleanup.result", "id", "text", "latency_ms"}`` (QoS 1). A bad request is answered
    there with an ``error`` event carrying its id, or on ``quicksilver/cleanup/errors`` when it
    has no usable id.
    """

    def __init__(self, bus: MqttBus, service) -> None:
        self.bus = bus
        self.service = service
        bus.subscribe(CLEANUP_REQUEST_TOPIC, self.on_message)

    async def on_message(self, message: aiomqtt.Message) -> None:
        """Parse and answer one request (run as a task by the bus)."""
        try:
            parsed = protocol.parse_mqtt_cleanup_request(message.payload)
        except protocol.ProtocolError as exc:
            topic = CLEANUP_ERROR_TOPIC if exc.request_id is None else CLEANUP_RESPONSE_TOPIC.format(id=exc.request_id)
            self.bus.publish(topic, protocol.protocol_error_message(exc), qos=1)
            return
        topic = parsed.reply_to or CLEANUP_RESPONSE_TOPIC.format(id=parsed.request.id)
        await self.service.answer(parsed.request, lambda answer: self.bus.publish(topic, answer, qos=1))
