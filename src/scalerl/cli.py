"""``scalerl`` command line: ``fit``, ``compare``, ``train`` and friends.

Each subcommand lives beside the code it drives and registers itself here through a
``register(subparsers)`` function; heavy imports (torch) happen only inside the handler,
so ``scalerl fit`` works on a machine without torch. A bad flag, at any level, is one
sentence on stderr and exit code 2, like every other bad input.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading

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


class Stopped(Exception):
    """SIGTERM (or SIGINT) to a command outside a run's own stop handling: its exit status is 128
    + the signal, and one line says so."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.code = 128 + signum


def _stop(signum: int, frame=None) -> None:
    raise Stopped(signum)


def main(argv: list[str] | None = None) -> int:
    """Run one command. SIGTERM and SIGINT end any command with one line and exit 143 or 130
    (a run and a sweep stop at a step boundary with their checkpoints first: their own
    handlers, ``pipeline.stop`` and ``experiments.signals``, hold while they train)."""
    args = build_parser().parse_args(argv)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGINT)} if main_thread else {}
    try:
        return int(args.func(args) or 0)
    except (Stopped, KeyboardInterrupt) as stop:
        stop = stop if isinstance(stop, Stopped) else Stopped(signal.SIGINT)
        print(f"scalerl {args.command}: stopped by {stop}.", file=sys.stderr)
        return stop.code
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


if __name__ == "__main__":
    sys.exit(main())
