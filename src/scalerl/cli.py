"""``scalerl`` command line: ``fit``, ``compare``, ``train`` and friends.

Each subcommand lives beside the code it drives and registers itself here through a
``register(subparsers)`` function; heavy imports (torch) happen only inside the handler,
so ``scalerl fit`` works on a machine without torch. A bad flag, at any level, is one
sentence on stderr and exit code 2, like every other bad input.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from scalerl.fit.errors import EXIT_BAD_INPUT

# module path of each command group; each exposes ``register(subparsers)``
_COMMAND_MODULES = (
    "scalerl.fit.commands.fit",
    "scalerl.fit.commands.plan",
    "scalerl.pipeline.commands.train",
    "scalerl.pipeline.commands.export",
    "scalerl.experiments.cli",
    "scalerl.serve.cli",
)


class OneLineParser(argparse.ArgumentParser):
    """Bad flags end with one sentence and exit code 2 (argparse prints usage lines too). Every
    subcommand's parser is one too: ``add_subparsers`` makes its parsers of the parent's class."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see --help).\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="scalerl",
        description="Forecast and train RL for LLMs with the ScaleRL sigmoid law and recipe.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES:  # each imports its heavy dependencies inside its handlers
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
