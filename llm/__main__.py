"""``python -m llm``: the LM commands alone (``cleanup``, ``train``, ``eval``).

The same sub-commands as ``quicksilver``, without importing the audio, voice and
server packages, so training and evaluation run on a machine that has only torch,
transformers, sacrebleu and jiwer (e.g. a GPU box with no audio stack).
"""

from __future__ import annotations

import argparse
import logging
import sys

from llm import cli


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run one LM command; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m llm", description="Quicksilver's diffusion-LM commands.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    cli.register(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
