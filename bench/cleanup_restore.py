"""What putting back dropped words (:func:`llm.faithful.restore_dropped`) does to cleanup.

Two sets: Disfl-QA dev (all items) and voice commands -- SGD dev user turns (3-30 words) with
synthetic disfluencies from :func:`llm.data.disfluent_version` (fillers, repetitions, repairs,
restarts; seed 7, half of them ASR-style: lowercase, no punctuation), the clean turn as the
reference. The shipped model drafts each input once at effort ``low``; the draft is finished
with and without the restore step. Reported: WER (jiwer), BLEU (sacrebleu) and content words
kept (:func:`llm.evaluate.content_kept`).

Run: ``python bench/cleanup_restore.py [--sgd-items 600]``; prints a table, writes
``bench/results/cleanup_restore.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jiwer  # noqa: E402
import sacrebleu  # noqa: E402

from llm.data import asr_style, disfluent_version, load_disfl_qa, load_sgd  # noqa: E402
from llm.evaluate import content_kept  # noqa: E402
from llm.local import LocalDiffusionLM  # noqa: E402


def voice_commands(items: int, seed: int = 7) -> list[tuple[str, str]]:
    """``(disfluent, clean)`` pairs from SGD dev user turns."""
    rng = random.Random(seed)
    turns = [u for d in load_sgd("dev") for s, u in d if s == "USER" and 3 <= len(u.split()) <= 30]
    rng.shuffle(turns)
    pool = turns[items:items + 2000]
    pairs = []
    for clean in turns[:items]:
        noisy = disfluent_version(clean, rng, pool)
        pairs.append((asr_style(noisy, rng) if rng.random() < 0.5 else noisy, clean))
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sgd-items", type=int, default=600)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "cleanup_restore.json"))
    args = parser.parse_args(argv)
    tasks = LocalDiffusionLM.from_pretrained().tasks
    sets = {"Disfl-QA dev": [(p.disfluent, p.fluent) for p in load_disfl_qa("dev")],
            "SGD dev voice commands (synthetic disfluencies)": voice_commands(args.sgd_items)}
    results = {}
    print("| set | restore | WER | BLEU | content words kept | outputs changed |\n|---|---|---|---|---|---|")
    for name, pairs in sets.items():
        sources, refs = [s for s, _ in pairs], [r for _, r in pairs]
        drafts = []
        for i in range(0, len(sources), 16):
            last = None
            for last in tasks.cleanup_batch_drafts(sources[i:i + 16], "low"):
                pass
            drafts += last
        finished = {flag: [tasks.finish_cleanup(s, d, restore=flag) for s, d in zip(sources, drafts)]
                    for flag in (False, True)}
        results[name] = {"items": len(pairs)}
        for flag, hyps in finished.items():
            row = {"wer": round(jiwer.wer(refs, hyps), 4), "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 1),
                   "content_kept": round(content_kept(hyps, refs), 4),
                   "changed": sum(a != b for a, b in zip(finished[False], hyps))}
            results[name]["restore" if flag else "no_restore"] = row
            print(f"| {name} | {'yes' if flag else 'no'} | {row['wer']:.3f} | {row['bleu']:.1f} | "
                  f"{row['content_kept']:.3f} | {row['changed']} |")
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
