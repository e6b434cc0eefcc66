"""The documentation's examples that say so run as written (``<!-- the tests run this block as
written -->`` before a Python block): a newcomer copies them."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[1] / "docs"
MARK = "<!-- the tests run this block as written"


def _blocks() -> list[tuple[str, str]]:
    out = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(re.escape(MARK) + r".*?-->\s*\n(\s*)```python\n(.*?)\n\s*```", text, re.S):
            out.append((f"{page.relative_to(DOCS)}:{text[:m.start()].count(chr(10)) + 1}", textwrap.dedent(m.group(2))))
    return out


def test_the_marked_examples_are_found():
    assert any("studies.md" in where for where, _ in _blocks())


@pytest.mark.parametrize(("where", "code"), _blocks(), ids=[w for w, _ in _blocks()])
def test_a_marked_example_runs_as_written(tmp_path, where, code):
    pytest.importorskip("trl")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, f"{where}:\n{done.stderr[-3000:]}"
