"""The language-model interface the voice pipeline and the server call.

A backend implements two synchronous generators, :meth:`LanguageModel.cleanup_drafts`
and :meth:`LanguageModel.reply_drafts`, each yielding successive drafts of the
output (a diffusion model refines the whole text at every denoising step; an
autoregressive API streams a growing prefix). The last draft is the result.
Everything else -- the blocking one-shot calls and the asyncio forms that run
the model on a worker thread and never block the event loop -- is derived here.
"""

from __future__ import annotations

import abc
import asyncio
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Literal, NamedTuple

from llm.effort import sampler_settings


class LanguageModelError(RuntimeError):
    """A backend failed to produce text (HTTP error, bad response, model error)."""


class Turn(NamedTuple):
    """One turn of dialogue history: ``role`` is ``"user"`` or ``"assistant"``."""

    role: Literal["user", "assistant"]
    text: str


def lone_surrogate(text: str) -> int | None:
    """Index of the first lone surrogate (U+D800..U+DFFF) in ``text``, or ``None``.

    Python strings decoded from JSON escapes may hold them; they cannot be encoded as UTF-8
    (tokenizers reject them).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def check_text(text: str, what: str = "text") -> str:
    """Validate an input text and return it stripped of surrounding whitespace.

    Control characters other than tab and newline are replaced by spaces.

    Raises:
        TypeError: ``text`` is not a ``str``.
        ValueError: ``text`` is empty or whitespace only, or holds a lone surrogate (not
            encodable as UTF-8, e.g. from JSON ``"\\udc80"``).
    """
    if not isinstance(text, str):
        raise TypeError(f"{what} must be str, not {type(text).__name__}")
    surrogate = lone_surrogate(text)
    if surrogate is not None:
        raise ValueError(f"{what} holds a lone surrogate (U+{ord(text[surrogate]):04X}) at character "
                         f"{surrogate}: not valid Unicode")
    cleaned = "".join(" " if (ord(c) < 32 and c not in "\t\n") or ord(c) == 127 else c for c in text)
    cleaned = " ".join(cleaned.split())
    if not cleaned:
        raise ValueError(f"{what} is empty or whitespace only")
    return cleaned


class LanguageModel(abc.ABC):
    """A backend for the two jobs of the LM stage: transcript cleanup and replies."""

    name: str = "lm"

    @abc.abstractmethod
    def cleanup_drafts(self, transcript: str, reasoning_effort: str = "low") -> Iterator[str]:
        """Yield drafts of the cleaned transcript; the last one is the result.

        Raises:
            ValueError: empty transcript or unknown ``reasoning_effort``.
            LanguageModelError: the backend failed.
        """

    @abc.abstractmethod
    def reply_drafts(
        self, history: Sequence[Turn], user_text: str, reasoning_effort: str = "low"
    ) -> Iterator[str]:
        """Yield drafts of the assistant's spoken reply; the last one is the result."""

    # -- blocking one-shot forms ------------------------------------------------
    def cleanup(self, transcript: str, reasoning_effort: str = "low") -> str:
        """Return the cleaned transcript (see :meth:`cleanup_drafts`)."""
        return _last(self.cleanup_drafts(transcript, reasoning_effort))

    def respond(self, history: Sequence[Turn], user_text: str, reasoning_effort: str = "low") -> str:
        """Return a short spoken-style reply to ``user_text`` given ``history``."""
        return _last(self.reply_drafts(history, user_text, reasoning_effort))

    # -- asyncio forms: the model runs on a worker thread -------------------------
    async def acleanup(self, transcript: str, reasoning_effort: str = "low") -> str:
        """:meth:`cleanup` on a worker thread."""
        sampler_settings(reasoning_effort)
        return await asyncio.to_thread(self.cleanup, transcript, reasoning_effort)

    async def arespond(
        self, history: Sequence[Turn], user_text: str, reasoning_effort: str = "low"
    ) -> str:
        """:meth:`respond` on a worker thread."""
        sampler_settings(reasoning_effort)
        return await asyncio.to_thread(self.respond, list(history), user_text, reasoning_effort)

    def astream_cleanup(self, transcript: str, reasoning_effort: str = "low") -> AsyncIterator[str]:
        """Async iterator over :meth:`cleanup_drafts`, produced on a worker thread."""
        sampler_settings(reasoning_effort)
        return _drain_in_thread(lambda: self.cleanup_drafts(transcript, reasoning_effort))

    def astream_respond(
        self, history: Sequence[Turn], user_text: str, reasoning_effort: str = "low"
    ) -> AsyncIterator[str]:
        """Async iterator over :meth:`reply_drafts`, produced on a worker thread."""
        sampler_settings(reasoning_effort)
        history = list(history)
        return _drain_in_thread(lambda: self.reply_drafts(history, user_text, reasoning_effort))

    def close(self) -> None:
        """Release resources held by the backend (no-op by default)."""


def _last(drafts: Iterator[str]) -> str:
    result = None
    for result in drafts:
        pass
    if result is None:
        raise LanguageModelError("the backend produced no output")
    return result


_DONE = object()


async def _drain_in_thread(make_iter) -> AsyncIterator[str]:
    """Run a blocking generator on a thread and yield its items on the event loop.

    Cancelling the consumer (or closing this async generator) tells the producer
    thread to stop after its current item, so a cancelled reply stops the model.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in make_iter():
                if stop.is_set():
                    break
                loop.call_soon_threadsafe(queue.put_nowait, item)
        except BaseException as exc:  # handed to the consumer, re-raised there
            loop.call_soon_threadsafe(queue.put_nowait, exc)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, _DONE)

    worker = loop.run_in_executor(None, produce)
    try:
        while True:
            item = await queue.get()
            if item is _DONE:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        if not worker.done():
            # Wait for the worker so no thread outlives the stream; it stops after one step.
            await asyncio.shield(worker)


def load_backend(
    kind: str = "local",
    model: str | None = None,
    base_url: str | None = None,
    device: str | None = None,
    api_key: str | None = None,
    timeout_s: float = 30.0,
    quantize: str = "auto",
    runtime: str = "torch",
) -> LanguageModel:
    """Create the backend chosen by the ``--llm``/``--llm-model``/``--llm-base-url`` flags.

    Args:
        kind: ``"local"`` (:class:`llm.local.LocalDiffusionLM`) or ``"openai"``
            (:class:`llm.openai_compat.OpenAICompatibleLM`).
        model: local folder or hub id (local), or model name (openai). ``None`` picks
            the checkpoint shipped in ``llm/checkpoint`` (local) or ``mercury-2`` (openai).
        base_url: base URL of an OpenAI-compatible server, e.g. ``http://127.0.0.1:8000/v1``.
        device: ``"cpu"`` or ``"cuda"``; ``None`` picks CUDA when available.
        quantize: ``"auto"``, ``"none"`` or ``"int8"`` (local only; see
            :func:`llm.model.load_diffusion_model`).
        runtime: ``"torch"`` or ``"onnxruntime"`` (local int8 only; see
            :func:`llm.model.load_diffusion_model`).

    Raises:
        ValueError: unknown ``kind``.
    """
    if kind == "local":
        from llm.local import LocalDiffusionLM

        return LocalDiffusionLM.from_pretrained(model, device=device, quantize=quantize, runtime=runtime)
    if kind == "openai":
        from llm.openai_compat import OpenAICompatibleLM

        return OpenAICompatibleLM(
            base_url=base_url, model=model or "mercury-2", api_key=api_key, timeout_s=timeout_s
        )
    raise ValueError(f"unknown LLM backend {kind!r}; expected 'local' or 'openai'")
