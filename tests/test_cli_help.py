"""Every ``--help`` says what a user needs, never how the code is built."""

from __future__ import annotations

import argparse
import re

import pytest

from scalerl.cli import build_parser

# developer notes: imports, handlers, module paths, reST markup
DEVELOPER = re.compile(r"\bimport|handler|torch is|``|\bscalerl\.[a-z_]+\.[a-z_]", re.IGNORECASE)


def _parsers() -> dict[str, argparse.ArgumentParser]:
    root = build_parser()
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    return {"scalerl": root, **{f"scalerl {name}": p for name, p in sub.choices.items()}}


def test_every_command_has_its_help():
    assert {"scalerl train", "scalerl fit", "scalerl compare", "scalerl export", "scalerl sweep",
            "scalerl report"} <= set(_parsers())


@pytest.mark.parametrize("command", sorted(_parsers()))
def test_no_help_carries_developer_notes(command):
    text = _parsers()[command].format_help()
    assert DEVELOPER.search(text) is None, f"{command} --help: {DEVELOPER.search(text)!r}"


def test_the_pattern_catches_the_notes_help_once_carried():
    for note in ("Torch is imported inside the handler only", "(scalerl.fit.prior)", "``config.yaml``"):
        assert DEVELOPER.search(note), note
