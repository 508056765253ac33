"""The two jobs of the LM stage on a loaded diffusion model: transcript cleanup and replies.

:class:`CanvasTasks` drives checkpoints in the Quicksilver layouts (:mod:`llm.canvas`);
:class:`ChatTasks` drives public dLLMs (LLaDA, Dream, ModernBERT chat) through their
chat template with a plain run of masks as the canvas. Both return drafts step by
step through :func:`llm.sampler.generate`'s callback.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from llm import canvas as cv
from llm.backend import Turn, check_text
from llm.effort import REPLY_BLOCK_LENGTH, sampler_settings
from llm.faithful import SENTENCE_END, drop_hesitations, is_faithful, restore_dropped
from llm.model import LoadedModel
from llm.rules import collapse_repeats, end_punctuation, rule_cleanup, tidy_punctuation
from llm.sampler import denoising_steps

#: Spoken when the model drafts an empty reply.
FALLBACK_REPLY = "Sorry, could you say that again?"


class CanvasTasks:
    """Cleanup and replies on a Quicksilver-layout checkpoint.

    Args:
        loaded: the model from :func:`llm.model.load_diffusion_model` (``layout == "quicksilver"``).
    """

    def __init__(self, loaded: LoadedModel) -> None:
        self.loaded = loaded
        self.tok = loaded.tokenizer
        self.ids = cv.SpecialIds(self.tok)
        ids = self.ids
        controls = {ids.pad, ids.mask, self.tok.unk_token_id, ids.clean, ids.reply, ids.sep, ids.user, ids.system}
        controls |= set(self.tok.convert_tokens_to_ids(["[RESERVED]"]))
        self.cleanup_suppress = sorted(controls | {ids.eos})
        self.reply_suppress = sorted(controls | {ids.keep, ids.delete})
        self.max_tokens = min(cv.CHUNK_TOKENS, (loaded.max_positions - 2))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens."""
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def allowed_output_ids(self, text: str) -> list[int]:
        """Token ids a cleanup canvas of ``text`` may hold: ``[KEEP]``, ``[DEL]``, punctuation, and the
        tokens of the input's words in their written, lower, capitalised and upper case.

        Constrained decoding: the model can drop, keep or re-case words and punctuate, but never
        write a word the speaker did not say.
        """
        words = text.split()
        variants = [text, text.lower(), " ".join(w[:1].upper() + w[1:] for w in words), text.upper()]
        variants += [w.strip(".,?!;:") for w in words]
        ids = {self.ids.keep, self.ids.delete, *self.punctuation_ids}
        for encoded in self.tok(variants, add_special_tokens=False)["input_ids"]:
            ids.update(encoded)
        return sorted(ids)

    @property
    def punctuation_ids(self) -> list[int]:
        """Vocabulary tokens made of punctuation only (with or without a leading space)."""
        if not hasattr(self, "_punctuation_ids"):
            vocab = self.tok.get_vocab()
            self._punctuation_ids = [i for t, i in vocab.items()
                                     if t.lstrip("Ġ") and all(c in ".,?!;:'\"-" for c in t.lstrip("Ġ"))]
        return self._punctuation_ids

    def word_starts(self, ids: list[int]) -> list[bool]:
        """Per token: does a word start here (byte-level BPE marks word starts with ``Ġ``)."""
        return [i == 0 or tok.startswith("Ġ") for i, tok in enumerate(self.tok.convert_ids_to_tokens(ids))]

    def decode(self, ids: list[int]) -> str:
        """Text of token ids, whitespace normalised."""
        return " ".join(self.tok.decode(ids, skip_special_tokens=True).split())

    # -- cleanup ------------------------------------------------------------------
    def chunks(self, text: str) -> list[list[int]]:
        """Token ids of ``text`` cut into pieces of at most ``max_tokens``: by sentence, then by word."""
        pieces: list[list[int]] = []
        for sentence in SENTENCE_END.split(text):
            ids = self.encode(sentence)
            if pieces and len(pieces[-1]) + len(ids) <= self.max_tokens:
                pieces[-1] = pieces[-1] + ids
                continue
            while len(ids) > self.max_tokens:
                cut = self.max_tokens
                # cut at a word start (byte-level BPE word starts carry a leading space)
                while cut > self.max_tokens // 2 and not self.tok.convert_ids_to_tokens(ids[cut]).startswith("Ġ"):
                    cut -= 1
                pieces.append(ids[:cut])
                ids = ids[cut:]
            if ids:
                pieces.append(ids)
        return pieces

    def cleanup_batch_drafts(self, texts: Sequence[str], reasoning_effort: str = "low") -> Iterator[list[str]]:
        """Yield drafts of the cleaned form of each text in ``texts`` (one batch, one canvas per chunk).

        Each draft is a list of ``len(texts)`` strings; edit slots still masked are
        shown as the input token kept. The last draft is the model's raw result,
        before the faithfulness check of :meth:`finish_cleanup`.
        """
        settings = sampler_settings(reasoning_effort)
        srcs: list[list[int]] = []
        owner: list[int] = []
        for index, text in enumerate(texts):
            for piece in self.chunks(text):
                srcs.append(piece)
                owner.append(index)
        layouts = [cv.cleanup_layout(s, self.ids) for s in srcs]
        prompt, canvas, kwargs = self._batch(layouts)
        gen_length = canvas.shape[1]
        # constrained decoding: the union of the texts' allowed ids is the candidate vocabulary
        # (only those rows of the output projection are computed), and each chunk may use
        # only its own text's ids among them
        per_text = [torch.tensor(self.allowed_output_ids(text), device=prompt.device) for text in texts]
        vocab_ids = torch.unique(torch.cat(per_text))  # sorted
        allowed = torch.stack([torch.isin(vocab_ids, ids) for ids in per_text])
        banned = ~allowed[torch.tensor(owner, device=prompt.device), None, :]

        def constrain(logits: torch.Tensor) -> None:
            # output slots may only keep, delete, re-case an input word or add punctuation
            logits.masked_fill_(banned, float("-inf"))

        starts = [self.word_starts(src) for src in srcs]

        def render(x: torch.Tensor) -> list[str]:
            out = [[] for _ in texts]
            body = x[:, prompt.shape[1]:].tolist()
            for row, src in enumerate(srcs):
                slots = [self.ids.keep if t == self.ids.mask else t for t in body[row][: 2 * len(src)]]
                slots[1::2] = [self.ids.delete if t == self.ids.keep else t for t in slots[1::2]]
                out[owner[row]].extend(cv.decode_cleanup(src, slots, self.ids, starts[row]))
            return [self.decode(o) for o in out]

        for x, _ in denoising_steps(
            self.loaded.model, prompt, gen_length, self.ids.mask,
            steps=settings.steps, block_length=settings.block_length, threshold=settings.threshold,
            remasking=settings.remasking, model_kwargs=kwargs, suppress_ids=self.cleanup_suppress,
            canvas=canvas, logits_hook=constrain, vocab_ids=vocab_ids,
        ):
            yield render(x)

    def finish_cleanup(self, source: str, output: str, restore: bool = True) -> str:
        """The model's ``output`` made safe to return for ``source`` (``restore=False`` skips
        step 2, for measuring it).

        1. :func:`llm.faithful.drop_hesitations`: ``um``/``uh`` the model kept and stray U+FFFD
           (a lone byte piece of a multi-byte character) are removed.
        2. :func:`llm.faithful.restore_dropped`: words the model dropped outside a disfluency
           are put back (``for uh for six thirty`` keeps ``six``).
        3. :mod:`llm.rules`: runs of end marks made one, exact adjacent repeats collapsed, first
           letter capitalised, end punctuation added.
        4. The fallback: if the result is not :func:`llm.faithful.is_faithful` to ``source``
           (it invents a word or keeps too little content), :func:`llm.rules.rule_cleanup` of
           ``source`` (fillers and exact repeats removed, every other word kept) is returned.

        Measured on Disfl-QA dev (997) at effort low with the shipped checkpoint
        (``bench/cleanup_restore.py``): without step 2, WER 0.157 / BLEU 82.5 with 93.1 % of the
        reference's content words kept; with it, 0.170 / 80.7 and 95.8 % kept (the price of the
        words put back is a few reparanda kept where the model was right to drop them).
        """
        output = drop_hesitations(output)
        if restore:
            output = restore_dropped(source, output)
        output = collapse_repeats(tidy_punctuation(output))
        output = end_punctuation(output[:1].upper() + output[1:])
        if is_faithful(source, output):
            return output
        return rule_cleanup(source) or source

    def cleanup_drafts(self, transcript: str, reasoning_effort: str = "low") -> Iterator[str]:
        """Drafts of the cleaned ``transcript``; the last one passed the faithfulness check."""
        text = check_text(transcript, "transcript")
        last = None
        for draft in self.cleanup_batch_drafts([text], reasoning_effort):
            if last is not None:
                yield last
            last = draft[0]
        yield self.finish_cleanup(text, last)

    def cleanup_batch(self, texts: Sequence[str], reasoning_effort: str = "low") -> list[str]:
        """Cleaned forms of ``texts`` in one batched sampling run (each checked for faithfulness)."""
        texts = [check_text(t, "transcript") for t in texts]
        result = None
        for result in self.cleanup_batch_drafts(texts, reasoning_effort):
            pass
        return [self.finish_cleanup(t, o) for t, o in zip(texts, result)]

    # -- replies ----------------------------------------------------------------
    def reply_drafts(self, history: Sequence[Turn], user_text: str, reasoning_effort: str = "low") -> Iterator[str]:
        """Drafts of a reply to ``user_text``; the model sees the last assistant turn of ``history``.

        Decoded in blocks of :data:`llm.effort.REPLY_BLOCK_LENGTH` at ``medium`` and ``high``.
        """
        settings = sampler_settings(reasoning_effort, REPLY_BLOCK_LENGTH)
        user = check_text(user_text, "user_text")
        previous = next((t.text for t in reversed(history) if t.role == "assistant"), "")
        layout = cv.reply_layout(self.encode(previous), self.encode(user), self.ids)
        prompt, canvas, kwargs = self._batch([layout])
        text = ""
        for x, _ in denoising_steps(
            self.loaded.model, prompt, canvas.shape[1], self.ids.mask,
            steps=settings.steps, block_length=settings.block_length, threshold=settings.threshold,
            remasking=settings.remasking, model_kwargs=kwargs, suppress_ids=self.reply_suppress,
            canvas=canvas, logits_hook=lambda logits: logits[:, 0, self.ids.eos].fill_(float("-inf")),
        ):
            if text:
                yield text
            text = self._reply_text(x[0, prompt.shape[1]:])
        yield text or FALLBACK_REPLY

    def _reply_text(self, body: torch.Tensor) -> str:
        """The reply text of a canvas: up to the first ``[EOS]``, punctuation runs tidied, at most two sentences."""
        text = tidy_punctuation(self.decode(cv.decode_reply(body.tolist(), self.ids)))
        sentences = SENTENCE_END.split(text)
        return " ".join(sentences[:2])

    # -- batching -----------------------------------------------------------------
    def _batch(self, layouts: list[cv.Layout]) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """Left-pad prompts and right-pad canvases so every row's canvas starts at one column."""
        pmax = max(l.prompt_length for l in layouts)
        cmax = max(len(l.input_ids) - l.prompt_length for l in layouts)
        rows, pos, typ, att = [], [], [], []
        pad = self.ids.pad
        for l in layouts:
            p, c = l.prompt_length, len(l.input_ids) - l.prompt_length
            lp, rp = pmax - p, cmax - c
            rows.append([pad] * lp + l.input_ids.tolist() + [pad] * rp)
            pos.append([0] * lp + l.position_ids.tolist() + [0] * rp)
            typ.append([0] * lp + l.token_type_ids.tolist() + [0] * rp)
            att.append([0] * lp + [1] * (p + c) + [0] * rp)
        device = self.loaded.device
        x = torch.tensor(rows, device=device)
        kwargs = {
            "position_ids": torch.tensor(pos, device=device),
            "token_type_ids": torch.tensor(typ, device=device),
            "attention_mask": torch.tensor(att, device=device),
        }
        return x[:, :pmax], x[:, pmax:], kwargs
