"""Batch formation of the shared cleanup queue (server.models.BatchingLanguageModel) on the
shipped LM: length-aware batches, several workers at once, errors handed to every caller."""

import threading

import pytest

from llm.local import LocalDiffusionLM
from server.models import BatchingLanguageModel


class GatedLM:
    """The real LM behind a gate: ``cleanup_batch`` waits for ``gate`` (so the queue fills up
    behind the first batch), records the texts of each batch, and counts batches in flight."""

    name = "gated"

    def __init__(self, inner: LocalDiffusionLM, gate: threading.Event, barrier: threading.Barrier | None = None):
        self.inner, self.gate, self.barrier = inner, gate, barrier
        self.seen: list[list[str]] = []
        self.entered = threading.Event()

    def cleanup_batch(self, texts, effort="low"):
        self.entered.set()
        assert self.gate.wait(30), "gate never opened"
        self.seen.append(list(texts))
        if self.barrier is not None and len(self.seen) == 1:
            # each worker's first batch: breaks (an error) unless the other worker's first batch
            # is in flight at the same time
            self.barrier.wait()
        return self.inner.cleanup_batch(texts, effort)

    def cleanup(self, text, effort="low"):
        return self.cleanup_batch([text], effort)[0]

    def close(self):
        pass


def test_batches_group_requests_of_similar_length(shipped_lm):
    gate = threading.Event()
    lm = GatedLM(shipped_lm, gate)
    batching = BatchingLanguageModel(lm, max_batch=3)
    blocker = batching.submit_cleanup("um first in line")
    assert lm.entered.wait(30)  # the worker holds the first batch; the rest queue behind it
    short = ["uh book a table", "um call mom", "play uh jazz"]
    long = ["um I would like to book a table for four people at the Italian place tomorrow at seven",
            "uh can you find me a flight from Boston to Denver leaving on the fifth of March please",
            "what is the weather going to be like in um Chicago on Friday afternoon and evening"]
    order = [short[0], long[0], short[1], long[1], short[2], long[2]]
    futures = [batching.submit_cleanup(text) for text in order]
    gate.set()
    results = [f.result(timeout=60) for f in futures]
    assert blocker.result(timeout=60)
    # the oldest waiting request leads each batch; the closest in length join it
    assert [batch[0] for batch in lm.seen[1:]] == [short[0], long[0]]
    assert [sorted(batch) for batch in lm.seen[1:]] == [sorted(short), sorted(long)]
    assert results == [shipped_lm.cleanup(text) for text in order]


def test_two_workers_run_batches_at_once(shipped_lm):
    gate, barrier = threading.Event(), threading.Barrier(2, timeout=30)
    replica = GatedLM(LocalDiffusionLM(shipped_lm.loaded), gate, barrier)
    first = GatedLM(shipped_lm, gate, barrier)
    batching = BatchingLanguageModel(first, max_batch=2, workers=[first, replica])
    texts = ["um book a table for two", "uh call mom", "play uh jazz please", "turn um the lights off"]
    futures = [batching.submit_cleanup(text) for text in texts]
    gate.set()
    assert [f.result(timeout=60) for f in futures] == [shipped_lm.cleanup(t) for t in texts]
    assert first.seen and replica.seen  # both workers took a batch, and met at the barrier
    assert sorted(t for batch in first.seen + replica.seen for t in batch) == sorted(texts)


def test_a_failing_batch_fails_its_callers_and_the_queue_keeps_serving(shipped_lm):
    class Failing(GatedLM):
        def cleanup_batch(self, texts, effort="low"):
            if any("explode" in t for t in texts):
                raise RuntimeError("backend failed")
            return super().cleanup_batch(texts, effort)

    gate = threading.Event()
    gate.set()
    batching = BatchingLanguageModel(Failing(shipped_lm, gate), max_batch=1)
    with pytest.raises(RuntimeError, match="backend failed"):
        batching.submit_cleanup("please explode").result(timeout=60)
    assert batching.submit_cleanup("um hello there").result(timeout=60) == shipped_lm.cleanup("um hello there")
    with pytest.raises(ValueError, match="reasoning_effort"):
        batching.submit_cleanup("hello", "maximum")



def test_a_failing_batch_runs_again_one_by_one_so_only_the_bad_request_fails(shipped_lm):
    class Poisoned(GatedLM):
        def cleanup_batch(self, texts, effort="low"):
            if any("poison" in t for t in texts):
                self.seen.append(list(texts))
                raise RuntimeError("a text the backend cannot take")
            return super().cleanup_batch(texts, effort)

    gate = threading.Event()
    lm = Poisoned(shipped_lm, gate)
    batching = BatchingLanguageModel(lm, max_batch=3)
    blocker = batching.submit_cleanup("um first in line")
    assert lm.entered.wait(30)  # the worker holds the first batch; the three below queue as one
    texts = ["um call mom", "poison pill", "uh play jazz"]
    futures = dict(zip(texts, (batching.submit_cleanup(t) for t in texts)))
    gate.set()
    assert blocker.result(timeout=60)
    with pytest.raises(RuntimeError, match="cannot take"):
        futures["poison pill"].result(timeout=60)
    assert futures["um call mom"].result(timeout=60) == shipped_lm.cleanup("um call mom")
    assert futures["uh play jazz"].result(timeout=60) == shipped_lm.cleanup("uh play jazz")
    assert batching.batches == [1, 3]
    assert sorted(lm.seen[1]) == sorted(texts)  # the batch of three failed, then each ran alone
    assert sorted(map(tuple, lm.seen[2:])) == sorted((t,) for t in texts)
