"""Per-turn latency tracing: :class:`TurnTrace` timestamps, derived durations, OpenTelemetry spans.

Every timestamp is ``time.monotonic()`` seconds, taken by the pipeline at the moment the named
thing happens (not inferred afterwards). The order within a turn::

    speech_end ≤ endpoint                       true end of speech; VAD endpoint (+ hangover)
    asr_start → asr_final                       the final decode
    cleanup_start → cleanup_done                LM transcript cleanup
    llm_start → first_reply_draft → reply_done  LM reply
    tts_start → first_tts_audio → tts_done      synthesis and playback of the reply

``speech_end`` is the endpoint time minus the VAD hangover (``SpeechEnd.hangover_s``).
Voice-to-voice latency is ``first_tts_audio - speech_end``: what the user waits between
stopping speaking and hearing the reply.

Spans (:meth:`TurnTrace.export`): ``turn`` [speech_end, tts_done] with children ``asr``,
``cleanup``, ``llm``, ``tts``, each [start, end] of its work, so a span covers exactly the work
it names.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

STAGES = (
    "speech_end",
    "endpoint",
    "asr_start",
    "asr_final",
    "cleanup_start",
    "cleanup_done",
    "llm_start",
    "first_reply_draft",
    "reply_done",
    "tts_start",
    "first_tts_audio",
    "tts_done",
)
"""Timestamp names of :class:`TurnTrace`, in the order they are expected within a turn."""

SPANS = (("asr", "asr_start", "asr_final"), ("cleanup", "cleanup_start", "cleanup_done"),
         ("llm", "llm_start", "reply_done"), ("tts", "tts_start", "tts_done"))
"""Child spans of ``turn``: (name, start stage, end stage)."""

_EPOCH_MINUS_MONOTONIC_NS = time.time_ns() - time.monotonic_ns()


def monotonic_to_epoch_ns(monotonic_s: float) -> int:
    """Convert a ``time.monotonic()`` reading to Unix-epoch nanoseconds (OpenTelemetry's clock)."""
    return int(monotonic_s * 1e9) + _EPOCH_MINUS_MONOTONIC_NS


@dataclass
class TurnTrace:
    """Timestamps (monotonic seconds) and work figures of one turn.

    ``asr_audio_s``/``asr_decode_s`` and ``tts_audio_s``/``tts_synth_s`` give the real-time
    factors of the final decode and of the synthesis. ``hangover_s`` is the silence the VAD waited
    for (``complete_silence_ms`` when the transcript at the pause read as a finished turn,
    ``min_silence_ms`` otherwise). ``speculative``: the cleanup, reply and synthesis started at
    the pause, before the endpoint, and were held until the endpoint confirmed the turn (their
    timestamps may then precede ``endpoint``; ``first_tts_audio`` never does).
    """

    turn_id: int
    speech_end: float | None = None
    endpoint: float | None = None
    asr_start: float | None = None
    asr_final: float | None = None
    cleanup_start: float | None = None
    cleanup_done: float | None = None
    llm_start: float | None = None
    first_reply_draft: float | None = None
    reply_done: float | None = None
    tts_start: float | None = None
    first_tts_audio: float | None = None
    tts_done: float | None = None
    hangover_s: float = 0.0
    asr_audio_s: float = 0.0
    asr_decode_s: float = 0.0
    tts_audio_s: float = 0.0
    tts_synth_s: float = 0.0
    interrupted: bool = False
    speculative: bool = False

    def mark(self, stage: str, at: float | None = None) -> float:
        """Record ``stage`` now (or at ``at``); the first mark of a stage wins. Returns the time."""
        if stage not in STAGES:
            raise ValueError(f"unknown trace stage {stage!r}")
        if getattr(self, stage) is None:
            setattr(self, stage, time.monotonic() if at is None else at)
        return getattr(self, stage)

    def _between(self, a: str, b: str) -> float | None:
        ta, tb = getattr(self, a), getattr(self, b)
        return None if ta is None or tb is None else tb - ta

    def durations(self) -> dict[str, float | None]:
        """Derived latencies in seconds (``None`` where a stage did not happen)."""
        return {
            "voice_to_voice_s": self._between("speech_end", "first_tts_audio"),
            "endpoint_delay_s": self._between("speech_end", "endpoint"),
            "endpoint_to_asr_final_s": self._between("endpoint", "asr_final"),
            "asr_s": self._between("asr_start", "asr_final"),
            "cleanup_s": self._between("cleanup_start", "cleanup_done"),
            "llm_first_draft_s": self._between("llm_start", "first_reply_draft"),
            "llm_s": self._between("llm_start", "reply_done"),
            "reply_to_first_audio_s": self._between("tts_start", "first_tts_audio"),
            "tts_s": self._between("tts_start", "tts_done"),
            "turn_s": self._between("speech_end", "tts_done"),
            "asr_rtf": self.asr_decode_s / self.asr_audio_s if self.asr_audio_s else None,
            "tts_rtf": self.tts_synth_s / self.tts_audio_s if self.tts_audio_s else None,
        }

    def stages_in_order(self) -> list[str]:
        """Names of the recorded stages sorted by time (ties keep :data:`STAGES` order)."""
        recorded = [s for s in STAGES if getattr(self, s) is not None]
        return sorted(recorded, key=lambda s: getattr(self, s))

    def to_dict(self) -> dict:
        return {**asdict(self), "durations": self.durations()}

    def export(self, tracer) -> None:
        """Emit the turn as OpenTelemetry spans on ``tracer`` (no-op without ``speech_end``)."""
        from opentelemetry.trace import set_span_in_context

        start = self.speech_end
        end = self.tts_done or self.reply_done or self.asr_final or self.endpoint
        if start is None or end is None:
            return
        attributes = {"quicksilver.turn_id": self.turn_id, "quicksilver.interrupted": self.interrupted,
                      "quicksilver.speculative": self.speculative}
        for name, value in self.durations().items():
            if value is not None:
                attributes[f"quicksilver.{name}"] = value
        turn = tracer.start_span("turn", start_time=monotonic_to_epoch_ns(start), attributes=attributes)
        context = set_span_in_context(turn)
        for name, a, b in SPANS:
            ta, tb = getattr(self, a), getattr(self, b)
            if ta is not None and tb is not None:
                child = tracer.start_span(name, context=context, start_time=monotonic_to_epoch_ns(ta))
                child.end(end_time=monotonic_to_epoch_ns(tb))
        turn.end(end_time=monotonic_to_epoch_ns(max(end, *(getattr(self, b) or 0 for _, _, b in SPANS))))


def make_tracer(exporter: str = "none", span_exporter=None):
    """Return an OpenTelemetry tracer of service ``quicksilver``.

    Args:
        exporter: ``"console"`` (spans as JSON on stdout), ``"otlp"`` (OTLP/HTTP to
            ``OTEL_EXPORTER_OTLP_ENDPOINT``, needs ``quicksilver[otlp]``) or ``"none"``.
        span_exporter: an explicit ``SpanExporter`` (tests use ``InMemorySpanExporter``);
            it is attached with a ``SimpleSpanProcessor``.

    Raises:
        ValueError: unknown ``exporter``; RuntimeError: OTLP exporter not installed.
    """
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "quicksilver"}))
    if span_exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    if exporter == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    elif exporter == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise RuntimeError("OTLP export needs: pip install 'quicksilver[otlp]'") from exc
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    elif exporter != "none":
        raise ValueError(f"unknown trace exporter {exporter!r}; expected console, otlp or none")
    return provider.get_tracer("quicksilver.voice")
