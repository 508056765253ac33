"""Latency of the diffusion LM per reasoning effort: a 32-token cleanup and a reply.

The shipped checkpoint in float32 and with dynamic int8 quantization (``--llm-quantize``),
measured in the same run, one after the other for each job and effort, so a shared machine
loads both alike. Prints a table (p50/p95 latency in ms, forward passes, tokens/s) and writes
``bench/results/llm_latency.json``. Run: ``python bench/llm_latency.py [--repeats 30]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

import torch

from llm.backend import Turn
from llm.local import LocalDiffusionLM

TRANSCRIPT_32 = "so um I would like to uh book a table I mean two tables for for four people at the " \
                "italian place on main street tomorrow at seven"


def measure(fn, repeats: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(1000 * (time.perf_counter() - t0))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quantize", nargs="+", default=["none", "int8"], choices=("none", "int8"))
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "llm_latency.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    models = {q: LocalDiffusionLM.from_pretrained(device="cpu", quantize=q) for q in args.quantize}
    n_tokens = len(next(iter(models.values())).tasks.encode(TRANSCRIPT_32))
    rows = []
    for job, effort, (quantize, lm) in itertools.product(("cleanup", "reply"), ("low", "medium", "high"), models.items()):
        if job == "cleanup":
            fn = lambda: lm.cleanup(TRANSCRIPT_32, effort)
            drafts = list(lm.cleanup_drafts(TRANSCRIPT_32, effort))
            out_tokens = 2 * n_tokens
        else:
            history = [Turn("assistant", "Which restaurant would you like?")]
            fn = lambda: lm.respond(history, "The Italian place on Main Street, please.", effort)
            drafts = list(lm.reply_drafts(history, "The Italian place on Main Street, please.", effort))
            out_tokens = 32
        ms = measure(fn, args.repeats)
        p50 = statistics.median(ms)
        rows.append({"job": job, "effort": effort, "quantize": quantize, "input_tokens": n_tokens, "output_positions": out_tokens,
                     "denoising_steps": len(drafts), "p50_ms": round(p50, 2),
                     "p95_ms": round(sorted(ms)[int(0.95 * (len(ms) - 1))], 2),
                     "output_tokens_per_s": round(out_tokens / (p50 / 1000), 1)})
    print(f"{'job':8} {'effort':7} {'weights':8} {'steps':>5} {'p50 ms':>8} {'p95 ms':>8} {'tok/s':>9}")
    for r in rows:
        print(f"{r['job']:8} {r['effort']:7} {r['quantize']:8} {r['denoising_steps']:5d} {r['p50_ms']:8.1f} {r['p95_ms']:8.1f} "
              f"{r['output_tokens_per_s']:9.0f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"threads": args.threads, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
