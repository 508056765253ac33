"""Cleanup and replies on public dLLMs (LLaDA, Dream, ModernBERT chat) through their chat template.

The canvas is a plain run of ``gen_length`` masks after the templated prompt, as in
LLaDA's ``generate.py``; the output is cut at the first end-of-sequence token.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from llm.backend import Turn, check_text
from llm.effort import sampler_settings
from llm.model import LoadedModel
from llm.rules import rule_cleanup
from llm.sampler import denoising_steps
from llm.faithful import is_faithful

CLEANUP_INSTRUCTION = (
    "Clean up this speech transcript: remove filler words (um, uh, you know, I mean), false starts "
    "and self-corrections (keep the correction), fix punctuation and casing. Keep every content word "
    "and the meaning; add nothing. Answer with the cleaned transcript only.\n\nTranscript: {text}"
)
REPLY_SYSTEM = (
    "You are a voice assistant for everyday services (restaurants, weather, music, travel, banking, "
    "calendars). Answer in one or two short spoken sentences, no lists or markup."
)


class ChatTasks:
    """Cleanup and replies by prompting a public dLLM with its chat template.

    Args:
        loaded: the model; its tokenizer needs a chat template (else plain text prompts).
        gen_length: output canvas length in tokens.
    """

    def __init__(self, loaded: LoadedModel, gen_length: int = 64) -> None:
        self.loaded = loaded
        self.tok = loaded.tokenizer
        self.gen_length = gen_length
        self.stop_ids = {i for i in (self.tok.eos_token_id, self.tok.pad_token_id) if i is not None}
        eot = self.tok.convert_tokens_to_ids("<|eot_id|>") if "<|eot_id|>" in self.tok.get_vocab() else None
        if eot is not None:
            self.stop_ids.add(eot)

    def _prompt(self, messages: list[dict]) -> torch.Tensor:
        if getattr(self.tok, "chat_template", None):
            ids = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
        else:
            text = "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant:"
            ids = self.tok(text, add_special_tokens=True)["input_ids"]
        return torch.tensor([list(ids)], device=self.loaded.device)

    def _text(self, body: list[int]) -> str:
        out = []
        for t in body:
            if t in self.stop_ids:
                break
            if t != self.loaded.mask_id:
                out.append(t)
        return " ".join(self.tok.decode(out, skip_special_tokens=True).split())

    def _drafts(self, messages: list[dict], effort: str) -> Iterator[str]:
        settings = sampler_settings(effort)
        prompt = self._prompt(messages)
        limit = self.loaded.max_positions - self.gen_length
        if prompt.shape[1] > limit:
            raise ValueError(f"prompt of {prompt.shape[1]} tokens exceeds the model window ({limit} + output)")
        for x, _ in denoising_steps(
            self.loaded.model, prompt, self.gen_length, self.loaded.mask_id, steps=settings.steps,
            block_length=settings.block_length, threshold=settings.threshold, remasking=settings.remasking,
        ):
            yield self._text(x[0, prompt.shape[1]:].tolist())

    def cleanup_drafts(self, transcript: str, reasoning_effort: str = "low") -> Iterator[str]:
        """Drafts of the cleaned transcript; the last one falls back to rules if unfaithful."""
        text = check_text(transcript, "transcript")
        last = None
        for draft in self._drafts([{"role": "user", "content": CLEANUP_INSTRUCTION.format(text=text)}],
                                  reasoning_effort):
            if last is not None:
                yield last
            last = draft
        yield last if last and is_faithful(text, last) else (rule_cleanup(text) or text)

    def cleanup_batch(self, texts: Sequence[str], reasoning_effort: str = "low") -> list[str]:
        """Cleaned forms of ``texts`` one after another."""
        return [list(self.cleanup_drafts(t, reasoning_effort))[-1] for t in texts]

    def reply_drafts(self, history: Sequence[Turn], user_text: str, reasoning_effort: str = "low") -> Iterator[str]:
        """Drafts of a reply to ``user_text`` with the whole ``history`` in the chat."""
        user = check_text(user_text, "user_text")
        messages = [{"role": "system", "content": REPLY_SYSTEM}]
        messages += [{"role": t.role, "content": t.text} for t in history]
        messages.append({"role": "user", "content": user})
        yield from self._drafts(messages, reasoning_effort)
