"""``docs/run-folder.md`` read as the tests need it: the metric keys (and key patterns) it names."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

GLOSSARY = Path(__file__).parents[1] / "docs" / "run-folder.md"


def documented() -> list[re.Pattern]:
    """One pattern per key the glossary's tables name in their first column (``<k>`` and the
    like stand for any part: ``val_pass_at_<k>`` names ``val_pass_at_2``)."""
    patterns = []
    for line in GLOSSARY.read_text().splitlines():
        cells = line.split("|")
        if len(cells) != 5:  # | key | unit | meaning |; the renamed keys' table has two columns
            continue
        for key in re.findall(r"`([^`]+)`", cells[1]):
            patterns.append(re.compile(".+".join(map(re.escape, re.split(r"<[^>]+>", key)))))
    return patterns


def undocumented(keys: Iterable[str]) -> list[str]:
    """The keys no line of the glossary names."""
    patterns = documented()
    return sorted(k for k in set(keys) if not any(p.fullmatch(k) for p in patterns))
