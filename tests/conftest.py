"""Shared fixtures: a tiny randomly initialised diffusion LM saved to a temporary folder,
and the shipped checkpoint loaded once per test session."""

from __future__ import annotations

import pytest
import torch
from transformers import BertForMaskedLM

from llm.model import quicksilver_config
from llm.tokenizer import train_tokenizer

TINY_TEXTS = [
    "book a table for two at seven pm",
    "what is the weather like in san jose tomorrow",
    "play some music by the beatles please",
    "I want to fly from boston to chicago on friday",
    "um so I need uh a rental car",
] * 20

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A folder holding a tiny random ``BertForMaskedLM`` and a BPE tokenizer with a chat template,
    saved with ``save_pretrained`` like a public dLLM (no ``quicksilver.json``)."""
    folder = tmp_path_factory.mktemp("tiny-dllm")
    tokenizer = train_tokenizer(TINY_TEXTS, vocab_size=300)
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    model = BertForMaskedLM(quicksilver_config(len(tokenizer), hidden=32, layers=2, heads=2, max_positions=512))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def shipped_lm():
    """The shipped checkpoint as a ``LocalDiffusionLM`` on the CPU, loaded once."""
    from llm.local import LocalDiffusionLM

    return LocalDiffusionLM.from_pretrained(None, device="cpu")
