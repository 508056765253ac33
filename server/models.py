"""The models every session of the server shares: one per stage, loaded once per process.

- Whisper (``voice.asr.WhisperRecognizer``): one CTranslate2 model; decodes from all sessions
  queue on its lock, in arrival order.
- Piper (``voice.tts.PiperSynthesizer``): one ONNX voice.
- The LM (``llm.load_backend``): reply drafts from all sessions queue on the model's lock;
  transcript cleanups go through :class:`BatchingLanguageModel`, which gathers the cleanups
  waiting at the same moment into ``cleanup_batch`` calls (one forward pass per denoising step
  for the whole batch) when the backend has one, on ``cleanup_workers`` copies of the LM.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from llm.backend import LanguageModel, Turn, check_text
from llm.effort import sampler_settings

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
    cleanup_max_batch: int = 8
    """Cleanups run together at most (1 = one at a time)."""
    cleanup_workers: int = 2
    """Cleanup batches run at once, each on its own copy of the LM."""


@dataclass
class _Request:
    text: str
    effort: str
    future: Future


class BatchingLanguageModel(LanguageModel):
    """A :class:`LanguageModel` whose cleanups from many sessions are batched.

    ``acleanup`` calls wait in one queue. Each worker thread takes the oldest waiting request
    and, of the other waiting requests with the same reasoning effort, the ``max_batch - 1``
    closest to it in length (fewer pad positions in the batch's canvas), and runs
    ``cleanup_batch`` on its own model once. Backends without ``cleanup_batch`` are called one
    request at a time. Replies and cleanup drafts go straight to ``inner``.

    Args:
        inner: the LM; the first worker's model, and the one replies use.
        max_batch: most cleanups in one ``cleanup_batch`` call (1 = one at a time).
        replicas: further copies of the LM, one more worker each. On a CPU two workers of a
            small model beat one: two batches in flight keep both cores busy through the parts
            of a forward pass that do not parallelise well (bench/cleanup_load.py).

    Attributes:
        batches: sizes of the batches run so far (for tests and the benchmark).
    """

    def __init__(self, inner: LanguageModel, max_batch: int = 8, replicas: Sequence[LanguageModel] = ()) -> None:
        self.inner = inner
        self.name = inner.name
        self.max_batch = max_batch
        self.replicas = list(replicas)
        self.batches: list[int] = []
        self._waiting: list[_Request] = []
        self._ready = threading.Condition()
        self._workers = [
            threading.Thread(target=self._serve, args=(model,), name=f"quicksilver-cleanup-{n}", daemon=True)
            for n, model in enumerate([inner, *self.replicas])
        ]
        for worker in self._workers:
            worker.start()

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
            self._waiting.append(request)
            self._ready.notify()
        return future

    def _take_batch(self) -> list[_Request]:
        """The oldest waiting request and the same-effort requests closest to it in length."""
        with self._ready:
            while not self._waiting:
                self._ready.wait()
            first = self._waiting[0]
            others = sorted((r for r in self._waiting[1:] if r.effort == first.effort),
                            key=lambda r: abs(len(r.text) - len(first.text)))
            batch = [first, *others[: self.max_batch - 1]]
            taken = {id(r) for r in batch}
            self._waiting = [r for r in self._waiting if id(r) not in taken]
            return batch

    def _serve(self, model: LanguageModel) -> None:
        while True:
            live = [r for r in self._take_batch() if r.future.set_running_or_notify_cancel()]
            if not live:
                continue
            self.batches.append(len(live))
            texts, effort = [r.text for r in live], live[0].effort
            try:
                if len(live) > 1 and hasattr(model, "cleanup_batch"):
                    results = model.cleanup_batch(texts, effort)
                else:
                    results = [model.cleanup(text, effort) for text in texts]
            except BaseException as exc:  # noqa: BLE001 - handed to every waiting caller
                for r in live:
                    r.future.set_exception(exc)
                continue
            for r, text in zip(live, results):
                r.future.set_result(text)

    def close(self) -> None:
        for model in [self.inner, *self.replicas]:
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
    config = PipelineConfig(asr=AsrConfig(model=options.asr_model), turn_taking="barge_in")
    recognizer = WhisperRecognizer(config.asr)
    synthesizer = PiperSynthesizer(options.tts_voice)
    def load_lm():
        return llm.load_backend(options.llm, options.llm_model, options.llm_base_url, options.device,
                                quantize=options.llm_quantize)

    lm = BatchingLanguageModel(load_lm(), max_batch=options.cleanup_max_batch,
                               replicas=[load_lm() for _ in range(options.cleanup_workers - 1)])
    log.info("models loaded in %.1f s", time.perf_counter() - started)
    return VoicePipeline(lm, synthesizer, recognizer, config)
