"""Sequence layouts of the Quicksilver checkpoint: the edit canvas (cleanup) and the reply canvas.

Every layout is *prompt* followed by a run of output positions; the sampler
(:mod:`llm.sampler`) fills whatever output positions are masked, so the same
``generate`` serves a public dLLM whose canvas is a plain run of masks.

Cleanup -- an edit-aligned canvas (in the spirit of edit-based generation such as
LaserTagger, Malmi et al. 2019, and Levenshtein Transformer, Gu et al. 2019, but
decoded by masked diffusion). For an input of ``n`` tokens ``x_1..x_n``::

    [CLEAN] x_1 .. x_n [SEP] | e_1 a_1 e_2 a_2 .. e_n a_n

``e_i`` is the edit of input token ``i``: ``[KEEP]``, ``[DEL]`` or a replacement
token; ``a_i`` is what is inserted after it: ``[DEL]`` (nothing) or one token.
``e_i`` and ``a_i`` share position id ``i`` with ``x_i`` (token type 1 and 2), so the
model reads "what happens to the token at this position". Copying is an action
(``[KEEP]``), so rare names survive a 4k vocabulary untouched.

Reply -- the usual dLLM layout::

    [REPLY] [SYS] previous system turn [USER] user turn [SEP] | r_1 .. r_R

with the response padded by ``[EOS]`` to ``R`` tokens (LLaDA, Nie et al. 2025).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import torch

from llm.tokenizer import CLEAN, DEL, EOS, KEEP, REPLY, SEP, SYSTEM, USER

PROMPT_TYPE, OUTPUT_TYPE, INSERT_TYPE = 0, 1, 2
#: Longest training input (tokens) of a cleanup canvas.
MAX_CLEANUP_TOKENS = 96
#: Longest input (tokens) one cleanup canvas takes when cleaning; longer text is cut into
#: chunks (by sentence, then at a word start). 99 % of the training inputs have at most
#: 38 tokens, so a longer canvas reaches positions the model has hardly seen: five
#: sentences of 15 tokens in one canvas lost words, in chunks of 48 none.
CHUNK_TOKENS = 48
#: Reply canvas length (tokens) and the longest prompt part kept of each turn.
REPLY_LENGTH = 32
MAX_TURN_TOKENS = 40


@dataclass
class Layout:
    """One sequence: prompt plus output canvas, as 1-D ``torch.long`` tensors.

    ``target`` holds the training target at output positions and ``-100`` at prompt
    positions (``None`` at inference). ``prompt_length`` is the number of prompt tokens.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    token_type_ids: torch.Tensor
    prompt_length: int
    target: torch.Tensor | None = None


class SpecialIds:
    """Ids of the special tokens of a Quicksilver tokenizer."""

    def __init__(self, tokenizer) -> None:
        ids = tokenizer.convert_tokens_to_ids
        self.clean, self.reply, self.sep = ids(CLEAN), ids(REPLY), ids(SEP)
        self.user, self.system = ids(USER), ids(SYSTEM)
        self.keep, self.delete, self.eos = ids(KEEP), ids(DEL), ids(EOS)
        self.mask, self.pad = tokenizer.mask_token_id, tokenizer.pad_token_id


