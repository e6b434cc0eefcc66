"""``scalerl`` command line: ``fit``, ``compare``, ``train`` and friends.

Each subcommand lives beside the code it drives and registers itself here through a
``register(subparsers)`` function; heavy imports (torch) happen only inside the handler,
so ``scalerl fit`` works on a machine without torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# module path of each command group; each exposes ``register(subparsers)``
_COMMAND_MODULES = (
    "scalerl.fit.cli",
    "scalerl.pipeline.cli",
    "scalerl.experiments.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scalerl",
        description="Forecast and train RL for LLMs with the ScaleRL sigmoid law and recipe.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:  # a group whose optional extra is absent
            if err.name and err.name.startswith("scalerl"):
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
