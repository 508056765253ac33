"""Retrieve-and-edit replies: the TF-IDF retriever and the reply edit canvas."""

import pytest
import torch
from transformers import AutoTokenizer

from llm import canvas as cv
from llm.model import DEFAULT_CHECKPOINT
from llm.retrieval import ReplyRetriever, exchange_key

KEYS = ["book a table for two in san jose", "what is the weather in boston tomorrow",
        "find me a movie to watch tonight", "book a table for four in boston", "play some jazz music"]
REPLIES = ["Which restaurant?", "It will be sunny.", "How about Inception?", "What time?", "Playing jazz now."]


def test_nearest_key_and_self_exclusion():
    retriever = ReplyRetriever(KEYS, REPLIES)
    assert retriever("could you book a table for two in san jose") == "Which restaurant?"
    assert retriever.nearest(["what's the weather like in boston"]) == [1]
    # training: an exchange never retrieves itself, it gets its nearest other exchange
    assert retriever.nearest(KEYS[:1], exclude=[0]) == [3]
    assert retriever.nearest(KEYS[:2] + KEYS[3:4], chunk=2) == [0, 1, 3]  # chunked like one call


def test_mismatched_or_empty_index_is_a_value_error():
    with pytest.raises(ValueError, match="as many replies as keys"):
        ReplyRetriever(KEYS, REPLIES[:2])
    with pytest.raises(ValueError):
        ReplyRetriever([], [])


def test_exchange_key_weighs_the_user_turn_twice():
    assert exchange_key("Which city?", "Boston") == "Boston Boston Which city?"


def test_reply_edit_canvas_round_trip():
    tok = AutoTokenizer.from_pretrained(DEFAULT_CHECKPOINT)
    ids = cv.SpecialIds(tok)
    enc = lambda t: tok(t, add_special_tokens=False)["input_ids"]
    system, user = enc("Which city are you in?"), enc("San Jose please")
    draft, target = enc("What date would you like?"), enc("What time would you like?")
    layout = cv.reply_edit_layout(system, user, draft, ids, target)
    p, n = layout.prompt_length, len(draft)
    assert layout.input_ids[:p].tolist() == [ids.reply, ids.system, *system, ids.user, *user, ids.sep, *draft, ids.sep]
    assert layout.input_ids[p:].tolist() == [ids.mask] * (2 * n)
    head = len(system) + len(user) + 4
    # edit and insertion slots share the position id of the draft token they act on
    assert layout.position_ids[p:].tolist() == [q for i in range(head, head + n) for q in (i, i)]
    assert layout.token_type_ids[p:].tolist() == [cv.OUTPUT_TYPE, cv.INSERT_TYPE] * n
    canvas = layout.target[p:].tolist()
    assert canvas.count(ids.keep) == n - 1  # one substitution, the rest kept
    assert cv.decode_reply_edit(draft, canvas, ids) == target
    assert torch.all(layout.target[:p] == -100)


def test_sgd_index_is_cached_and_a_damaged_cache_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("QUICKSILVER_CACHE", str(tmp_path))
    built = ReplyRetriever.from_sgd("dev")
    (cached,) = tmp_path.glob("reply-index-dev-*.pkl")
    again = ReplyRetriever.from_sgd("dev")
    query = exchange_key("Which city?", "book a table for two in san jose")
    assert again(query) == built(query) and again.replies == built.replies
    cached.write_bytes(b"not a pickle")
    rebuilt = ReplyRetriever.from_sgd("dev")
    assert rebuilt(query) == built(query)
    assert cached.stat().st_size > 1000  # rewritten
