"""Evaluation of cleanup (Disfl-QA dev) and replies (SGD dev) against baselines.

Metrics come from well-kept libraries: WER from ``jiwer``, BLEU and chrF from
``sacrebleu`` (corpus level, default tokenisation). WER is computed on the raw strings,
so casing and punctuation errors count, as in the Disfl-QA references. Cleanup rows also
give ``content_kept``: the share of the reference's content words (:func:`llm.faithful.content_words`)
found in the output -- the measure of the issue's "keep every content word", which WER
blurs with casing and punctuation.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence

import jiwer
import sacrebleu

from llm.backend import LanguageModel, Turn
from llm.data import load_disfl_qa, load_sgd, reply_pairs
from llm.effort import REASONING_EFFORTS
from llm.faithful import content_words
from llm.retrieval import ReplyRetriever, exchange_key
from llm.rules import rule_cleanup

#: SGD dev has about 16k reply pairs; this many, drawn with seed 0, are scored by default.
REPLY_EVAL_ITEMS = 500


def _timed(fn: Callable[[str], str], inputs: Sequence[str]) -> tuple[list[str], list[float]]:
    outputs, latencies = [], []
    for item in inputs:
        t0 = time.perf_counter()
        outputs.append(fn(item))
        latencies.append(time.perf_counter() - t0)
    return outputs, latencies


def _row(system: str, hyps: list[str], refs: list[str], latencies: list[float] | None, count_tokens) -> dict:
    row = {
        "system": system,
        "exact_match": sum(h == r for h, r in zip(hyps, refs)) / len(refs),
        "bleu": sacrebleu.corpus_bleu(hyps, [refs]).score,
        "wer": jiwer.wer(refs, hyps),
        "content_kept": content_kept(hyps, refs),
    }
    if latencies is not None:
        total = sum(latencies)
        row["mean_latency_ms"] = 1000 * statistics.fmean(latencies)
        row["p50_latency_ms"] = 1000 * statistics.median(latencies)
        row["tokens_per_s"] = sum(count_tokens(h) for h in hyps) / total if total > 0 else 0.0
    return row


def content_kept(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """Share (0..1) of the distinct content words of each reference that occur in its hypothesis,
    pooled over the corpus (words compared lowercased, without punctuation)."""
    kept = total = 0
    for hyp, ref in zip(hyps, refs):
        words = set(content_words(ref))
        kept += len(words & set(content_words(hyp)))
        total += len(words)
    return kept / total if total else 1.0


def token_counter(lm: LanguageModel) -> Callable[[str], int]:
    """Count output tokens with the local model's tokenizer, else whitespace words."""
    tasks = getattr(lm, "tasks", None)
    tok = getattr(tasks, "tok", None)
    if tok is None:
        return lambda text: len(text.split())
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


def evaluate_cleanup_split(lm: LanguageModel, split: str = "dev", limit: int | None = None,
                           efforts: Sequence[str] = REASONING_EFFORTS) -> dict:
    """Exact match, BLEU, WER, latency and tokens/s of cleanup on Disfl-QA ``split``.

    Rows: the copy baseline (input unchanged), the rule baseline
    (:func:`llm.rules.rule_cleanup`) and the model at each effort, one item at a time.
    """
    pairs = load_disfl_qa(split)[:limit]
    inputs = [p.disfluent for p in pairs]
    refs = [p.fluent for p in pairs]
    count = token_counter(lm)
    rows = [_row("copy baseline", inputs, refs, None, count)]
    rule_hyps, rule_lat = _timed(rule_cleanup, inputs)
    rows.append(_row("rule baseline", rule_hyps, refs, rule_lat, count))
    for effort in efforts:
        hyps, lat = _timed(lambda text: lm.cleanup(text, effort), inputs)
        rows.append(_row(f"model effort={effort}", hyps, refs, lat, count))
    return {"task": "cleanup", "dataset": f"Disfl-QA {split}", "items": len(pairs), "rows": rows}


def evaluate_reply_split(lm: LanguageModel, split: str = "dev", limit: int | None = None,
                         efforts: Sequence[str] = REASONING_EFFORTS) -> dict:
    """BLEU and chrF of replies on SGD ``split`` for the model at each effort and the retrieval baseline.

    Scores :data:`REPLY_EVAL_ITEMS` pairs drawn with seed 0 (or ``limit``).
    """
    pairs = reply_pairs(load_sgd(split))
    pairs = random.Random(0).sample(pairs, min(limit or REPLY_EVAL_ITEMS, len(pairs)))
    refs = [p.reply for p in pairs]
    train = reply_pairs(load_sgd("train"))
    retrieval = ReplyRetriever([p.user for p in train], [p.reply for p in train])
    count = token_counter(lm)
    rows = []
    by_exchange = ReplyRetriever([exchange_key(p.system, p.user) for p in train], [p.reply for p in train])
    systems: list[tuple[str, Callable]] = [
        ("retrieval baseline (TF-IDF)", lambda p: retrieval(p.user)),
        ("retrieval, key user x2 + system turn", lambda p: by_exchange(exchange_key(p.system, p.user))),
    ]
    for effort in efforts:
        systems.append((f"model effort={effort}", lambda p, e=effort: lm.respond(
            [Turn("assistant", p.system)] if p.system else [], p.user, e)))
    for name, fn in systems:
        hyps, lat = [], []
        for p in pairs:
            t0 = time.perf_counter()
            hyps.append(fn(p))
            lat.append(time.perf_counter() - t0)
        rows.append({
            "system": name,
            "bleu": sacrebleu.corpus_bleu(hyps, [refs]).score,
            "chrf": sacrebleu.corpus_chrf(hyps, [refs]).score,
            "mean_latency_ms": 1000 * statistics.fmean(lat),
            "tokens_per_s": sum(count(h) for h in hyps) / max(sum(lat), 1e-9),
            "example": hyps[0],
        })
    return {"task": "reply", "dataset": f"SGD {split}", "items": len(pairs), "rows": rows}


def format_table(results: dict) -> str:
    """The rows of a result as a Markdown table."""
    rows = results["rows"]
    columns = [c for c in rows[-1] if c not in ("system", "example")]
    head = f"{results['task']} on {results['dataset']} ({results['items']} items)\n\n"
    lines = ["| system | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for r in rows:
        cells = []
        for c in columns:
            v = r.get(c)
            cells.append("" if v is None else (f"{v:.3f}" if c in ("wer", "exact_match", "content_kept") else f"{v:.1f}"))
        lines.append(f"| {r['system']} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines)
