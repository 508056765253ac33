"""The Quicksilver tokenizer: byte-level BPE (``tokenizers``) wrapped as ``PreTrainedTokenizerFast``.

Byte-level BPE (Radford et al. 2019, GPT-2) never produces an unknown token, so any
transcript faster-whisper writes -- any script, any symbol -- can be encoded.
``add_prefix_space`` gives every word the same ``Ġword`` form wherever it stands,
which keeps the edit alignment of :mod:`llm.canvas` simple.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, MASK, EOS, UNK = "[PAD]", "[MASK]", "[EOS]", "[UNK]"
CLEAN, REPLY, SEP, USER, SYSTEM = "[CLEAN]", "[REPLY]", "[SEP]", "[USER]", "[SYS]"
KEEP, DEL = "[KEEP]", "[DEL]"
#: Special tokens in id order: ids 0..11 are fixed by this list.
SPECIAL_TOKENS = (PAD, MASK, EOS, UNK, CLEAN, REPLY, SEP, USER, SYSTEM, KEEP, DEL, "[RESERVED]")


def train_tokenizer(texts: Iterable[str], vocab_size: int = 4096) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer of ``vocab_size`` tokens on ``texts``.

    The special tokens of :data:`SPECIAL_TOKENS` get ids 0..11 in that order.
    Deterministic for a given sequence of texts.
    """
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return wrap(tok)


def wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    """Wrap a raw ``tokenizers.Tokenizer`` with the Quicksilver special-token roles."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        mask_token=MASK,
        eos_token=EOS,
        unk_token=UNK,
        sep_token=SEP,
        additional_special_tokens=[CLEAN, REPLY, USER, SYSTEM, KEEP, DEL, "[RESERVED]"],
        clean_up_tokenization_spaces=False,
    )
