"""server/protocol.py: parsing, validation and order rules of the /ws protocol (no I/O)."""

from __future__ import annotations

import json

import pytest

from server import protocol as p


def start(**fields) -> str:
    return json.dumps({"type": "session.start", **fields})


def test_session_start_defaults_and_voice_options():
    msg = p.parse_client_message(start(sample_rate=48000, reasoning_effort="high",
                                       voice={"reply": False, "cleanup": False, "min_silence_ms": 900}))
    assert msg == p.SessionStart(sample_rate_hz=48000, reasoning_effort="high", reply=False, cleanup=False,
                                 min_silence_ms=900)
    assert p.parse_client_message(start()) == p.SessionStart()


@pytest.mark.parametrize("text, error, words", [
    ("{not json", p.MalformedMessage, "not valid JSON"),
    ("[1, 2]", p.MalformedMessage, '"type"'),
    ('{"type": 3}', p.MalformedMessage, '"type"'),
    ('{"type": "session.begin"}', p.UnknownMessageType, "session.start"),
    (start(sample_rate=12345), p.UnsupportedAudio, "16000"),
    (start(sample_rate=True), p.InvalidField, "boolean"),
    (start(format="float32"), p.UnsupportedAudio, "pcm16"),
    (start(channels=2), p.UnsupportedAudio, "mono"),
    (start(reasoning_effort="max"), p.InvalidField, "low, medium, high"),
    (start(voice={"min_silence_ms": 50}), p.InvalidField, "min_silence_ms"),
    (start(voice="loud"), p.InvalidField, "voice"),
    ('{"type": "input.text", "text": "   "}', p.InvalidField, "empty"),
    (json.dumps({"type": "input.text", "text": "\x00\x07 "}), p.InvalidField, "control characters only"),
    ('{"type": "input.text"}', p.InvalidField, "missing field 'text'"),
    (json.dumps({"type": "input.text", "text": "a" * (p.MAX_TEXT_CHARS + 1)}), p.InvalidField, "limit"),
    ('{"type": "cleanup.request", "text": "uh hi"}', p.InvalidField, "'id'"),
])
def test_bad_messages_raise_their_error_with_a_useful_message(text, error, words):
    with pytest.raises(error) as info:
        p.parse_client_message(text)
    assert words in info.value.message
    event = p.protocol_error_message(info.value)
    assert event["type"] == "error" and event["code"] == error.code


def test_cleanup_request_errors_carry_the_request_id():
    with pytest.raises(p.InvalidField) as info:
        p.parse_client_message(json.dumps({"type": "cleanup.request", "id": "r7", "text": "x", "reasoning_effort": "x"}))
    assert p.protocol_error_message(info.value)["id"] == "r7"


def test_order_rules():
    stream = p.ClientStream()
    with pytest.raises(p.OutOfOrder, match="before session.start"):
        stream.receive_audio(b"\0\0")
    with pytest.raises(p.OutOfOrder, match="before session.start"):
        stream.receive_text('{"type": "input.text", "text": "hi"}')
    assert isinstance(stream.receive_text('{"type": "cleanup.request", "id": "1", "text": "so um yes"}'), p.CleanupRequest)
    assert stream.receive_text(start(sample_rate=16000)) == p.SessionStart()
    with pytest.raises(p.OutOfOrder, match="already"):
        stream.receive_text(start())
    with pytest.raises(p.BadAudioFrame, match="even number"):
        stream.receive_audio(b"\0\0\0")
    with pytest.raises(p.BadAudioFrame, match="empty"):
        stream.receive_audio(b"")
    assert stream.receive_audio(b"\1\0" * 10) and stream.audio_bytes == 20
    assert isinstance(stream.receive_text('{"type": "session.end"}'), p.SessionEnd)
    with pytest.raises(p.OutOfOrder, match="after session.end"):
        stream.receive_audio(b"\0\0")


def test_pipeline_events_map_to_protocol_events():
    from voice.events import FinalTranscript, InterimTranscript, PipelineError, ReplyDraft, event_to_dict

    final = p.event_message(event_to_dict(FinalTranscript(turn_id=1, text="ask not", avg_logprob=-0.2, no_speech_prob=0.01)))
    assert final == {"type": "transcript.final", "turn_id": 1, "text": "ask not", "avg_logprob": -0.2, "no_speech_prob": 0.01}
    interim = p.event_message(event_to_dict(InterimTranscript(turn_id=2, committed="ask", tentative="not")))
    assert interim["type"] == "transcript.interim" and interim["text"] == "ask not"
    assert p.event_message(event_to_dict(ReplyDraft(turn_id=1, text="Sure", index=0)))["type"] == "reply.draft"
    error = p.event_message(event_to_dict(PipelineError(turn_id=3, stage="llm", message="boom")))
    assert error["code"] == "pipeline_error" and error["stage"] == "llm"
    assert set(p.EVENT_NAMES.values()) <= set(p.SERVER_EVENT_TYPES)


def test_encode_turns_non_finite_floats_into_null():
    assert json.loads(p.encode({"type": "turn.trace", "x": float("nan"), "y": [float("inf"), 1.5]})) == {
        "type": "turn.trace", "x": None, "y": [None, 1.5]}
