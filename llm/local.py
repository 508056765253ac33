"""``LocalDiffusionLM``: the masked-diffusion engine in this process, on the CPU or a GPU."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from llm.backend import LanguageModel, Turn
from llm.chat import ChatTasks
from llm.model import LoadedModel, load_diffusion_model
from llm.tasks import CanvasTasks


class LocalDiffusionLM(LanguageModel):
    """Cleanup and replies from a local diffusion LM.

    One model per instance; calls from several threads are serialised by a lock held
    while a generator runs (a draft generator must be consumed or closed promptly; the
    asyncio forms of :class:`llm.backend.LanguageModel` do so).

    Args:
        loaded: a model from :func:`llm.model.load_diffusion_model`.
    """

    name = "local"

    def __init__(self, loaded: LoadedModel) -> None:
        self.loaded = loaded
        self.tasks = CanvasTasks(loaded) if loaded.layout == "quicksilver" else ChatTasks(loaded)
        self._lock = threading.Lock()

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path | None = None, device: str | None = None,
                        trust_remote_code: bool = False, quantize: str = "auto",
                        runtime: str = "torch") -> "LocalDiffusionLM":
        """Load from a folder or hub id (``None``: the shipped checkpoint); see :func:`load_diffusion_model`."""
        return cls(load_diffusion_model(name_or_path, device=device, trust_remote_code=trust_remote_code,
                                        quantize=quantize, runtime=runtime))

    def cleanup_drafts(self, transcript: str, reasoning_effort: str = "low") -> Iterator[str]:
        """Drafts of the cleaned transcript, one per denoising step (see :class:`llm.tasks.CanvasTasks`)."""
        with self._lock:
            yield from self.tasks.cleanup_drafts(transcript, reasoning_effort)

    def reply_drafts(self, history: Sequence[Turn], user_text: str, reasoning_effort: str = "low") -> Iterator[str]:
        """Drafts of the reply, one per denoising step."""
        with self._lock:
            yield from self.tasks.reply_drafts(history, user_text, reasoning_effort)

    def cleanup_batch(self, texts: Sequence[str], reasoning_effort: str = "low") -> list[str]:
        """Clean many transcripts in one batched sampling run (one forward pass per step for all)."""
        with self._lock:
            return self.tasks.cleanup_batch(texts, reasoning_effort)
