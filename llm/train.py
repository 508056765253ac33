"""Training of the Quicksilver masked-diffusion checkpoint (``quicksilver train``).

Objective -- MDLM (Sahoo et al. 2024, "Simple and Effective Masked Diffusion Language
Models", Eq. 10 with the linear schedule alpha_t = 1 - t) as used by LLaDA (Nie et al.
2025, Eq. 3 for SFT): per sequence draw t ~ U(eps, 1), mask each output position with
probability t, and minimise

    L = E_t [ 1/t * 1/L_out * sum_{i masked} -log p_theta(x_0^i | x_t) ]

where L_out is the number of output positions of the sequence (the response length,
``[EOS]`` padding included). Prompt tokens are never masked.

One multi-task checkpoint: cleanup (edit canvas) and reply examples are mixed in every
run, each batch drawn from one task. Seeds are fixed; with the same ``--steps`` the
script reproduces the shipped checkpoint (up to floating-point nondeterminism of the
CPU kernels).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import BertForMaskedLM

from llm import canvas as cv
from llm.data import cleanup_training_pairs, load_disfl_qa, load_sgd, reply_pairs
from llm.model import LoadedModel, pick_device, quicksilver_config, save_checkpoint
from llm.tokenizer import train_tokenizer

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    """Hyper-parameters of one training run (defaults: the shipped checkpoint).

    ``steps`` sets the learning-rate schedule; ``stop_at`` (a step) or ``minutes`` end
    the run early, saving the checkpoint there. ``steps=0`` with ``minutes`` makes the
    cosine schedule span wall time instead (for a fixed time budget, e.g. a GPU lease);
    the step count reached is saved in the checkpoint's history, and ``--steps`` with
    that count repeats the run by steps. ``init_from`` continues from a checkpoint
    (its tokenizer is kept); ``disfl_weight`` is the share of cleanup batches drawn from
    Disfl-QA (``None``: uniform over all cleanup pairs).
    """

    out: str = "runs/checkpoint"
    steps: int = 3000
    minutes: float | None = None
    stop_at: int | None = None
    batch_size: int = 32
    lr: float = 4e-4
    warmup_steps: int = 200
    weight_decay: float = 0.01
    eps: float = 1e-3
    reply_fraction: float = 0.3
    vocab_size: int = 4096
    hidden: int = 256
    layers: int = 6
    heads: int = 4
    seed: int = 0
    init_from: str | None = None
    disfl_weight: float | None = None
    eval_every: int = 500
    eval_items: int = 200
    threads: int = 2
    device: str | None = None
    """``cpu`` or ``cuda`` (bfloat16 autocast); ``None`` picks CUDA when available."""


def noise_canvas(batch: dict, t: torch.Tensor, generator: torch.Generator,
                 mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward (noising) process x_0 -> x_t of MDLM on the output positions.

    Every output position (``target != -100``) holds its clean token ``x_0`` and is
    replaced by the mask token independently with probability ``t`` (its row's value);
    prompt tokens are never masked.

    Args:
        batch: as for :func:`mdlm_loss`.
        t: ``(B, 1)`` float masking probabilities in ``(0, 1]``.

    Returns:
        ``(input_ids, masked)``: the ``(B, T)`` long noised sequence and the ``(B, T)``
        bool positions that were masked.
    """
    target = batch["target"]
    output = target != -100
    masked = output & (torch.rand(target.shape, generator=generator) < t)
    clean = torch.where(output, target, batch["input_ids"])
    return torch.where(masked, torch.full_like(target, mask_id), clean), masked


