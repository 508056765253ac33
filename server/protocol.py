"""The ``/ws`` voice protocol, version 1, without any I/O (see ``docs/protocol.md``).

This module parses and validates what a client sends and builds what the server sends; the
websocket handler (:mod:`server.session`) only moves bytes between a connection and a
:class:`ClientStream`. Everything here is plain data and raises :class:`ProtocolError`
subclasses, each with the ``code`` that the ``error`` event carries.

Client → server: JSON text messages (:class:`SessionStart`, :class:`InputText`,
:class:`ResponseCancel`, :class:`SessionEnd`, :class:`CleanupRequest`) and binary messages of
PCM16 little-endian mono audio at the rate ``session.start`` declared.

Server → client: JSON events (:func:`event_message` maps the voice pipeline's events to them),
and binary reply audio between ``audio.start`` and ``audio.end``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Union

from llm.backend import lone_surrogate

PROTOCOL_VERSION = 1
SAMPLE_RATES_HZ = (8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000)
"""Input sample rates a client may declare; the server resamples to 16 kHz."""
FORMATS = ("pcm16",)
"""Input audio formats: PCM16 little-endian, one channel."""
REASONING_EFFORTS = ("low", "medium", "high")
MAX_TEXT_CHARS = 2000
"""Longest ``input.text`` / ``cleanup.request`` text."""
MAX_MESSAGE_BYTES = 2**20
"""Largest message a client may send (1 MiB); a larger one closes the connection with 1009."""
MIN_SILENCE_MS_RANGE = (300, 2000)
"""Accepted endpoint hangover (``min_silence_ms``) in milliseconds."""


# -- errors ------------------------------------------------------------------------------------


class ProtocolError(Exception):
    """A client message that cannot be accepted; ``code`` is sent in the ``error`` event.

    The session continues after a protocol error unless the handler decides otherwise.
    """

    code = "protocol_error"

    def __init__(self, message: str, *, request_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id


class MalformedMessage(ProtocolError):
    """Not JSON, or JSON that is not an object with a string ``type``."""

    code = "malformed_message"


class UnknownMessageType(ProtocolError):
    """A ``type`` this protocol version does not define."""

    code = "unknown_message_type"


class InvalidField(ProtocolError):
    """A known message with a missing, mistyped or out-of-range field."""

    code = "invalid_field"


class UnsupportedAudio(ProtocolError):
    """A sample rate, format or channel count the server does not accept; the message lists
    what is accepted."""

    code = "unsupported_audio"


class BadAudioFrame(ProtocolError):
    """A binary message that is not whole PCM16 samples (odd byte count) or is empty."""

    code = "bad_audio_frame"


class OutOfOrder(ProtocolError):
    """A message that is valid but not now: audio or text before ``session.start``, a second
    ``session.start``, anything after ``session.end``."""

    code = "out_of_order"


# -- client messages ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionStart:
    """``session.start``: opens the conversation and declares the input audio.

    Attributes:
        sample_rate_hz: rate of the binary audio the client will send (one of
            :data:`SAMPLE_RATES_HZ`).
        format: ``"pcm16"``.
        channels: 1.
        reasoning_effort: LM effort for cleanup and reply (``low``/``medium``/``high``).
        reply: ``False`` = transcription only (no LM reply, no audio).
        cleanup: run LM transcript cleanup before the reply.
        interims: send ``transcript.interim`` while the user speaks.
        min_silence_ms: endpoint hangover; ``None`` = the server's default.
    """

    sample_rate_hz: int = 16000
    format: str = "pcm16"
    channels: int = 1
    reasoning_effort: str = "low"
    reply: bool = True
    cleanup: bool = True
    interims: bool = True
    min_silence_ms: int | None = None


@dataclass(frozen=True)
class InputText:
    """``input.text``: a typed user turn, answered like a spoken one (no ASR, no cleanup)."""

    text: str


@dataclass(frozen=True)
class ResponseCancel:
    """``response.cancel``: stop the reply being produced or played."""


@dataclass(frozen=True)
class SessionEnd:
    """``session.end``: no more input; the server finishes the current turn, sends
    ``session.ended`` and closes."""


@dataclass(frozen=True)
class CleanupRequest:
    """``cleanup.request``: clean a pasted transcript; answered by ``cleanup.result`` with the
    same ``id`` (after ``cleanup.draft`` events when ``stream`` is true). Allowed before
    ``session.start`` on ``/ws``, and the main message of ``/cleanup``."""

    id: str
    text: str
    reasoning_effort: str = "low"
    stream: bool = False


@dataclass(frozen=True)
class CleanupAppend:
    """``cleanup.append`` (``/cleanup`` only): more text of the live transcript ``id``, appended
    verbatim (the client sends the spaces between words). Each sentence it completes is answered
    by ``cleanup.sentence``; ``final`` ends the transcript (the rest counts as a sentence) and
    ``cleanup.ended`` follows."""

    id: str
    text: str
    reasoning_effort: str = "low"
    final: bool = False


ClientMessage = Union[SessionStart, InputText, ResponseCancel, SessionEnd, CleanupRequest]


def _field(obj: dict, name: str, kind: type | tuple, default: Any = ..., *, where: str) -> Any:
    if name not in obj:
        if default is ...:
            raise InvalidField(f"{where}: missing field {name!r}")
        return default
    value = obj[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:  # JSON true is not a number here
        raise InvalidField(f"{where}: field {name!r} must be {kinds[0].__name__}, got a boolean")
    if not isinstance(value, kinds):
        raise InvalidField(f"{where}: field {name!r} must be {kinds[0].__name__}, got {type(value).__name__}")
    return value


def _text(obj: dict, where: str, allow_empty: bool = False) -> str:
    text = _field(obj, "text", str, "" if allow_empty else ..., where=where)
    if not allow_empty and not "".join(c for c in text if c.isprintable()).strip():
        raise InvalidField(f"{where}: 'text' is empty (whitespace or control characters only)")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidField(f"{where}: 'text' has {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
    surrogate = lone_surrogate(text)
    if surrogate is not None:
        raise InvalidField(f"{where}: 'text' holds a lone surrogate (U+{ord(text[surrogate]):04X}) at character "
                           f"{surrogate}; send valid Unicode")
    return text


def _effort(obj: dict, where: str) -> str:
    effort = _field(obj, "reasoning_effort", str, "low", where=where)
    if effort not in REASONING_EFFORTS:
        raise InvalidField(f"{where}: reasoning_effort {effort!r} is not one of {', '.join(REASONING_EFFORTS)}")
    return effort


def _parse_session_start(obj: dict) -> SessionStart:
    where = "session.start"
    rate = _field(obj, "sample_rate", (int, float), 16000, where=where)
    fmt = _field(obj, "format", str, "pcm16", where=where)
    channels = _field(obj, "channels", int, 1, where=where)
    if not (isinstance(rate, int) or (math.isfinite(rate) and rate == int(rate))) or int(rate) not in SAMPLE_RATES_HZ:
        raise UnsupportedAudio(f"sample_rate {rate} Hz is not supported; accepted: "
                               f"{', '.join(map(str, SAMPLE_RATES_HZ))} Hz")
    if fmt not in FORMATS:
        raise UnsupportedAudio(f"format {fmt!r} is not supported; accepted: {', '.join(FORMATS)} "
                               "(16-bit signed little-endian)")
    if channels != 1:
        raise UnsupportedAudio(f"{channels} channels are not supported; accepted: 1 (mono)")
    voice = _field(obj, "voice", dict, {}, where=where)
    silence = _field(voice, "min_silence_ms", int, None, where=f"{where}.voice")
    if silence is not None and not MIN_SILENCE_MS_RANGE[0] <= silence <= MIN_SILENCE_MS_RANGE[1]:
        raise InvalidField(f"{where}.voice: min_silence_ms must be in "
                           f"[{MIN_SILENCE_MS_RANGE[0]}, {MIN_SILENCE_MS_RANGE[1]}], got {silence}")
    return SessionStart(
        sample_rate_hz=int(rate),
        format=fmt,
        channels=channels,
        reasoning_effort=_effort(obj, where),
        reply=_field(voice, "reply", bool, True, where=f"{where}.voice"),
        cleanup=_field(voice, "cleanup", bool, True, where=f"{where}.voice"),
        interims=_field(voice, "interims", bool, True, where=f"{where}.voice"),
        min_silence_ms=silence,
    )


MAX_ID_CHARS = 128
"""Longest request id of ``cleanup.request`` / ``cleanup.append``."""


def _request_id(obj: dict, where: str) -> str:
    request_id = obj.get("id")
    if not isinstance(request_id, str) or not request_id or len(request_id) > MAX_ID_CHARS:
        raise InvalidField(f"{where}: 'id' must be a non-empty string of at most {MAX_ID_CHARS} characters")
    return request_id


def _with_request_id(obj: dict, where: str, parse):
    """``parse(request_id)``; any :class:`ProtocolError` it raises carries the request id."""
    request_id = _request_id(obj, where)
    try:
        return parse(request_id)
    except ProtocolError as exc:
        exc.request_id = request_id
        raise


def _parse_cleanup(obj: dict) -> CleanupRequest:
    where = "cleanup.request"
    return _with_request_id(obj, where, lambda request_id: CleanupRequest(
        request_id, _text(obj, where), _effort(obj, where), _field(obj, "stream", bool, False, where=where)))


def _parse_cleanup_append(obj: dict) -> CleanupAppend:
    where = "cleanup.append"

    def parse(request_id: str) -> CleanupAppend:
        final = _field(obj, "final", bool, False, where=where)
        text = _text(obj, where, allow_empty=True)
        if not final and not text:
            raise InvalidField(f"{where}: 'text' is empty and 'final' is not true")
        return CleanupAppend(request_id, text, _effort(obj, where), final)

    return _with_request_id(obj, where, parse)


_PARSERS = {
    "session.start": _parse_session_start,
    "input.text": lambda obj: InputText(_text(obj, "input.text")),
    "response.cancel": lambda obj: ResponseCancel(),
    "session.end": lambda obj: SessionEnd(),
    "cleanup.request": _parse_cleanup,
}
CLIENT_MESSAGE_TYPES = tuple(_PARSERS)


def _json_object(text: str | bytes) -> dict:
    try:
        obj = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedMessage(f"not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise MalformedMessage('a message must be a JSON object with a string "type"')
    return obj


def _parse_typed(text: str | bytes, parsers: dict) -> object:
    obj = _json_object(text)
    if not isinstance(obj.get("type"), str):
        raise MalformedMessage('a message must be a JSON object with a string "type"')
    parser = parsers.get(obj["type"])
    if parser is None:
        request_id = obj.get("id") if isinstance(obj.get("id"), str) else None
        raise UnknownMessageType(f"unknown message type {obj['type'][:64]!r}; expected one of "
                                 f"{', '.join(parsers)}", request_id=request_id)
    return parser(obj)


def parse_client_message(text: str | bytes) -> ClientMessage:
    """Parse one JSON text message from a ``/ws`` client.

    Raises:
        MalformedMessage: not a JSON object with a string ``type``.
        UnknownMessageType: ``type`` is not one of :data:`CLIENT_MESSAGE_TYPES`.
        InvalidField, UnsupportedAudio: a field is missing, mistyped or out of range.
    """
    return _parse_typed(text, _PARSERS)


# -- the /cleanup protocol and cleanup over MQTT ------------------------------------------------

_CLEANUP_PARSERS = {"cleanup.request": _parse_cleanup, "cleanup.append": _parse_cleanup_append}
CLEANUP_MESSAGE_TYPES = tuple(_CLEANUP_PARSERS)
"""Message types a ``/cleanup`` client may send."""


def parse_cleanup_message(text: str | bytes) -> CleanupRequest | CleanupAppend:
    """Parse one JSON text message from a ``/cleanup`` client.

    Raises:
        MalformedMessage: not a JSON object with a string ``type``.
        UnknownMessageType: not ``cleanup.request`` or ``cleanup.append`` (carries the ``id`` if
            the message has one).
        InvalidField: a field is missing, mistyped or out of range, e.g. ``text`` over
            :data:`MAX_TEXT_CHARS` (carries the ``id`` when the ``id`` itself is valid).
    """
    return _parse_typed(text, _CLEANUP_PARSERS)


_TOPIC_FORBIDDEN = ("+", "#", "\0")


@dataclass(frozen=True)
class MqttCleanupRequest:
    """A cleanup request received on MQTT (``quicksilver/cleanup/request``).

    Attributes:
        request: the request (``stream`` is always false over MQTT).
        reply_to: topic for the answer; ``None`` = ``quicksilver/cleanup/response/<id>``.
    """

    request: CleanupRequest
    reply_to: str | None = None


def parse_mqtt_cleanup_request(payload: bytes | str) -> MqttCleanupRequest:
    """Parse the JSON payload ``{"id", "text", "reasoning_effort"?, "reply_to"?}`` of an MQTT
    cleanup request (a ``type`` field, if present, must be ``cleanup.request``).

    Raises:
        MalformedMessage: not a JSON object.
        InvalidField: bad ``id`` (it also names the response topic, so MQTT wildcards ``+`` and
            ``#`` are refused), ``text``, ``reasoning_effort`` or ``reply_to`` (carries the ``id``
            when the ``id`` itself is valid).
    """
    obj = _json_object(payload)
    where = "cleanup request"
    if any(c in str(obj.get("id", "")) for c in _TOPIC_FORBIDDEN):
        raise InvalidField(f"{where}: 'id' names a topic and may not contain '+', '#' or NUL")

    def parse(request_id: str) -> MqttCleanupRequest:
        if obj.get("type", "cleanup.request") != "cleanup.request":
            raise InvalidField(f"{where}: 'type' must be 'cleanup.request' if given")
        reply_to = _field(obj, "reply_to", str, None, where=where)
        if reply_to is not None and (not reply_to or any(c in reply_to for c in _TOPIC_FORBIDDEN)
                                     or len(reply_to.encode()) > 65535):
            raise InvalidField(f"{where}: 'reply_to' must be a topic name without '+', '#' or NUL")
        return MqttCleanupRequest(CleanupRequest(request_id, _text(obj, where), _effort(obj, where)), reply_to)

    return _with_request_id(obj, where, parse)


class ClientStream:
    """The order rules of one connection, fed with what the client sends (no I/O).

    ``session.start`` must come first (before audio, ``input.text`` and ``response.cancel``), and
    once; nothing but ``cleanup.request`` is accepted after ``session.end``.
    """

    def __init__(self) -> None:
        self.start: SessionStart | None = None
        self.ended = False
        self.audio_bytes = 0

    def receive_text(self, text: str) -> ClientMessage:
        """Parse and order-check a text message; returns it (raises :class:`ProtocolError`)."""
        message = parse_client_message(text)
        if isinstance(message, CleanupRequest):
            return message
        if self.ended:
            raise OutOfOrder(f"{_type_of(message)} after session.end")
        if isinstance(message, SessionStart):
            if self.start is not None:
                raise OutOfOrder("session.start was already received")
            self.start = message
        elif self.start is None:
            raise OutOfOrder(f"{_type_of(message)} before session.start")
        elif isinstance(message, SessionEnd):
            self.ended = True
        return message

    def receive_audio(self, data: bytes) -> bytes:
        """Check a binary message: whole PCM16 samples, after ``session.start``, before
        ``session.end``. Returns ``data``."""
        if self.start is None:
            raise OutOfOrder("audio before session.start; send session.start with the sample_rate first")
        if self.ended:
            raise OutOfOrder("audio after session.end")
        if not data:
            raise BadAudioFrame("empty audio message")
        if len(data) % 2:
            raise BadAudioFrame(f"audio message of {len(data)} bytes: PCM16 needs an even number of bytes")
        self.audio_bytes += len(data)
        return data


_TYPE_NAMES = {SessionStart: "session.start", InputText: "input.text", ResponseCancel: "response.cancel",
               SessionEnd: "session.end", CleanupRequest: "cleanup.request"}


def _type_of(message: ClientMessage) -> str:
    return _TYPE_NAMES[type(message)]


# -- server messages ---------------------------------------------------------------------------

EVENT_NAMES = {
    "speech_started": "speech.started",
    "speech_stopped": "speech.stopped",
    "interim": "transcript.interim",
    "final": "transcript.final",
    "rejected": "transcript.rejected",
    "cleaned": "transcript.cleaned",
    "reply_draft": "reply.draft",
    "reply": "reply.text",
    "interrupted": "interrupted",
    "trace": "turn.trace",
    "error": "error",
}
"""Voice pipeline event type (``voice.events``) → protocol event type. ``audio`` events become
``audio.start`` / binary / ``audio.end`` (see :class:`server.session.VoiceConnection`)."""

SERVER_EVENT_TYPES = (
    "session.started", *EVENT_NAMES.values(), "audio.start", "audio.end", "cleanup.draft", "cleanup.result",
    "session.ended",
)
CLEANUP_EVENT_TYPES = ("cleanup.draft", "cleanup.result", "cleanup.sentence", "cleanup.ended", "error")
"""Events a ``/cleanup`` client receives."""


def event_message(event_dict: dict) -> dict | None:
    """Protocol form of a pipeline event given as ``voice.events.event_to_dict(event)``.

    Returns ``None`` for events that are not sent as JSON (reply audio). Pipeline errors become
    ``error`` with code ``pipeline_error`` and the failing ``stage``.
    """
    kind = EVENT_NAMES.get(event_dict["type"])
    if kind is None:
        return None
    body = {k: v for k, v in event_dict.items() if k not in ("type", "monotonic_s")}
    if kind == "error":
        return {"type": "error", "code": "pipeline_error", **body}
    if kind == "transcript.interim":
        body["text"] = f"{body.get('committed', '')} {body.get('tentative', '')}".strip()
    return {"type": kind, **body}


def error_message(code: str, message: str, **extra: Any) -> dict:
    """An ``error`` event."""
    return {"type": "error", "code": code, "message": message, **extra}


def protocol_error_message(exc: ProtocolError) -> dict:
    """The ``error`` event of a :class:`ProtocolError` (with ``id`` for a cleanup request)."""
    extra = {"id": exc.request_id} if exc.request_id is not None else {}
    return error_message(exc.code, exc.message, **extra)


def encode(message: dict) -> str:
    """JSON text of a server message (finite floats only; NaN/inf become null)."""
    return json.dumps(_finite(message), ensure_ascii=False, separators=(",", ":"))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
