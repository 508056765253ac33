"""voice.tracing: TurnTrace arithmetic and its OpenTelemetry spans."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from voice.tracing import STAGES, TurnTrace, make_tracer, monotonic_to_epoch_ns


def full_trace() -> TurnTrace:
    trace = TurnTrace(turn_id=3, hangover_s=0.7, asr_audio_s=2.0, asr_decode_s=0.3, tts_audio_s=2.0, tts_synth_s=0.4)
    for i, stage in enumerate(STAGES):
        trace.mark(stage, 100.0 + 0.1 * i)
    return trace


def test_durations_are_differences_of_the_marks():
    d = full_trace().durations()
    assert d["voice_to_voice_s"] == pytest.approx(1.0)  # speech_end (100.0) → first_tts_audio (101.0)
    assert d["endpoint_delay_s"] == pytest.approx(0.1)
    assert d["asr_s"] == pytest.approx(0.1)
    assert d["llm_s"] == pytest.approx(0.2)
    assert d["asr_rtf"] == pytest.approx(0.15) and d["tts_rtf"] == pytest.approx(0.2)
    assert full_trace().stages_in_order() == list(STAGES)


def test_first_mark_wins_and_unknown_stages_are_refused():
    trace = TurnTrace(turn_id=1)
    trace.mark("endpoint", 5.0)
    trace.mark("endpoint", 6.0)
    assert trace.endpoint == 5.0
    with pytest.raises(ValueError):
        trace.mark("lunch")
    assert trace.durations()["voice_to_voice_s"] is None


def test_spans_are_a_turn_with_four_children_at_the_marked_times():
    exporter = InMemorySpanExporter()
    trace = full_trace()
    trace.export(make_tracer(span_exporter=exporter))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"turn", "asr", "cleanup", "llm", "tts"}
    turn = spans["turn"]
    for name in ("asr", "cleanup", "llm", "tts"):
        assert spans[name].parent.span_id == turn.context.span_id
        assert turn.start_time <= spans[name].start_time <= spans[name].end_time <= turn.end_time
    assert spans["asr"].start_time == monotonic_to_epoch_ns(trace.asr_start)
    assert spans["llm"].end_time - spans["llm"].start_time == pytest.approx(0.2e9, abs=1e3)
    assert turn.attributes["quicksilver.voice_to_voice_s"] == pytest.approx(1.0)


def test_unknown_exporter_is_refused():
    with pytest.raises(ValueError, match="unknown trace exporter"):
        make_tracer("zipkin")
