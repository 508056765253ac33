"""The models every session of the server shares: one per stage, loaded once per process.

- Whisper (``voice.asr.WhisperRecognizer``): one CTranslate2 model; decodes from all sessions
  queue on its lock, in arrival order.
- Piper (``voice.tts.PiperSynthesizer``): one ONNX voice.
- The LM (``llm.load_backend``): reply drafts from all sessions queue on the model's lock;
  transcript cleanups go through :class:`BatchingLanguageModel`, which gathers the cleanups
  waiting at the same moment into ``cleanup_batch`` calls (one forward pass per denoising step
  for the whole batch) when the backend has one, on ``cleanup_workers`` copies of the LM (on the
  CPU each in its own process: :mod:`server.workers`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from llm.backend import LanguageModel, LanguageModelError, Turn, check_text
from llm.effort import sampler_settings
from server.workers import CleanupProcess

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelOptions:
    """Which models to load (the ``serve`` command's model flags)."""

    llm: str = "local"
    llm_model: str | None = None
    llm_base_url: str | None = None
    device: str | None = "cpu"
    llm_quantize: str = "auto"
    asr_model: str | None = None
    tts_voice: str | None = None
    cleanup_max_batch: int = 4
    """Cleanups run together at most (1 = one at a time). On single-threaded worker processes
    batches of 4 served Disfl-QA at concurrency 32 about 7 % faster than batches of 8 (less
    padding); 2 and 3 were slower."""
    cleanup_workers: int = 2
    """Cleanup batches run at once, each on its own copy of the LM."""
    cleanup_worker: str = "auto"
    """Where cleanup workers run: ``"process"`` (a :class:`server.workers.CleanupProcess` each),
    ``"thread"`` (copies of the LM in this process), or ``"auto"``: processes for the local LM on
    the CPU, threads otherwise (a remote API, a GPU)."""


#: Values of :attr:`ModelOptions.cleanup_worker`.
CLEANUP_WORKER_CHOICES = ("auto", "process", "thread")


@dataclass
class _Request:
    text: str
    effort: str
    future: Future


class BatchingLanguageModel(LanguageModel):
    """A :class:`LanguageModel` whose cleanups from many sessions are batched.

    ``acleanup`` calls wait in one queue. One thread per model of ``workers`` takes the oldest
    waiting request and, of the other waiting requests with the same reasoning effort, the
    ``max_batch - 1`` closest to it in length (fewer pad positions in the batch's canvas), and
    runs ``cleanup_batch`` on its model once. Models without ``cleanup_batch`` are called one
    request at a time. A batch that raises runs again one request at a time, so only the
    requests that fail alone get an error (a poisoned text, or a worker process that died:
    :class:`server.workers.CleanupProcess` restarts it). Replies and cleanup drafts go straight
    to ``inner``.

    Args:
        inner: the LM replies and drafts use.
        max_batch: most cleanups in one ``cleanup_batch`` call (1 = one at a time).
        workers: the models that run cleanup batches, one batch in flight each (default:
            ``inner`` alone). On a CPU, :class:`server.workers.CleanupProcess` copies of the LM
            (one per core) beat threads sharing one process (bench/cleanup_load.py).

    Attributes:
        batches: sizes of the batches run so far (for tests and the benchmark).
    """

    def __init__(self, inner: LanguageModel, max_batch: int = 8,
                 workers: Sequence[LanguageModel | CleanupProcess] | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.max_batch = max_batch
        self.workers = list(workers) if workers else [inner]
        self.batches: list[int] = []
        self._waiting: list[_Request] = []
        self._ready = threading.Condition()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._serve, args=(model,), name=f"quicksilver-cleanup-{n}", daemon=True)
            for n, model in enumerate(self.workers)
        ]
        for thread in self._threads:
            thread.start()

    def cleanup_drafts(self, transcript: str, reasoning_effort: str = "low") -> Iterator[str]:
        return self.inner.cleanup_drafts(transcript, reasoning_effort)

    def reply_drafts(self, history: Sequence[Turn], user_text: str, reasoning_effort: str = "low") -> Iterator[str]:
        return self.inner.reply_drafts(history, user_text, reasoning_effort)

    def cleanup(self, transcript: str, reasoning_effort: str = "low") -> str:
        """Blocking cleanup through the batch queue."""
        return self.submit_cleanup(transcript, reasoning_effort).result()

    async def acleanup(self, transcript: str, reasoning_effort: str = "low") -> str:
        return await asyncio.wrap_future(self.submit_cleanup(transcript, reasoning_effort))

    def submit_cleanup(self, transcript: str, reasoning_effort: str = "low") -> Future:
        """Queue one cleanup; the future resolves to the cleaned text.

        Raises:
            ValueError: empty transcript or unknown effort (at once, not through the future).
        """
        sampler_settings(reasoning_effort)
        future: Future = Future()
        request = _Request(check_text(transcript, "transcript"), reasoning_effort, future)
        with self._ready:
            if self._closed:
                raise LanguageModelError("the cleanup queue is closed (the server is shutting down)")
            self._waiting.append(request)
            self._ready.notify()
        return future

    def _take_batch(self) -> list[_Request] | None:
        """The oldest waiting request and the same-effort requests closest to it in length
        (``None`` once closed)."""
        with self._ready:
            while not self._waiting and not self._closed:
                self._ready.wait()
            if self._closed:
                return None
            first = self._waiting[0]
            others = sorted((r for r in self._waiting[1:] if r.effort == first.effort),
                            key=lambda r: abs(len(r.text) - len(first.text)))
            batch = [first, *others[: self.max_batch - 1]]
            taken = {id(r) for r in batch}
            self._waiting = [r for r in self._waiting if id(r) not in taken]
            return batch

    def _serve(self, model: LanguageModel | CleanupProcess) -> None:
        while (batch := self._take_batch()) is not None:
            live = [r for r in batch if r.future.set_running_or_notify_cancel()]
            if not live:
                continue
            self.batches.append(len(live))
            try:
                results = self._run(model, [r.text for r in live], live[0].effort)
            except BaseException as exc:  # noqa: BLE001 - handed to the callers
                if len(live) == 1:
                    live[0].future.set_exception(exc)
                    continue
                # one bad request (or a worker that died under the batch) must not fail the
                # others: each runs again alone, and only the ones that fail alone get the error
                log.warning("a cleanup batch of %d failed (%s: %s); running it one request at a time",
                            len(live), type(exc).__name__, exc)
                for r in live:
                    try:
                        r.future.set_result(self._run(model, [r.text], r.effort)[0])
                    except BaseException as alone:  # noqa: BLE001 - handed to this caller
                        r.future.set_exception(alone)
                continue
            for r, text in zip(live, results):
                r.future.set_result(text)

    @staticmethod
    def _run(model: LanguageModel | CleanupProcess, texts: list[str], effort: str) -> list[str]:
        if len(texts) > 1 and hasattr(model, "cleanup_batch"):
            return model.cleanup_batch(texts, effort)
        return [model.cleanup(text, effort) for text in texts]

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop taking batches: waiting requests fail with :class:`llm.backend.LanguageModelError`,
        batches in flight finish (each worker thread is joined, at most ``timeout_s`` in all),
        then every model is closed. Joining matters at exit: a thread still inside a PyTorch or
        ONNX Runtime call while the interpreter shuts down aborts the process."""
        with self._ready:
            self._closed = True
            waiting, self._waiting = self._waiting, []
            self._ready.notify_all()
        for request in waiting:
            if request.future.set_running_or_notify_cancel():
                request.future.set_exception(LanguageModelError("the server is shutting down"))
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for model in [self.inner, *(w for w in self.workers if w is not self.inner)]:
            model.close()


@functools.lru_cache(maxsize=2)
def load_pipeline(options: ModelOptions = ModelOptions()):
    """The process-wide :class:`voice.pipeline.VoicePipeline` (ASR, TTS, batching LM) for
    ``options``; loaded on the first call, shared afterwards."""
    import llm
    from voice.asr import AsrConfig, WhisperRecognizer
    from voice.pipeline import PipelineConfig, VoicePipeline
    from voice.tts import PiperSynthesizer

    started = time.perf_counter()
    load_kwargs = {"kind": options.llm, "model": options.llm_model, "base_url": options.llm_base_url,
                   "device": options.device, "quantize": options.llm_quantize}
    # worker processes load their LMs while this process loads Whisper, Piper and its own LM
    processes = cleanup_processes(options, load_kwargs)
    try:
        config = PipelineConfig(asr=AsrConfig(model=options.asr_model), turn_taking="barge_in")
        recognizer = WhisperRecognizer(config.asr)
        synthesizer = PiperSynthesizer(options.tts_voice)
        inner = llm.load_backend(**load_kwargs)
        for process in processes:
            process.wait_ready()
    except BaseException:
        for process in processes:
            process.close()
        raise
    workers = processes or [inner, *(llm.load_backend(**load_kwargs) for _ in range(options.cleanup_workers - 1))]
    lm = BatchingLanguageModel(inner, max_batch=options.cleanup_max_batch, workers=workers)
    log.info("models loaded in %.1f s (%d cleanup workers, %s)", time.perf_counter() - started,
             len(workers), "processes" if processes else "threads")
    return VoicePipeline(lm, synthesizer, recognizer, config)


def cleanup_processes(options: ModelOptions, load_kwargs: dict) -> list:
    """The :class:`server.workers.CleanupProcess` workers ``options`` asks for (started, still
    loading), or ``[]`` where cleanups run on threads.

    ``"auto"`` picks processes for the local LM on the CPU; each gets
    ``cpu_count // cleanup_workers`` PyTorch threads (at least one) and loads the LM with
    ``runtime="auto"`` (one thread: the int8 transformer on ONNX Runtime, 1.46x faster; see
    :func:`llm.model.load_diffusion_model`).

    Raises:
        ValueError: unknown ``cleanup_worker``, or ``cleanup_workers < 1``.
    """
    if options.cleanup_worker not in CLEANUP_WORKER_CHOICES:
        raise ValueError(f"unknown cleanup worker {options.cleanup_worker!r}; expected one of "
                         f"{', '.join(CLEANUP_WORKER_CHOICES)}")
    if options.cleanup_workers < 1:
        raise ValueError("cleanup_workers must be >= 1")
    use = options.cleanup_worker
    if use == "auto":
        from llm.model import pick_device

        on_cpu = options.llm == "local" and pick_device(options.device).type == "cpu"
        use = "process" if on_cpu else "thread"
    if use == "thread":
        return []
    threads = max(1, (os.cpu_count() or 1) // options.cleanup_workers)
    load_kwargs = {**load_kwargs, "runtime": "auto"}  # one thread each: ONNX Runtime int8
    return [CleanupProcess(load_kwargs, threads=threads, name=f"quicksilver-cleanup-{n}")
            for n in range(options.cleanup_workers)]
