"""The Quicksilver websocket server: ``/ws`` voice sessions, ``/cleanup``, the browser client,
health, metrics, and the MQTT event bus.

Built on the ``websockets`` asyncio server. Plain GETs are answered in the handshake hook
(``process_request``); ``/ws`` upgrades to a :class:`server.session.VoiceConnection`, ``/cleanup``
to a :class:`server.cleanup_service.CleanupConnection`. Checks at the handshake (both paths):
the shared-secret token (401 before the upgrade) and the Origin allow-list (403).
After the upgrade: the session limit (``error`` ``server_full``, close 1013); the websocket layer
closes a connection that sends a message over ``max_message_bytes`` with 1009.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, serve

from server import http, protocol
from server.cleanup_service import CleanupConnection, CleanupService
from server.metrics import ServerMetrics
from server.mqtt import MqttBus, MqttCleanupResponder, MqttSettings, SessionEventPublisher
from server.session import SessionLimits, VoiceConnection

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerConfig:
    """Settings of ``quicksilver serve``.

    Attributes:
        host, port: where to listen (loopback by default; port 0 = any free port).
        max_sessions: open ``/ws`` sessions at most; one more gets ``server_full``.
        token: shared secret required on ``/ws`` and ``/metrics`` (``Authorization: Bearer`` or
            ``?token=``); ``None`` = no authentication.
        allowed_origins: extra ``Origin`` values accepted on ``/ws``; a browser page of the server
            itself and clients that send no ``Origin`` are always accepted.
        max_message_bytes: largest client message (1 MiB).
        max_interim_sessions: interim transcripts are sent only while at most this many sessions
            are open. Each interim re-decodes the utterance so far on the one Whisper model, and
            finals queue behind them: measured with ``bench/load.py`` (LDC93S1, 2 cores), interims
            for every session made the final decode the largest part of voice-to-voice from 2
            sessions on.
        limits: per-session limits.
        worker_threads: size of the thread pool that runs model calls and VAD for all sessions.
        mqtt: publish session events to this broker and answer cleanup requests from it
            (``None``: no MQTT).
    """

    host: str = "127.0.0.1"
    port: int = 8765
    max_sessions: int = 16
    token: str | None = None
    allowed_origins: tuple[str, ...] = ()
    max_message_bytes: int = protocol.MAX_MESSAGE_BYTES
    max_interim_sessions: int = 1
    limits: SessionLimits = SessionLimits()
    worker_threads: int = 64
    mqtt: MqttSettings | None = None


class VoiceServer:
    """Serves many voice sessions with one set of models (``pipeline``, a
    ``voice.pipeline.VoicePipeline``, usually :func:`server.models.load_pipeline`).

    Attributes:
        connections: the open sessions.
        finished: the last closed sessions (for tests and diagnostics).
    """

    def __init__(self, pipeline, config: ServerConfig = ServerConfig()) -> None:
        self.pipeline = pipeline
        self.config = config
        self.metrics = ServerMetrics()
        self.connections: set[VoiceConnection] = set()
        self.finished: deque[VoiceConnection] = deque(maxlen=64)
        self.started_at = time.monotonic()
        self.cleanup = CleanupService(pipeline.lm, self.metrics)
        self.mqtt: MqttBus | None = None
        self._server: Server | None = None

    @property
    def port(self) -> int:
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        """Listen; returns once the socket is bound (see :attr:`port`)."""
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(self.config.worker_threads, thread_name_prefix="quicksilver-worker"))
        if self.config.mqtt is not None:
            self.mqtt = MqttBus(self.config.mqtt)
            MqttCleanupResponder(self.mqtt, self.cleanup)
            await self.mqtt.start()  # in the background: a broker that is down does not stop the server
        self._server = await serve(
            self._handle,
            self.config.host,
            self.config.port,
            process_request=self._process_request,
            max_size=self.config.max_message_bytes,
            ping_interval=20,
            ping_timeout=20,
            close_timeout=2,
        )
        log.info("listening on http://%s:%d/", self.config.host, self.port)

    async def serve_forever(self) -> None:
        await self._server.serve_forever()

    async def close(self) -> None:
        """Stop listening, close every session and wait for them to end; then the MQTT bus."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self.mqtt is not None:
            await self.mqtt.close()

    # -- handshake hook: plain HTTP and checks before the upgrade ---------------------------

    def _process_request(self, connection, request):
        url = urlsplit(request.path)
        if url.path in ("/ws", "/cleanup"):
            if not self._authorized(request, url):
                return http.response(401, "missing or wrong token\n", extra_headers=(("WWW-Authenticate", "Bearer"),))
            origin = request.headers.get("Origin")
            if origin is not None and not self._origin_allowed(origin, request.headers.get("Host", "")):
                return http.response(403, f"origin {origin} is not allowed\n")
            return None  # upgrade
        if url.path == "/healthz":
            body = {"status": "ok", "sessions": len(self.connections), "max_sessions": self.config.max_sessions,
                    "uptime_s": round(time.monotonic() - self.started_at, 1)}
            if self.mqtt is not None:
                body["mqtt"] = {"connected": self.mqtt.connected.is_set(), "published": self.mqtt.published,
                                "dropped": self.mqtt.dropped}
            return http.health(body)
        if url.path == "/metrics":
            if not self._authorized(request, url):
                return http.response(401, "missing or wrong token\n", extra_headers=(("WWW-Authenticate", "Bearer"),))
            return http.metrics(self.metrics.render())
        return http.static_file(url.path)

    def _authorized(self, request, url) -> bool:
        if self.config.token is None:
            return True
        header = request.headers.get("Authorization", "")
        offered = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else None
        if offered is None:
            offered = (parse_qs(url.query).get("token") or [""])[0]
        return hmac.compare_digest(offered.encode(), self.config.token.encode())

    def _origin_allowed(self, origin: str, host: str) -> bool:
        if origin in self.config.allowed_origins:
            return True
        return urlsplit(origin).netloc == host  # the page this server served

    # -- /ws ---------------------------------------------------------------------------------

    async def _handle(self, websocket) -> None:
        if urlsplit(websocket.request.path).path == "/cleanup":
            await CleanupConnection(websocket, self.cleanup).run()
            return
        connection = VoiceConnection(websocket, self.pipeline, self.metrics, self.config.limits,
                                     interims_allowed=self._interims_allowed, cleanup=self.cleanup)
        if self.mqtt is not None:
            connection.subscribers.append(SessionEventPublisher(self.mqtt, connection.session_id).on_event)
        if len(self.connections) >= self.config.max_sessions:
            self.metrics.errors.labels("server_full").inc()
            await websocket.send(protocol.encode(protocol.error_message(
                "server_full", f"the server is serving its maximum of {self.config.max_sessions} sessions; "
                "try again later")))
            await websocket.close(1013, "server full")
            return
        self.connections.add(connection)
        self._shed_interims()
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)
            self.finished.append(connection)
            self._shed_interims()

    def _interims_allowed(self) -> bool:
        return len(self.connections) <= self.config.max_interim_sessions

    def _shed_interims(self) -> None:
        allowed = self._interims_allowed()
        for connection in self.connections:
            connection.set_interims(allowed)
