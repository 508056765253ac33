"""Sub-commands of the LM stage: ``quicksilver cleanup``, ``quicksilver train``, ``quicksilver eval``."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from llm.effort import REASONING_EFFORTS

#: Exit status of a command whose model failed to load (``cleanup``, ``eval``, ``run``, ``mic``, ``serve``).
EXIT_MODEL = 3


def add_llm_options(parser: argparse.ArgumentParser) -> None:
    """The backend flags shared by every command that calls the LM."""
    parser.add_argument("--llm", choices=("local", "openai"), default="local", help="LM backend (default: local)")
    parser.add_argument("--llm-model", default=None, help="local folder or hub id (local), model name (openai)")
    parser.add_argument("--llm-base-url", default=None, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="device of the local LM (default: CUDA if available)")
    parser.add_argument("--llm-quantize", choices=("auto", "none", "int8"), default="auto",
                        help="dynamic int8 quantization of the local LM (default auto: int8 for the "
                             "shipped checkpoint on the CPU)")


def backend_from_args(args):
    """Create the backend the flags of :func:`add_llm_options` chose."""
    from llm.backend import load_backend

    return load_backend(args.llm, model=args.llm_model, base_url=args.llm_base_url, device=args.device,
                        quantize=args.llm_quantize)


def _load_or_report(args, command: str):
    """The backend of the flags, or ``None`` after a one-line message on stderr (no traceback)."""
    try:
        return backend_from_args(args)
    except Exception as exc:  # noqa: BLE001 - any load failure is reported the same way
        print(f"quicksilver {command}: the language model failed to load: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return None


def register(sub) -> None:
    """Add the LM commands to the ``quicksilver`` sub-parsers."""
    p = sub.add_parser("cleanup", help="clean up transcripts (fillers, false starts, punctuation, casing)")
    p.add_argument("text", nargs="*", help="transcript words, or '-' to read one transcript per line from stdin")
    p.add_argument("--reasoning-effort", choices=REASONING_EFFORTS, default="low",
                   help="sampler effort: low = one forward pass, medium = confidence-threshold steps, "
                   "high = one token per step (default: %(default)s)")
    add_llm_options(p)
    p.set_defaults(func=run_cleanup)

    p = sub.add_parser("train", help="train the masked-diffusion checkpoint")
    p.add_argument("--out", default="runs/checkpoint")
    p.add_argument("--steps", type=int, default=3000,
                   help="length of the learning-rate schedule; 0: the schedule spans --minutes of wall time")
    p.add_argument("--minutes", type=float, default=None, help="stop after this many minutes")
    p.add_argument("--stop-at", type=int, default=None, help="stop (and save) at this step of the schedule")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=4e-4, help="peak learning rate")
    p.add_argument("--warmup-steps", type=int, default=200)
    p.add_argument("--reply-fraction", type=float, default=0.3, help="share of batches that are reply examples")
    p.add_argument("--init-from", default=None, help="continue from this checkpoint folder")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: CUDA if available")
    p.add_argument("--disfl-weight", type=float, default=None,
                   help="share of cleanup batches drawn from Disfl-QA (default: uniform over all pairs)")
    p.add_argument("--eval-every", type=int, default=500, help="dev WER and a checkpoint every N steps")
    p.set_defaults(func=run_train)

    p = sub.add_parser("eval", help="evaluate cleanup (Disfl-QA) or replies (SGD) against baselines")
    p.add_argument("task", choices=("cleanup", "reply"))
    p.add_argument("--split", default="dev", choices=("dev",))
    p.add_argument("--limit", type=int, default=None, help="evaluate the first N items only")
    p.add_argument("--efforts", default="low,medium,high", help="comma-separated reasoning efforts to score")
    p.add_argument("--json-out", default=None, help="write the results here as JSON")
    add_llm_options(p)
    p.set_defaults(func=run_eval)


def run_cleanup(args) -> int:
    """``quicksilver cleanup``: one cleaned line per input line, in order."""
    if not args.text:
        print("quicksilver cleanup: give a transcript, or '-' to read lines from stdin", file=sys.stderr)
        return 2
    lm = _load_or_report(args, "cleanup")
    if lm is None:
        return EXIT_MODEL
    if args.text == ["-"]:
        for line in sys.stdin:
            line = line.rstrip("\n")
            if not line.strip():
                print("", flush=True)
                continue
            try:
                print(lm.cleanup(line, args.reasoning_effort), flush=True)
            except ValueError as exc:  # control characters only: nothing to clean, an empty line out
                logging.getLogger(__name__).warning("line %r gives an empty line: %s", line, exc)
                print("", flush=True)
        return 0
    try:
        print(lm.cleanup(" ".join(args.text), args.reasoning_effort))
    except ValueError as exc:
        print(f"quicksilver cleanup: {exc}", file=sys.stderr)
        return 2
    return 0


def run_train(args) -> int:
    """``quicksilver train``."""
    from llm.train import TrainConfig, train

    logging.getLogger().setLevel(logging.INFO)
    try:
        folder = train(TrainConfig(out=args.out, steps=args.steps, minutes=args.minutes, stop_at=args.stop_at,
                                   batch_size=args.batch_size, seed=args.seed, lr=args.lr,
                                   warmup_steps=args.warmup_steps, reply_fraction=args.reply_fraction,
                                   init_from=args.init_from, disfl_weight=args.disfl_weight,
                                   device=args.device, eval_every=args.eval_every))
    except (ValueError, FileNotFoundError) as exc:
        print(f"quicksilver train: {exc}", file=sys.stderr)
        return 2
    print(f"checkpoint saved to {folder}")
    return 0


def run_eval(args) -> int:
    """``quicksilver eval cleanup|reply``: print tables, optionally write JSON."""
    from llm.evaluate import evaluate_cleanup_split, evaluate_reply_split, format_table

    efforts = [e for e in args.efforts.split(",") if e]
    for effort in efforts:
        if effort not in REASONING_EFFORTS:
            print(f"quicksilver eval: unknown effort {effort!r}", file=sys.stderr)
            return 2
    lm = _load_or_report(args, "eval")
    if lm is None:
        return EXIT_MODEL
    if args.task == "cleanup":
        results = evaluate_cleanup_split(lm, args.split, args.limit, efforts)
    else:
        results = evaluate_reply_split(lm, args.split, args.limit, efforts)
    print(format_table(results))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=2)
    return 0