def align_edits(src: list[int], tgt: list[int], keep: int, delete: int) -> tuple[list[int], list[int]]:
    """Edit labels turning ``src`` into ``tgt``: ``(edits, inserts)``, each ``len(src)`` long.

    Alignment by ``difflib.SequenceMatcher`` on token ids. A target token that finds
    no slot (a second token inserted at one place) is dropped; :func:`apply_edits`
    of the result is then the closest representable target.
    """
    edits = [delete] * len(src)
    inserts = [delete] * len(src)
    matcher = difflib.SequenceMatcher(None, src, tgt, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            for i in range(i1, i2):
                edits[i] = keep
        elif op in ("replace", "insert"):
            pending = list(tgt[j1:j2])
            for i in range(i1, i2):
                if pending:
                    edits[i] = pending.pop(0)
            if pending:
                at = i2 - 1 if i2 > 0 else 0
                if i2 == 0 and edits[0] == keep:
                    # insertion before the first token: fold it into the first edit
                    edits[0] = pending.pop(0)
                elif inserts[at] == delete:
                    inserts[at] = pending.pop(0)
    return edits, inserts


def apply_edits(src: list[int], edits: list[int], inserts: list[int], keep: int, delete: int) -> list[int]:
    """Output tokens of an edit canvas: kept, replaced and inserted tokens in order."""
    out: list[int] = []
    for x, e, a in zip(src, edits, inserts):
        if e == keep:
            out.append(x)
        elif e != delete:
            out.append(e)
        if a != delete and a != keep:
            out.append(a)
    return out


def cleanup_layout(src: list[int], ids: SpecialIds, tgt: list[int] | None = None) -> Layout:
    """The cleanup layout for input tokens ``src`` (and training target ``tgt``)."""
    n = len(src)
    prompt = [ids.clean, *src, ids.sep]
    canvas_pos = [p for i in range(1, n + 1) for p in (i, i)]
    input_ids = prompt + [ids.mask] * (2 * n)
    position_ids = list(range(n + 2)) + canvas_pos
    token_type_ids = [PROMPT_TYPE] * (n + 2) + [OUTPUT_TYPE, INSERT_TYPE] * n
    target = None
    if tgt is not None:
        edits, inserts = align_edits(src, tgt, ids.keep, ids.delete)
        target = torch.tensor([-100] * (n + 2) + [t for pair in zip(edits, inserts) for t in pair])
    return Layout(
        torch.tensor(input_ids), torch.tensor(position_ids), torch.tensor(token_type_ids), n + 2, target
    )


def decode_cleanup(src: list[int], canvas: list[int], ids: SpecialIds,
                   word_starts: list[bool] | None = None) -> list[int]:
    """Output tokens from a filled edit canvas (``2 * len(src)`` ids).

    With ``word_starts`` (one flag per input token: does a word begin here), edits are
    made word-consistent: a sub-word piece follows the keep/delete decision of its word's
    first piece, so a word is kept or dropped whole and never cut in the middle.
    """
    edits = list(canvas[0::2])
    if word_starts is not None:
        head = ids.keep
        for i, start in enumerate(word_starts):
            if start:
                head = edits[i]
            elif head in (ids.keep, ids.delete) and edits[i] in (ids.keep, ids.delete):
                edits[i] = head
    return apply_edits(src, edits, canvas[1::2], ids.keep, ids.delete)


def reply_layout(
    system_ids: list[int], user_ids: list[int], ids: SpecialIds, tgt: list[int] | None = None,
    reply_length: int = REPLY_LENGTH,
) -> Layout:
    """The reply layout: previous system turn and user turn, then ``reply_length`` output slots.

    Each turn keeps its last :data:`MAX_TURN_TOKENS` tokens. ``tgt`` (training) is cut
    to ``reply_length - 1`` tokens and padded with ``[EOS]``.
    """
    prompt = [ids.reply, ids.system, *system_ids[-MAX_TURN_TOKENS:], ids.user, *user_ids[-MAX_TURN_TOKENS:], ids.sep]
    p = len(prompt)
    input_ids = prompt + [ids.mask] * reply_length
    position_ids = list(range(p + reply_length))
    token_type_ids = [PROMPT_TYPE] * p + [OUTPUT_TYPE] * reply_length
    target = None
    if tgt is not None:
        body = list(tgt[: reply_length - 1])
        target = torch.tensor([-100] * p + body + [ids.eos] * (reply_length - len(body)))
    return Layout(torch.tensor(input_ids), torch.tensor(position_ids), torch.tensor(token_type_ids), p, target)


def decode_reply(canvas: list[int], ids: SpecialIds) -> list[int]:
    """Reply tokens up to (not including) the first ``[EOS]``; special tokens dropped."""
    out = []
    for t in canvas:
        if t == ids.eos:
            break
        if t in (ids.mask, ids.pad, ids.keep, ids.delete):
            continue
        out.append(t)
    return out
