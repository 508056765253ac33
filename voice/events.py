"""Typed events the pipeline publishes to its subscribers (CLI, websocket server, MQTT).

Every event carries the ``turn_id`` it belongs to (0 before the first turn) and the monotonic
time it was emitted (``time.monotonic()`` seconds). :func:`event_to_dict` gives the JSON form
(``{"type": ..., ...}``); audio chunks carry their length and rate, not the samples.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

from audio.frames import AudioFrame


def _now() -> float:
    return time.monotonic()


@dataclass(frozen=True, kw_only=True)
class Event:
    turn_id: int
    monotonic_s: float = field(default_factory=_now)

    @property
    def type(self) -> str:
        return EVENT_TYPES[type(self)]


@dataclass(frozen=True, kw_only=True)
class SpeechStarted(Event):
    """The VAD heard speech start at ``stream_s`` (stream seconds, padding included)."""

    stream_s: float


@dataclass(frozen=True, kw_only=True)
class SpeechStopped(Event):
    """Endpoint: speech ended at ``speech_end_s``; detected at ``stream_s`` after the hangover."""

    stream_s: float
    speech_end_s: float


@dataclass(frozen=True, kw_only=True)
class InterimTranscript(Event):
    """Transcript of the utterance so far: ``committed`` (LocalAgreement-2) then ``tentative``."""

    committed: str
    tentative: str

    @property
    def text(self) -> str:
        return f"{self.committed} {self.tentative}".strip()


@dataclass(frozen=True, kw_only=True)
class FinalTranscript(Event):
    """The utterance's final transcript with Whisper's confidence figures."""

    text: str
    avg_logprob: float
    no_speech_prob: float


@dataclass(frozen=True, kw_only=True)
class TranscriptRejected(Event):
    """An utterance produced no turn: ``reason`` says why (no speech, unclear, not English)."""

    text: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class CleanedTranscript(Event):
    """The final transcript after LM cleanup (disfluencies and restarts removed)."""

    text: str


@dataclass(frozen=True, kw_only=True)
class ReplyDraft(Event):
    """A draft of the reply (diffusion step or growing prefix); ``index`` counts from 0."""

    text: str
    index: int


@dataclass(frozen=True, kw_only=True)
class ReplyText(Event):
    """The complete reply text."""

    text: str


@dataclass(frozen=True, kw_only=True)
class AudioChunk(Event):
    """Reply audio, in playing order."""

    frame: AudioFrame
    text: str  # the sentence or clause it speaks


@dataclass(frozen=True, kw_only=True)
class Interrupted(Event):
    """Barge-in: the user spoke while the reply of ``turn_id`` played; the reply was cancelled."""

    stream_s: float


@dataclass(frozen=True, kw_only=True)
class TraceReady(Event):
    """The latency trace of a finished (or interrupted) turn: a ``TurnTrace.to_dict()``."""

    trace: dict


@dataclass(frozen=True, kw_only=True)
class PipelineError(Event):
    """A stage failed; ``stage`` names it. The session continues with the next turn if it can."""

    stage: str
    message: str


EVENT_TYPES: dict[type, str] = {
    SpeechStarted: "speech_started",
    SpeechStopped: "speech_stopped",
    InterimTranscript: "interim",
    FinalTranscript: "final",
    TranscriptRejected: "rejected",
    CleanedTranscript: "cleaned",
    ReplyDraft: "reply_draft",
    ReplyText: "reply",
    AudioChunk: "audio",
    Interrupted: "interrupted",
    TraceReady: "trace",
    PipelineError: "error",
}


def event_to_dict(event: Event) -> dict[str, Any]:
    """JSON-ready form: ``{"type": ..., "turn_id": ..., ...}``."""
    out: dict[str, Any] = {"type": event.type}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        if isinstance(value, AudioFrame):
            out["samples"] = len(value.samples)
            out["sample_rate_hz"] = value.sample_rate_hz
            out["duration_s"] = round(value.duration_s, 4)
        else:
            out[f.name] = value
    return out
