"""The ``quicksilver`` console command.

Each package contributes its own sub-commands through a ``register(subparsers)``
function in its ``cli`` module, so this file stays a list of command groups:

- ``llm.cli``: ``cleanup``, ``train``, ``eval``
- ``voice.cli``: ``run``, ``mic``
- ``server.cli``: ``serve``
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

COMMAND_MODULES = ("llm.cli", "voice.cli", "server.cli")


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level parser with every available command group registered."""
    parser = argparse.ArgumentParser(
        prog="quicksilver",
        description="Real-time voice assistant: streaming ASR -> masked-diffusion LM -> TTS.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a command group not built yet
            if exc.name and name.startswith(exc.name):
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
