"""The TF-IDF reply retriever of the reply evaluation's baselines."""

import pytest

from llm.retrieval import ReplyRetriever, exchange_key

KEYS = ["book a table for two in san jose", "what is the weather in boston tomorrow",
        "find me a movie to watch tonight", "book a table for four in boston", "play some jazz music"]
REPLIES = ["Which restaurant?", "It will be sunny.", "How about Inception?", "What time?", "Playing jazz now."]


def test_nearest_key():
    retriever = ReplyRetriever(KEYS, REPLIES)
    assert retriever("could you book a table for two in san jose") == "Which restaurant?"
    assert retriever.nearest(["what's the weather like in boston"]) == [1]
    assert retriever.nearest(KEYS[:2] + KEYS[3:4], chunk=2) == [0, 1, 3]  # chunked like one call
    assert retriever.nearest(["zebra"]) == [0]  # no known term


def test_mismatched_or_empty_index_is_a_value_error():
    with pytest.raises(ValueError, match="as many replies as keys"):
        ReplyRetriever(KEYS, REPLIES[:2])
    with pytest.raises(ValueError):
        ReplyRetriever([], [])


def test_exchange_key_weighs_the_user_turn_twice():
    assert exchange_key("Which city?", "Boston") == "Boston Boston Which city?"
