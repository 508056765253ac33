"""Cleanup workers in child processes (server.workers.CleanupProcess) on the shipped LM: the same
answers as in this process, errors raised again with their type, a dead child reported and
restarted, a bad model folder reported, no process left behind."""

import multiprocessing
import os
import signal
import threading
import time

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


def wait_dead(pid: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(p.pid != pid for p in multiprocessing.active_children()):
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not end")


def test_a_worker_killed_between_batches_is_replaced_before_the_next_batch(worker, shipped_lm):
    worker.wait_ready()
    old, restarts = worker.pid, worker.restarts
    os.kill(old, signal.SIGKILL)
    wait_dead(old)
    assert worker.cleanup_batch(TEXTS) == shipped_lm.cleanup_batch(TEXTS)  # waits for a new child, no error
    assert worker.pid not in (None, old) and worker.restarts == restarts + 1


def test_a_worker_killed_mid_batch_fails_that_batch_and_the_next_child_answers(worker, shipped_lm):
    worker.wait_ready()
    old = worker.pid
    os.kill(old, signal.SIGSTOP)  # holds the batch below in flight until the kill
    failed = []
    call = threading.Thread(target=lambda: failed.append(pytest.raises(WorkerError, worker.cleanup_batch, TEXTS)))
    call.start()
    time.sleep(0.5)
    os.kill(old, signal.SIGKILL)
    call.join(30)
    assert not call.is_alive() and "exited during a batch" in str(failed[0].value)
    assert worker.cleanup_batch(TEXTS) == shipped_lm.cleanup_batch(TEXTS)
    assert worker.pid != old


def test_a_stopped_worker_is_killed_after_its_silence_limit_and_replaced(worker, shipped_lm):
    worker.wait_ready()
    old, worker.silence_limit_s = worker.pid, 2.0
    try:
        os.kill(old, signal.SIGSTOP)  # alive but silent: no heartbeat
        started = time.monotonic()
        with pytest.raises(WorkerError, match=r"stopped answering during a batch \(silent for 2 s\)"):
            worker.cleanup_batch(TEXTS)
        assert 2.0 <= time.monotonic() - started < 10
        wait_dead(old)
        assert worker.cleanup_batch(TEXTS) == shipped_lm.cleanup_batch(TEXTS)
    finally:
        worker.silence_limit_s = 15.0


def test_a_long_batch_is_not_mistaken_for_a_stopped_worker(worker, shipped_lm):
    """Heartbeats keep a batch alive past the silence limit: high effort, one token per step."""
    worker.silence_limit_s = 1.5  # heartbeats come every second
    try:
        text = " ".join(["um so I was thinking that uh we could maybe go to the the park"] * 6)
        started = time.monotonic()
        assert worker.cleanup_batch([text], "high") == shipped_lm.cleanup_batch([text], "high")
        assert time.monotonic() - started > 3.0  # twice the limit, answered all the same
    finally:
        worker.silence_limit_s = 15.0


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
