"""Transcript cleanup as a service: the ``/cleanup`` websocket endpoint over real websockets on
127.0.0.1 with the shipped LM (Disfl-QA dev inputs), its bad-input handling, live-caption
sentence streaming, and the plain parts (sentence splitting, message parsing) without I/O."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest
from websockets.asyncio.client import connect as _connect
from websockets.exceptions import InvalidStatus

from llm.data import load_disfl_qa
from server import protocol as p
from server.app import ServerConfig
from server.cleanup_service import SentenceSplitter
from server.testing import ServerThread
from voice.metrics import word_error_rate

STEP_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def server():
    with ServerThread(ServerConfig(port=0)) as running:
        yield running


def cleanup_url(server: ServerThread, query: str = "") -> str:
    return f"ws://127.0.0.1:{server.port}/cleanup{query}"


def connect(url: str, **kwargs):
    """No keepalive pings: a busy machine may not answer one in time (not what is tested)."""
    return _connect(url, ping_interval=None, open_timeout=30, **kwargs)


async def recv(ws, timeout_s: float = STEP_TIMEOUT_S) -> dict:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout_s))


def mean_wer(refs: list[str], hyps: list[str]) -> float:
    return sum(word_error_rate(r, h) for r, h in zip(refs, hyps)) / len(refs)


# -- plain parts, no I/O -----------------------------------------------------------------------


def test_sentences_are_cut_as_soon_as_they_end_but_not_after_abbreviations_or_initials():
    splitter = SentenceSplitter()
    assert splitter.append("um so I went to the") == []
    assert splitter.append(" store.") == ["um so I went to the store."]
    assert splitter.append(" And Mr. Smith met J. F. Kennedy there! Did he") == ["And Mr. Smith met J. F. Kennedy there!"]
    assert splitter.append(" really? Yes") == ["Did he really?"]
    assert splitter.append(" it cost 3.5 dollars") == []
    assert splitter.finish() == ["Yes it cost 3.5 dollars"]
    assert splitter.finish() == []


def test_text_without_sentence_ends_is_cut_at_a_space_before_the_cap():
    splitter = SentenceSplitter(max_chars=20)
    pieces = splitter.append("one two three four five six seven eight")
    assert pieces == ["one two three four", "five six seven"]
    assert splitter.finish() == ["eight"]


def test_cleanup_messages_parse_and_their_errors_carry_the_request_id():
    assert p.parse_cleanup_message('{"type": "cleanup.request", "id": "a", "text": "uh hi", "stream": true}') == \
        p.CleanupRequest("a", "uh hi", "low", stream=True)
    assert p.parse_cleanup_message('{"type": "cleanup.append", "id": "c", "text": "", "final": true}') == \
        p.CleanupAppend("c", "", "low", final=True)
    for message, words in [
        ({"type": "cleanup.request", "id": "a1", "text": "x" * (p.MAX_TEXT_CHARS + 1)}, f"limit is {p.MAX_TEXT_CHARS}"),
        ({"type": "cleanup.request", "id": "a2", "text": "hi", "reasoning_effort": "max"}, "low, medium, high"),
        ({"type": "cleanup.request", "id": "a3"}, "missing field 'text'"),
        ({"type": "cleanup.request", "id": "a4", "text": 5}, "must be str"),
        ({"type": "cleanup.request", "id": "a5", "text": "hi", "stream": "yes"}, "'stream'"),
        ({"type": "cleanup.append", "id": "a6", "text": ""}, "'final' is not true"),
        ({"type": "cleanup.ask", "id": "a7"}, "cleanup.request, cleanup.append"),
        ({"type": "cleanup.request", "id": "a8", "text": "abc \udc80 def"}, "lone surrogate (U+DC80) at character 4"),
    ]:
        with pytest.raises(p.ProtocolError) as info:
            p.parse_cleanup_message(json.dumps(message))
        assert words in info.value.message
        assert p.protocol_error_message(info.value)["id"] == message["id"]
    with pytest.raises(p.MalformedMessage):
        p.parse_cleanup_message("[1, 2]")


# -- the /cleanup endpoint ---------------------------------------------------------------------


async def test_concurrent_requests_are_answered_by_id_batched_and_closer_to_the_reference(server):
    pairs = load_disfl_qa("dev")[:24]
    ids = [f"dev-{i}" for i in range(len(pairs))]
    batches_before = len(server.pipeline.lm.batches)
    async with connect(cleanup_url(server)) as ws:
        for request_id, pair in zip(ids, pairs):
            await ws.send(json.dumps({"type": "cleanup.request", "id": request_id, "text": pair.disfluent}))
        answers = {}
        while len(answers) < len(ids):
            event = await recv(ws)
            assert event["type"] == "cleanup.result", event
            assert event["id"] not in answers
            answers[event["id"]] = event
    assert sorted(answers) == sorted(ids)
    assert all(a["latency_ms"] > 0 and a["text"].strip() for a in answers.values())
    refs = [pair.fluent for pair in pairs]
    cleaned = mean_wer(refs, [answers[i]["text"] for i in ids])
    raw = mean_wer(refs, [pair.disfluent for pair in pairs])
    assert cleaned < raw, (cleaned, raw)
    batches = server.pipeline.lm.batches[batches_before:]
    assert max(batches) > 1 and sum(batches) == len(ids), batches  # requests shared forward passes
    print(f"\n/cleanup on {len(ids)} Disfl-QA dev items: WER {raw:.3f} → {cleaned:.3f}; batches {batches}")


async def test_requests_from_several_connections_share_batches(server):
    texts = [pair.disfluent for pair in load_disfl_qa("dev")[24:36]]
    batches_before = len(server.pipeline.lm.batches)

    async def client(index: int) -> dict:
        async with connect(cleanup_url(server)) as ws:
            for n, text in enumerate(texts[index::3]):
                await ws.send(json.dumps({"type": "cleanup.request", "id": f"c{index}-{n}", "text": text}))
            return {e["id"]: e for e in [await recv(ws) for _ in texts[index::3]]}

    results = await asyncio.gather(*(client(i) for i in range(3)))
    for index, answers in enumerate(results):
        assert sorted(answers) == sorted(f"c{index}-{n}" for n in range(len(texts[index::3])))
        assert all(e["type"] == "cleanup.result" for e in answers.values())
    assert sum(server.pipeline.lm.batches[batches_before:]) == len(texts)


async def test_bad_requests_get_errors_with_their_ids_while_good_ones_on_the_connection_succeed(server):
    good = {f"good-{i}": pair.disfluent for i, pair in enumerate(load_disfl_qa("dev")[40:44])}
    bad = [
        ({"type": "cleanup.request", "id": "too-long", "text": "uh " * 1000}, "invalid_field", "2000"),
        ({"type": "cleanup.request", "id": "effort", "text": "uh hi", "reasoning_effort": "max"}, "invalid_field", "max"),
        ({"type": "cleanup.request", "id": "no-text"}, "invalid_field", "'text'"),
        ({"type": "cleanup.request", "id": "blank", "text": "   "}, "invalid_field", "empty"),
        ({"type": "cleanup.translate", "id": "kind", "text": "hi"}, "unknown_message_type", "cleanup.request"),
        # a JSON-escaped lone surrogate parses but is no text: refused alone, not in a batch
        ({"type": "cleanup.request", "id": "surrogate", "text": "abc \udc80 def"}, "invalid_field", "surrogate"),
    ]
    async with connect(cleanup_url(server)) as ws:
        ids = iter(good.items())
        for message, _, _ in bad:  # bad and good requests interleaved on one connection
            await ws.send(json.dumps(message))
            request_id, text = next(ids, (None, None))
            if request_id:
                await ws.send(json.dumps({"type": "cleanup.request", "id": request_id, "text": text}))
        await ws.send("{not json")
        await ws.send(b"\x00\x01")
        events = [await recv(ws) for _ in range(len(good) + len(bad) + 2)]
        # still serving after all of that
        await ws.send(json.dumps({"type": "cleanup.request", "id": "after", "text": "so um yes I agree"}))
        after = await recv(ws)
    by_id = {e["id"]: e for e in events if "id" in e}
    for message, code, words in bad:
        error = by_id[message["id"]]
        assert error["type"] == "error" and error["code"] == code and words in error["message"], error
    for request_id in good:
        assert by_id[request_id]["type"] == "cleanup.result" and by_id[request_id]["text"].strip()
    anonymous = [e for e in events if "id" not in e]
    assert sorted(e["code"] for e in anonymous) == ["malformed_message", "malformed_message"]
    assert after["type"] == "cleanup.result" and after["id"] == "after"


async def test_a_request_id_already_in_flight_is_refused_and_the_first_answered(server):
    async with connect(cleanup_url(server)) as ws:
        for _ in range(2):
            await ws.send(json.dumps({"type": "cleanup.request", "id": "twice", "text": "um I want I want tea"}))
        events = [await recv(ws), await recv(ws)]
    assert sorted(e["type"] for e in events) == ["cleanup.result", "error"]
    error = next(e for e in events if e["type"] == "error")
    assert error["id"] == "twice" and "already in flight" in error["message"]


async def test_streamed_request_sends_drafts_then_the_result(server):
    async with connect(cleanup_url(server)) as ws:
        await ws.send(json.dumps({"type": "cleanup.request", "id": "s", "text": "so um I want uh a table for two",
                                  "reasoning_effort": "medium", "stream": True}))
        events = []
        while not events or events[-1]["type"] != "cleanup.result":
            events.append(await recv(ws))
    drafts, result = events[:-1], events[-1]
    assert drafts and all(d["type"] == "cleanup.draft" and d["id"] == "s" for d in drafts)
    assert [d["index"] for d in drafts] == list(range(len(drafts)))
    assert result["id"] == "s" and result["text"] == drafts[-1]["text"]
    assert "um" not in result["text"].lower().split()


async def test_live_captions_get_each_sentence_cleaned_as_soon_as_it_ends(server):
    async with connect(cleanup_url(server)) as ws:
        await ws.send(json.dumps({"type": "cleanup.append", "id": "cap", "text": "um so I want I want a table"}))
        await ws.send(json.dumps({"type": "cleanup.append", "id": "cap", "text": " for two. And uh"}))
        first = await recv(ws)  # answered before the transcript goes on
        assert first == {**first, "type": "cleanup.sentence", "id": "cap", "index": 0,
                         "source": "um so I want I want a table for two."}
        await ws.send(json.dumps({"type": "cleanup.append", "id": "cap", "text": " what is the the weather? Mr. Smith"}))
        second = await recv(ws)
        assert (second["index"], second["source"]) == (1, "And uh what is the the weather?")
        await ws.send(json.dumps({"type": "cleanup.append", "id": "cap", "text": " said uh hello", "final": True}))
        third, ended = await recv(ws), await recv(ws)
    assert (third["type"], third["index"], third["source"]) == ("cleanup.sentence", 2, "Mr. Smith said uh hello")
    assert ended == {"type": "cleanup.ended", "id": "cap", "sentences": 3}
    for event in (first, second, third):
        assert event["text"].strip() and "uh" not in event["text"].lower().split() and event["latency_ms"] > 0
    assert word_error_rate("I want a table for two.", first["text"]) < word_error_rate(
        "I want a table for two.", first["source"])


async def test_caption_sentences_arrive_in_order_when_many_end_at_once(server):
    sentences = [pair.disfluent for pair in load_disfl_qa("dev")[50:62]]
    async with connect(cleanup_url(server)) as ws:
        await ws.send(json.dumps({"type": "cleanup.append", "id": "bulk", "text": " ".join(sentences), "final": True}))
        events = [await recv(ws) for _ in range(len(sentences) + 1)]
    sentence_events = [e for e in events if e["type"] == "cleanup.sentence"]
    assert [e["index"] for e in sentence_events] == list(range(len(sentence_events)))
    assert events[-1] == {"type": "cleanup.ended", "id": "bulk", "sentences": len(sentence_events)}
    assert " ".join(e["source"] for e in sentence_events) == " ".join(sentences)


async def test_cleanup_endpoint_needs_the_token_when_one_is_set(server):
    with ServerThread(ServerConfig(port=0, token="s3cret"), pipeline=server.pipeline) as guarded:
        with pytest.raises(InvalidStatus) as info:
            async with connect(cleanup_url(guarded)):
                pass
        assert info.value.response.status_code == 401
        async with connect(cleanup_url(guarded, "?token=s3cret")) as ws:
            await ws.send(json.dumps({"type": "cleanup.request", "id": "t", "text": "uh yes"}))
            assert (await recv(ws))["type"] == "cleanup.result"
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(guarded.url + "/metrics", timeout=5)
