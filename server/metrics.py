"""Prometheus metrics of one server (its own registry, so several servers can share a process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

STAGE_DURATIONS = {
    "endpoint": "endpoint_delay_s",
    "asr": "asr_s",
    "cleanup": "cleanup_s",
    "llm_first_draft": "llm_first_draft_s",
    "llm": "llm_s",
    "tts_first_audio": "reply_to_first_audio_s",
    "voice_to_voice": "voice_to_voice_s",
}
"""Histogram label → ``TurnTrace.durations()`` key."""

LATENCY_BUCKETS_S = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)


class ServerMetrics:
    """Turns, errors, sessions and per-stage latency histograms."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.turns = Counter("quicksilver_turns", "Finished turns (traced)", registry=self.registry)
        self.errors = Counter("quicksilver_errors", "Error events sent, by code", ["code"], registry=self.registry)
        self.sessions = Counter("quicksilver_sessions", "Accepted /ws sessions", registry=self.registry)
        self.active_sessions = Gauge("quicksilver_active_sessions", "Open /ws sessions", registry=self.registry)
        self.cleanups = Counter("quicksilver_cleanup_requests", "Cleanups answered (cleanup.result and cleanup.sentence events)", registry=self.registry)
        self.stage_latency = Histogram(
            "quicksilver_stage_latency_seconds", "Latency of each stage of a turn", ["stage"],
            buckets=LATENCY_BUCKETS_S, registry=self.registry,
        )

    def observe_trace(self, trace: dict) -> None:
        """Count a finished turn and record its stage latencies (``TurnTrace.to_dict()``)."""
        self.turns.inc()
        durations = trace.get("durations", {})
        for stage, key in STAGE_DURATIONS.items():
            value = durations.get(key)
            if value is not None and value >= 0:
                self.stage_latency.labels(stage).observe(value)

    def render(self) -> bytes:
        """The Prometheus text exposition format."""
        return generate_latest(self.registry)
