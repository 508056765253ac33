"""Cleanup workers in child processes (server.workers.CleanupProcess) on the shipped LM: the same
answers as in this process, errors raised again with their type, a dead child reported and
restarted, a bad model folder reported, no process left behind."""

import multiprocessing
import os
import signal

import pytest

from server.models import BatchingLanguageModel, ModelOptions, cleanup_processes
from server.workers import CleanupProcess, WorkerError

TEXTS = ["um can you set an alarm for uh for six thirty am",
         "what is the the capital of France no of Spain",
         "play some uh jazz please"]
LOAD = {"kind": "local", "model": None, "device": "cpu", "quantize": "auto"}


@pytest.fixture(scope="module")
def worker():
    process = CleanupProcess(LOAD, threads=1, name="quicksilver-cleanup-test")
    yield process
    process.close()


def test_a_worker_process_answers_like_the_lm_in_this_process(worker, shipped_lm):
    assert worker.cleanup_batch(TEXTS) == shipped_lm.cleanup_batch(TEXTS)
    assert worker.cleanup(TEXTS[2]) == shipped_lm.cleanup(TEXTS[2])
    assert worker.pid != os.getpid()


def test_errors_in_the_child_are_raised_with_their_type_and_it_keeps_serving(worker, shipped_lm):
    with pytest.raises(ValueError, match="reasoning_effort"):
        worker.cleanup_batch(TEXTS, "maximum")
    assert worker.cleanup_batch(TEXTS[:1]) == shipped_lm.cleanup_batch(TEXTS[:1])


def test_a_dead_worker_fails_its_batch_then_restarts(worker, shipped_lm):
    worker.wait_ready()
    old = worker.pid
    os.kill(old, signal.SIGKILL)
    with pytest.raises(WorkerError, match="exit|gone|pipe"):
        worker.cleanup_batch(TEXTS)
    assert worker.cleanup_batch(TEXTS) == shipped_lm.cleanup_batch(TEXTS)  # a new child
    assert worker.pid not in (None, old)


def test_a_worker_that_cannot_load_its_model_says_why(tmp_path):
    process = CleanupProcess({**LOAD, "model": str(tmp_path / "missing")}, name="quicksilver-cleanup-bad")
    try:
        with pytest.raises(WorkerError, match="FileNotFoundError: model folder not found"):
            process.wait_ready()
    finally:
        process.close()
    assert all(p.name != "quicksilver-cleanup-bad" for p in multiprocessing.active_children())


def test_the_batching_queue_spreads_batches_over_worker_processes(shipped_lm):
    workers = cleanup_processes(ModelOptions(cleanup_workers=2, cleanup_worker="process"), LOAD)
    # one text per batch: an int8 batch's activation scale spans its rows, so only a batch of
    # one is sure to equal the single cleanup in this process
    batching = BatchingLanguageModel(shipped_lm, max_batch=1, workers=workers)
    pids = {w.pid for w in workers}
    try:
        futures = [batching.submit_cleanup(text) for text in TEXTS * 4]
        assert [f.result(timeout=120) for f in futures] == [shipped_lm.cleanup(t) for t in TEXTS * 4]
        assert batching.batches == [1] * 12
        assert all(w.batches > 0 for w in workers)  # both processes took batches
    finally:
        batching.close()
    assert not pids & {p.pid for p in multiprocessing.active_children()}  # both children ended


def test_worker_options_are_checked():
    with pytest.raises(ValueError, match="unknown cleanup worker 'fork'"):
        cleanup_processes(ModelOptions(cleanup_worker="fork"), LOAD)
    with pytest.raises(ValueError, match="cleanup_workers must be >= 1"):
        cleanup_processes(ModelOptions(cleanup_workers=0), LOAD)
    assert cleanup_processes(ModelOptions(llm="openai"), LOAD) == []  # a remote API: threads
