"""Masked-diffusion sampling: fill the masked positions after a prompt in a few denoising steps.

Follows the reverse process of LLaDA (Nie et al. 2025, "Large Language Diffusion
Models", Algorithm 4 "low-confidence remasking" and semi-autoregressive blocks) with
the confidence-threshold parallel decoding of Fast-dLLM (Wu et al. 2025): at each
denoising step the model predicts every masked position at once; a subset of those
predictions is committed and the rest are re-masked for the next step.

The sampler is generic: it needs only ``model(input_ids=..., **model_kwargs).logits``
and the mask token id, so it serves the Quicksilver checkpoint and public dLLMs
(LLaDA, Dream, ModernBERT-based chat models) alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from transformers import BertForMaskedLM

#: Signature of the per-step callback: ``(step, x)`` with ``x`` the whole
#: ``(batch, prompt + gen_length)`` canvas after that step. Returning ``False`` stops sampling early.
StepCallback = Callable[[int, torch.Tensor], "bool | None"]


def num_transfer_tokens(masked: torch.Tensor, steps: int) -> torch.Tensor:
    """How many positions to commit at each of ``steps`` steps (LLaDA's linear schedule).

    Args:
        masked: ``(batch, length)`` bool, the masked positions of one block.
        steps: denoising steps for the block, ``>= 1``.

    Returns:
        ``(batch, steps)`` long tensor summing, per row, to that row's mask count.
    """
    count = masked.sum(dim=1, keepdim=True)
    base = count // steps
    remainder = count % steps
    plan = base.expand(-1, steps).clone()
    plan += (torch.arange(steps, device=masked.device)[None, :] < remainder).long()
    return plan


def generate(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    gen_length: int,
    mask_id: int,
    callback: StepCallback | None = None,
    **sampling,
) -> tuple[torch.Tensor, int]:
    """Fill ``gen_length`` masked positions after ``prompt_ids``; see :func:`denoising_steps`.

    Args:
        model, prompt_ids, gen_length, mask_id, **sampling: as for :func:`denoising_steps`
            (``steps``, ``block_length``, ``remasking``, ``threshold``, ``temperature``,
            ``model_kwargs``, ``suppress_ids``, ``canvas``, ``generator``, ``logits_hook``).
        callback: called after every denoising step with ``(step, x)``; returning
            ``False`` stops early (one more pass fills what is still masked).

    Returns:
        ``(x, forward_passes)``: ``x`` of shape ``(batch, prompt_length + gen_length)``
        with no mask token left in the output positions, and the number of model calls.

    Raises:
        ValueError: bad ``remasking``, ``gen_length``, ``steps``, ``block_length`` or ``threshold``.
    """
    steps_iter = denoising_steps(model, prompt_ids, gen_length, mask_id, **sampling)
    x, passes = prompt_ids, 0
    for step, (x, passes) in enumerate(steps_iter, start=1):
        if callback is not None and callback(step, x) is False:
            steps_iter.close()
            return _fill_remaining(model, x, mask_id, dict(sampling.get("model_kwargs") or {}),
                                   _banned(mask_id, sampling.get("suppress_ids", ()), x.device),
                                   prompt_ids.shape[1], passes, sampling.get("logits_hook"),
                                   sampling.get("vocab_ids"))
    return x, passes


def _banned(mask_id: int, suppress_ids: Sequence[int], device) -> torch.Tensor:
    return torch.tensor(sorted({mask_id, *suppress_ids}), dtype=torch.long, device=device)


@torch.no_grad()
def denoising_steps(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    gen_length: int,
    mask_id: int,
    steps: int | None = None,
    block_length: int | None = None,
    remasking: str = "low_confidence",
    threshold: float | None = None,
    temperature: float = 0.0,
    model_kwargs: dict | None = None,
    suppress_ids: Sequence[int] = (),
    canvas: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    logits_hook: Callable[[torch.Tensor], None] | None = None,
    vocab_ids: torch.Tensor | None = None,
) -> Iterator[tuple[torch.Tensor, int]]:
    """The reverse process as a generator: yields ``(x, forward_passes)`` after every step.

    Args:
        model: returns an object with ``.logits`` of shape ``(batch, length, vocab)``.
        prompt_ids: ``(batch, prompt_length)`` long; never changed.
        gen_length: number of output positions.
        mask_id: the mask token id (e.g. 126336 for LLaDA).
        steps: total denoising steps, shared out over the blocks in proportion to their
            length (at least one each); ``None`` means ``gen_length`` (one token per step).
            With ``threshold`` set, the confidences decide (at most ``gen_length``).
        block_length: positions decoded per block, left to right (semi-autoregressive);
            ``None`` means one block of ``gen_length``; the last block may be shorter.
        remasking: ``"low_confidence"`` commits the most confident predictions and
            re-masks the rest; ``"random"`` commits a random subset.
        threshold: Fast-dLLM parallel decoding: commit every masked position of the block
            whose confidence exceeds ``threshold`` (at least one per step).
        temperature: 0 is greedy; otherwise Gumbel-max sampling at that temperature.
        model_kwargs: extra model inputs of shape ``(batch, length)`` (``position_ids``,
            ``token_type_ids``, ``attention_mask``) covering prompt and canvas.
        suppress_ids: token ids never predicted (the mask token is always suppressed).
        canvas: ``(batch, gen_length)`` initial output positions (default: all masks).
            Only masked positions are filled; the others are kept.
        generator: random source for ``random`` remasking and temperature sampling.
        logits_hook: edits the ``(batch, gen_length, vocab)`` float logits of the output
            positions in place before each prediction (e.g. a minimum length: no end-of-sequence at the first slot).
            With ``vocab_ids`` its last dimension is ``len(vocab_ids)``.
        vocab_ids: candidate token ids, a sorted 1-D ``torch.long`` tensor: predictions are
            restricted to them and only their logits are computed (the Quicksilver
            checkpoint projects onto those rows of its output embedding; another model's
            logits are sliced). Equal to banning every other id, at a fraction of the cost of
            the vocabulary projection when the candidates are few (constrained cleanup).

    The last item has no mask left in the output positions. Closing the generator stops
    sampling (no further forward pass).

    Raises:
        ValueError: bad ``remasking``, ``gen_length``, ``steps``, ``block_length`` or ``threshold``.
    """
    if remasking not in ("low_confidence", "random"):
        raise ValueError(f"remasking must be 'low_confidence' or 'random', not {remasking!r}")
    if gen_length < 1:
        raise ValueError("gen_length must be >= 1")
    if threshold is not None and not 0.0 < threshold <= 1.0:
        raise ValueError("threshold must be in (0, 1]")
    block_length = gen_length if block_length is None else min(block_length, gen_length)
    if block_length < 1:
        raise ValueError("block_length must be >= 1")
    num_blocks = -(-gen_length // block_length)
    steps = gen_length if steps is None else steps
    if steps < 1:
        raise ValueError("steps must be >= 1")

    batch, prompt_length = prompt_ids.shape
    device = prompt_ids.device
    if canvas is None:
        canvas = torch.full((batch, gen_length), mask_id, dtype=torch.long, device=device)
    y = canvas.to(device).clone()  # the output positions; the prompt is never changed
    kwargs = dict(model_kwargs or {})
    banned = _banned(mask_id, suppress_ids, device)
    if vocab_ids is not None:
        vocab_ids, banned = _restrict(vocab_ids, banned)
    rows = torch.arange(batch, device=device)

    passes = 0
    for block in range(num_blocks):
        start, end = block * block_length, min(gen_length, (block + 1) * block_length)
        in_block = torch.zeros_like(y, dtype=torch.bool)
        in_block[:, start:end] = True
        # steps shared out in proportion to block size (the last block may be shorter)
        steps_per_block = max(1, round(steps * (end - start) / gen_length))
        plan = num_transfer_tokens((y == mask_id) & in_block, steps_per_block)
        for i in range(steps_per_block if threshold is None else end - start):
            masked = (y == mask_id) & in_block
            if not masked.any():
                break
            logits = _predict(model, torch.cat([prompt_ids, y], dim=1), kwargs, prompt_length, banned, logits_hook,
                              vocab_ids)
            passes += 1
            if temperature > 0:
                uniform = torch.rand(logits.shape, generator=generator, device=device).clamp_min(1e-20)
                choice = (logits / temperature - torch.log(-torch.log(uniform))).argmax(dim=-1)
            else:
                choice = logits.argmax(dim=-1)  # an index into the logits' last dimension
            prediction = choice if vocab_ids is None else vocab_ids[choice]
            if threshold is None and i == steps_per_block - 1:
                # the block's last step commits every masked position: no confidence needed
                # (for effort low, the one step, this skips a softmax over the vocabulary)
                y = torch.where(masked, prediction, y)
                yield torch.cat([prompt_ids, y], dim=1), passes
                continue
            if remasking == "low_confidence":
                confidence = torch.softmax(logits, dim=-1).gather(-1, choice[..., None]).squeeze(-1)
            else:
                confidence = torch.rand(y.shape, generator=generator, device=device)
            confidence = torch.where(masked, confidence, torch.full_like(confidence, -1.0))

            if threshold is not None:
                commit = masked & (confidence > threshold)
                has_mask = masked.any(dim=1)
                commit[rows[has_mask], confidence.argmax(dim=1)[has_mask]] = True
            else:
                commit = torch.zeros_like(masked)
                for row in range(batch):
                    k = int(plan[row, i])
                    if k > 0:
                        commit[row, torch.topk(confidence[row], k).indices] = True
            y = torch.where(commit, prediction, y)
            yield torch.cat([prompt_ids, y], dim=1), passes


def canvas_logits(model: torch.nn.Module, x: torch.Tensor, model_kwargs: dict, prompt_length: int,
                  vocab_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Float logits of the output positions: ``(batch, length - prompt_length, vocab)``, or
    ``(..., len(vocab_ids))`` for the candidate ids ``vocab_ids`` only.

    A ``BertForMaskedLM`` (the Quicksilver checkpoint) runs its MLM head on the output
    positions only, which saves the vocabulary projection of the prompt, and with
    ``vocab_ids`` projects onto those rows of the decoder only; any other model is called
    as ``model(input_ids=x, **model_kwargs).logits`` and sliced.
    """
    if isinstance(model, BertForMaskedLM):
        hidden = model.bert(input_ids=x, **model_kwargs).last_hidden_state[:, prompt_length:]
        if vocab_ids is None:
            return model.cls(hidden).float()
        weight, bias = _decoder_weights(model)
        hidden = model.cls.predictions.transform(hidden).float()
        return torch.nn.functional.linear(hidden, weight[vocab_ids], bias[vocab_ids])
    logits = model(input_ids=x, **model_kwargs).logits[:, prompt_length:].float()
    return logits if vocab_ids is None else logits[..., vocab_ids]


def _restrict(vocab_ids: torch.Tensor, banned: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``vocab_ids`` on ``banned``'s device, and the banned ids as positions in ``vocab_ids``."""
    vocab_ids = vocab_ids.to(banned.device)
    return vocab_ids, torch.nonzero(torch.isin(vocab_ids, banned)).flatten()


def _decoder_weights(model: BertForMaskedLM) -> tuple[torch.Tensor, torch.Tensor]:
    """Float weight ``(vocab, hidden)`` and bias ``(vocab,)`` of the MLM decoder (dequantized
    once when the model is dynamic-int8; cached on the model)."""
    cached = getattr(model, "_quicksilver_decoder", None)
    if cached is None:
        decoder = model.cls.predictions.decoder
        weight = decoder.weight() if callable(decoder.weight) else decoder.weight
        weight = weight.dequantize() if weight.is_quantized else weight
        bias = decoder.bias() if callable(decoder.bias) else decoder.bias
        if bias is None:
            bias = torch.zeros(weight.shape[0], device=weight.device)
        cached = (weight.detach().float(), bias.detach().float())
        model._quicksilver_decoder = cached
    return cached


def _predict(model, x, kwargs, prompt_length, banned, logits_hook, vocab_ids=None):
    logits = canvas_logits(model, x, kwargs, prompt_length, vocab_ids)
    logits[..., banned] = float("-inf")
    if logits_hook is not None:
        logits_hook(logits)
    return logits


def _fill_remaining(model, x, mask_id, kwargs, banned, prompt_length, passes, logits_hook=None, vocab_ids=None):
    """Early stop: one last forward pass fills every position still masked."""
    masked = x[:, prompt_length:] == mask_id
    if not masked.any():
        return x, passes
    if vocab_ids is not None:
        vocab_ids, banned = _restrict(vocab_ids, banned)
    with torch.no_grad():
        prediction = _predict(model, x, kwargs, prompt_length, banned, logits_hook, vocab_ids).argmax(dim=-1)
    if vocab_ids is not None:
        prediction = vocab_ids[prediction]
    canvas = torch.where(masked, prediction, x[:, prompt_length:])
    return torch.cat([x[:, :prompt_length], canvas], dim=1), passes + 1