def mdlm_loss(model, batch: dict, eps: float, generator: torch.Generator, mask_id: int) -> torch.Tensor:
    """The MDLM loss of one batch (see module docstring).

    Args:
        batch: ``input_ids``, ``position_ids``, ``token_type_ids``, ``attention_mask``
            and ``target`` (``-100`` on prompt and padding), each ``(B, T)`` long.

    Returns:
        Scalar loss, the batch mean of the per-sequence weighted, length-normalised CE.
    """
    target = batch["target"]
    output = target != -100
    b = target.shape[0]
    t = eps + (1 - eps) * torch.rand(b, 1, generator=generator)
    input_ids, masked = noise_canvas(batch, t, generator, mask_id)  # on the CPU: reproducible per seed
    device = next(model.parameters()).device
    input_ids, masked, target, t = input_ids.to(device), masked.to(device), target.to(device), t.to(device)
    output = output.to(device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        hidden = model.bert(
            input_ids=input_ids, position_ids=batch["position_ids"].to(device),
            token_type_ids=batch["token_type_ids"].to(device), attention_mask=batch["attention_mask"].to(device),
        ).last_hidden_state
    rows, cols = masked.nonzero(as_tuple=True)
    if rows.numel() == 0:
        return hidden.sum() * 0.0
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        logits = model.cls(hidden[rows, cols])  # the MLM head only where it is scored
    ce = torch.nn.functional.cross_entropy(logits.float(), target[rows, cols], reduction="none")
    length = output.sum(dim=1).clamp_min(1).float()
    weight = 1.0 / (t.squeeze(1)[rows] * length[rows])
    return (ce * weight).sum() / b


def collate(layouts: list[cv.Layout], pad_id: int) -> dict:
    """Right-pad layouts into a training batch of ``(B, T)`` long tensors."""
    width = max(len(l.input_ids) for l in layouts)
    def pad(values, fill):
        return torch.stack([torch.nn.functional.pad(v, (0, width - len(v)), value=fill) for v in values])
    return {
        "input_ids": pad([l.input_ids for l in layouts], pad_id),
        "position_ids": pad([l.position_ids for l in layouts], 0),
        "token_type_ids": pad([l.token_type_ids for l in layouts], 0),
        "attention_mask": pad([torch.ones_like(l.input_ids) for l in layouts], 0),
        "target": pad([l.target for l in layouts], -100),
    }


def evaluate_cleanup(model, tokenizer, pairs, batch_size: int = 64) -> dict:
    """WER and BLEU of single-pass (effort ``low``) cleanup on ``pairs``."""
    import jiwer
    import sacrebleu

    from llm.tasks import CanvasTasks

    model.eval()
    device = next(model.parameters()).device
    tasks = CanvasTasks(LoadedModel(model, tokenizer, tokenizer.mask_token_id, "quicksilver",
                                    device, model.config.max_position_embeddings, "training"))
    hyps = []
    for i in range(0, len(pairs), batch_size):
        hyps += tasks.cleanup_batch([p.disfluent for p in pairs[i:i + batch_size]], "low")
    refs = [p.fluent for p in pairs]
    model.train()
    return {"wer": jiwer.wer(refs, hyps), "bleu": sacrebleu.corpus_bleu(hyps, [refs]).score}


def bucket(n: int, size: int, rng: random.Random, window: int = 8) -> list[int]:
    """``size`` random indices from a random window of ``size * window`` neighbours among ``n`` length-sorted examples."""
    span = min(n, size * window)
    start = rng.randrange(n - span + 1)
    return rng.sample(range(start, start + span), size)


class PackedLayouts:
    """Training layouts of one dataset, right-padded once into ``(N, W)`` int32 tensors.

    A batch is then an index and a trim to its widest row (no per-step Python work per
    example), which keeps a GPU fed; the batches equal :func:`collate` of the same layouts.
    """

    def __init__(self, layouts: list[cv.Layout], pad_id: int) -> None:
        self.lengths = torch.tensor([len(l.input_ids) for l in layouts])
        width = int(self.lengths.max())
        fills = {"input_ids": pad_id, "position_ids": 0, "token_type_ids": 0, "attention_mask": 0, "target": -100}
        self.tensors = {k: torch.full((len(layouts), width), v, dtype=torch.int32) for k, v in fills.items()}
        for i, l in enumerate(layouts):
            n = len(l.input_ids)
            self.tensors["input_ids"][i, :n] = l.input_ids
            self.tensors["position_ids"][i, :n] = l.position_ids
            self.tensors["token_type_ids"][i, :n] = l.token_type_ids
            self.tensors["attention_mask"][i, :n] = 1
            self.tensors["target"][i, :n] = l.target

    def __len__(self) -> int:
        return len(self.lengths)

    def take(self, index: list[int]) -> dict:
        """The ``(B, T)`` long batch of rows ``index``, ``T`` the longest of them."""
        rows = torch.tensor(index)
        width = int(self.lengths[rows].max())
        return {k: v[rows, :width].long() for k, v in self.tensors.items()}


def train(cfg: TrainConfig) -> Path:
    """Run training; saves to ``cfg.out`` every ``eval_every`` steps and at the end. Returns the folder."""
    by_time = cfg.steps == 0
    if by_time and not cfg.minutes:
        raise ValueError("steps=0 (a schedule over wall time) needs minutes")
    device = pick_device(cfg.device)  # before the data: a missing GPU fails at once
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    cleanup = cleanup_training_pairs(seed=cfg.seed)
    replies = reply_pairs(load_sgd("train"))
    rng.shuffle(replies)
    texts = [p.disfluent for p in cleanup] + [p.fluent for p in cleanup] + [r.reply for r in replies]
    texts += [r.user for r in replies]
    if cfg.init_from:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(cfg.init_from)
    else:
        tokenizer = train_tokenizer(texts, cfg.vocab_size)
    ids = cv.SpecialIds(tokenizer)

    def encode(batch_texts):
        return tokenizer(batch_texts, add_special_tokens=False)["input_ids"]

    c_src, c_tgt = encode([p.disfluent for p in cleanup]), encode([p.fluent for p in cleanup])
    cleanup_data = [(s, t) for s, t in zip(c_src, c_tgt) if 0 < len(s) <= cv.MAX_CLEANUP_TOKENS]
    disfl_data = [(s, t) for s, t, p in zip(c_src, c_tgt, cleanup)
                  if p.source == "disfl-qa" and 0 < len(s) <= cv.MAX_CLEANUP_TOKENS]
    disfl_data.sort(key=lambda e: len(e[0]))
    r_sys, r_user, r_reply = encode([r.system for r in replies]), encode([r.user for r in replies]), \
        encode([r.reply for r in replies])
    reply_data = [(a, b, c) for a, b, c in zip(r_sys, r_user, r_reply) if 0 < len(c) < cv.REPLY_LENGTH]
    # length buckets: each batch is drawn from a window of similar lengths (less padding)
    cleanup_data.sort(key=lambda e: len(e[0]))
    reply_data.sort(key=lambda e: len(e[0][-cv.MAX_TURN_TOKENS:]) + len(e[1][-cv.MAX_TURN_TOKENS:]))
    packed_cleanup = PackedLayouts([cv.cleanup_layout(a, ids, b) for a, b in cleanup_data], ids.pad)
    packed_disfl = PackedLayouts([cv.cleanup_layout(a, ids, b) for a, b in disfl_data], ids.pad)
    packed_reply = PackedLayouts([cv.reply_layout(a, b, ids, c) for a, b, c in reply_data], ids.pad)
    dev = load_disfl_qa("dev")
    dev = random.Random(1).sample(dev, min(cfg.eval_items, len(dev)))
    log.info("data: %d cleanup, %d reply examples; tokenizer %d; %.0fs",
             len(cleanup_data), len(reply_data), len(tokenizer), time.monotonic() - started)

    if cfg.init_from:
        model = BertForMaskedLM.from_pretrained(cfg.init_from)
    else:
        model = BertForMaskedLM(quicksilver_config(len(tokenizer), cfg.hidden, cfg.layers, cfg.heads))
    model.to(device)
    params = sum(p.numel() for p in model.parameters())
    log.info("model: %.2fM parameters on %s", params / 1e6, device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.98))

    def lr_at(step):
        if step < cfg.warmup_steps:
            return cfg.lr * (step + 1) / cfg.warmup_steps
        if by_time:
            progress = min(1.0, (time.monotonic() - t0) / (cfg.minutes * 60))
        else:
            progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
        return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    generator = torch.Generator().manual_seed(cfg.seed)
    history = []
    model.train()
    t0 = time.monotonic()
    smooth = None
    for step in (itertools.count() if by_time else range(cfg.steps)):
        if rng.random() < cfg.reply_fraction:
            packed = packed_reply
        else:
            packed = packed_cleanup
            if cfg.disfl_weight is not None and rng.random() < cfg.disfl_weight:
                packed = packed_disfl
        batch = packed.take(bucket(len(packed), cfg.batch_size, rng))
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        loss = mdlm_loss(model, batch, cfg.eps, generator, ids.mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 10 == 0:  # .item() waits for the device: read the loss every 10th step
            smooth = loss.item() if smooth is None else 0.8 * smooth + 0.2 * loss.item()
        last = step == cfg.steps - 1
        out_of_time = (cfg.minutes is not None and time.monotonic() - t0 > cfg.minutes * 60) or (
            cfg.stop_at is not None and step + 1 >= cfg.stop_at)
        if (step + 1) % cfg.eval_every == 0 or last or out_of_time:
            metrics = evaluate_cleanup(model, tokenizer, dev)
            row = {"step": step + 1, "loss": round(smooth, 4), "minutes": round((time.monotonic() - t0) / 60, 1),
                   "dev_wer_low": round(metrics["wer"], 4), "dev_bleu_low": round(metrics["bleu"], 2)}
            history.append(row)
            log.warning("%s", json.dumps(row))
            save_checkpoint(model, tokenizer, out, {
                "reply_length": cv.REPLY_LENGTH, "max_cleanup_tokens": cv.MAX_CLEANUP_TOKENS,
                "parameters": params, "train_config": asdict(cfg), "history": history,
            })
        elif step % 50 == 0:
            log.info("step %d loss %.4f lr %.2e", step, smooth, lr_at(step))
        if out_of_time:
            break
    return out
