"""Every file or folder of this repository that the README, the docs or a shipped recipe's
comments point to exists: ``src/scalerl/config.py`` outlived its move to the ``config/``
package in the README, in a recipe and in a results page, sending readers to nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
TEXTS = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "bench").glob("**/*.md"),
         *(ROOT / "src" / "scalerl" / "recipes").glob("*.yaml")]
# a path from the repository's root, or a module of the package (``scalerl/types.py``)
# (a pattern of files: ``demo_seed*.jsonl``, ``demo_seed0..4.jsonl``, ``trl_s{seed}_lr{lr}.jsonl``)
POINTER = re.compile(r"(?<![\w/.-])((?:src|bench|docs|tests)/[\w./*{}-]*[\w/*}]|scalerl/[\w/]+\.py)")
PATTERN = re.compile(r"\{\w*\}|\d+\.\.\d+")


def _pointers(path: Path) -> list[tuple[int, str]]:
    return [(n, hit) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            for hit in POINTER.findall(line)]


def _exists(pointer: str) -> bool:
    glob = PATTERN.sub("*", pointer).rstrip("/")
    return any(True for root in (ROOT, ROOT / "src") for _ in root.glob(glob))


def test_every_path_the_docs_point_to_exists():
    missing = [f"{path.relative_to(ROOT)}:{n}: {hit}" for path in TEXTS if "corpus" not in path.parts
               for n, hit in _pointers(path) if not _exists(hit)]
    assert missing == []


def test_the_pointer_pattern_finds_the_paths_it_must_check():
    line = "defaults in `src/scalerl/config.py`; see scalerl/types.py and bench/README.md."
    assert POINTER.findall(line) == ["src/scalerl/config.py", "scalerl/types.py", "bench/README.md"]
