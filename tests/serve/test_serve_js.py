"""The page's own functions (``serve/static/app.js``) run by Node.js, where the machine has it:
a run name that a spreadsheet would run as a formula, the crossing's interval as ``plan``
prints it, and its shading never drawn backwards (the newcomer's live run: [0.33, 0.82])."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

APP = Path(__file__).parents[2] / "src" / "scalerl" / "serve" / "static" / "app.js"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="no Node.js on this machine")


def _run(expr: str):
    """``expr`` evaluated after app.js in a fresh context (no page: a stub document)."""
    script = (f"const vm = require('vm'); const ctx = {{document: {{}}, window: {{}}, location: {{pathname: '/'}}}};"
              f"vm.createContext(ctx); vm.runInContext(require('fs').readFileSync({json.dumps(str(APP))}, 'utf8'), ctx);"
              f"console.log(JSON.stringify(vm.runInContext({json.dumps(expr)}, ctx)));")  # fmt: skip
    done = subprocess.run([NODE, "-e", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_run_named_as_a_formula_is_text_in_the_csv():
    cells = _run("['=HYPERLINK(\"http://evil/\",\"x\")', '+1', '-2', '@x', 'plain'].map(csvCell)")
    assert cells[0] == '"\'=HYPERLINK(""http://evil/"",""x"")"' and cells[1:4] == ['"\'+1"', '"\'-2"', '"\'@x"']
    assert cells[4] == '"plain"'


def test_the_crossing_reads_as_plan_prints_it_and_is_never_shaded_backwards():
    assert _run("interval({median: null, lo: 0.8228, hi: null}, 4)") == "never [0.8228, never]"
    assert _run("interval({median: 0.3, lo: 0.2, hi: 0.4}, 1)") == "0.3 [0.2, 0.4]"
    assert _run("crossingSpan({median: null, lo: 0.8228, hi: null}, 0.33)") is None  # starts past the chart
    assert _run("crossingSpan({median: 0.5, lo: 0.2, hi: null}, 0.33)") == [0.2, 0.33]
    assert _run("crossingSpan({median: 0.25, lo: 0.2, hi: 0.3}, 0.33)") == [0.2, 0.3]
