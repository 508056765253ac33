"""The models every session of the server shares: one per stage, loaded once per process.

- Whisper (``voice.asr.WhisperRecognizer``): one CTranslate2 model; decodes from all sessions
  queue on its lock, in arrival order.
- Piper (``voice.tts.PiperSynthesizer``): one ONNX voice.
- The LM (``llm.load_backend``): reply drafts from all sessions queue on the model's lock;
  transcript cleanups go through :class:`BatchingLanguageModel`, which gathers the cleanups
  waiting at the same moment into one ``cleanup_batch`` call (one forward pass per denoising step
  for the whole batch) when the backend has one.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
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


class BatchingLanguageModel(LanguageModel):
    """A :class:`LanguageModel` whose cleanups from many sessions are batched.

    ``acleanup`` calls wait in a queue; one worker thread takes everything waiting (up to
    ``max_batch``, same reasoning effort) and runs ``inner.cleanup_batch`` once. Backends without
    ``cleanup_batch`` are called one request at a time. Replies go straight to ``inner``.

    Attributes:
        batches: sizes of the batches run so far (for tests and the benchmark).
    """

    def __init__(self, inner: LanguageModel, max_batch: int = 8) -> None:
        self.inner = inner
        self.name = inner.name
        self.max_batch = max_batch
        self.batches: list[int] = []
        self._requests: queue.Queue = queue.Queue()
        self._worker = threading.Thread(target=self._serve, name="quicksilver-cleanup-batcher", daemon=True)
        self._worker.start()

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
        self._requests.put((check_text(transcript, "transcript"), reasoning_effort, future))
        return future

    def _serve(self) -> None:
        while True:
            first = self._requests.get()
            pending, batch = [], [first]
            while len(batch) < self.max_batch:
                try:
                    item = self._requests.get_nowait()
                except queue.Empty:
                    break
                (batch if item[1] == first[1] else pending).append(item)
            for item in pending:  # other efforts wait for the next round
                self._requests.put(item)
            live = [item for item in batch if item[2].set_running_or_notify_cancel()]
            if not live:
                continue
            self.batches.append(len(live))
            texts, effort = [item[0] for item in live], first[1]
            try:
                if len(live) > 1 and hasattr(self.inner, "cleanup_batch"):
                    results = self.inner.cleanup_batch(texts, effort)
                else:
                    results = [self.inner.cleanup(text, effort) for text in texts]
            except BaseException as exc:  # noqa: BLE001 - handed to every waiting caller
                for item in live:
                    item[2].set_exception(exc)
                continue
            for item, text in zip(live, results):
                item[2].set_result(text)

    def close(self) -> None:
        self.inner.close()


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
    lm = BatchingLanguageModel(llm.load_backend(options.llm, options.llm_model, options.llm_base_url, options.device,
                                                quantize=options.llm_quantize),
                               max_batch=options.cleanup_max_batch)
    log.info("models loaded in %.1f s", time.perf_counter() - started)
    return VoicePipeline(lm, synthesizer, recognizer, config)
