"""``scalerl fit`` / ``compare`` on hostile input.

Every case ends with exit code 2 and one sentence on stderr naming the file, line or flag,
and no traceback; the two inputs that are read (a ``.tsv``, a truncated TensorBoard file)
exit 0, the truncated one with a one-line warning.

The cases run the command's ``main`` in this process (a fresh interpreter per case would
spend seconds importing for milliseconds of work): an exception that escapes ``main`` fails
the test as a traceback would. A few run through the real command in a fresh interpreter:
one refusal per command (here for ``compare``; ``fit``'s is in ``test_cli.py``) and the
truncated-file warning.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .._files import synthetic_curve, write_csv, write_tensorboard

EXIT_BAD_INPUT = 2


def scalerl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``scalerl ARGS`` in a fresh interpreter, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "scalerl.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)  # fmt: skip



def _ok(tmp: Path) -> str:
    return str(write_csv(tmp / "ok.csv", *synthetic_curve(n=21)))


def _case(tmp: Path, name: str) -> tuple[list[str], str]:
    """(arguments, text the one sentence must contain) of one case."""
    if name == "binary file":
        (tmp / "run.csv").write_bytes(bytes(range(256)) * 8)
        return ["fit", str(tmp / "run.csv")], f"{tmp / 'run.csv'} is not a text log: it holds binary data."
    if name == "latin-1 csv":
        (tmp / "run.csv").write_bytes("gpu_hours,reward\n0,0.3\n# café\n".encode("latin-1"))
        return ["fit", str(tmp / "run.csv")], f"{tmp / 'run.csv'} line 3 is not UTF-8 text (byte 0xe9)"
    if name == "latin-1 jsonl":
        (tmp / "run.jsonl").write_bytes('{"compute": 0, "reward": 0.3}\n{"note": "é"}\n'.encode("latin-1"))
        return ["fit", str(tmp / "run.jsonl")], f"{tmp / 'run.jsonl'} line 2 is not UTF-8 text (byte 0xe9)"
    if name == "latin-1 in compare":
        (tmp / "b.csv").write_bytes("gpu_hours,reward\n0,0.3\n# café\n".encode("latin-1"))
        return ["compare", _ok(tmp), str(tmp / "b.csv")], f"{tmp / 'b.csv'} line 3 is not UTF-8 text"
    if name == "deeply nested json":
        (tmp / "run.jsonl").write_text('{"a": ' * 100_000 + "1" + "}" * 100_000 + "\n")
        return ["fit", str(tmp / "run.jsonl")], f"{tmp / 'run.jsonl'} line 1 is JSON nested too deeply"
    if name == "symlink loop":
        os.symlink(tmp / "b.csv", tmp / "a.csv")
        os.symlink(tmp / "a.csv", tmp / "b.csv")
        return ["fit", str(tmp / "a.csv")], f"{tmp / 'a.csv'} is a symbolic link that leads nowhere"
    if name == "symlink loop in compare":
        os.symlink(tmp / "loop.csv", tmp / "loop.csv")
        return ["compare", _ok(tmp), str(tmp / "loop.csv")], f"{tmp / 'loop.csv'} is a symbolic link"
    if name == "csv field over 128 KB":
        (tmp / "run.csv").write_text("gpu_hours,reward,note\n0,0.3," + "x" * 200_000 + "\n")
        return ["fit", str(tmp / "run.csv")], f"{tmp / 'run.csv'} line 2 is not a table row (field larger"
    if name == "--margin nan":
        return ["fit", _ok(tmp), "--margin", "nan"], "--margin must be 0 or more, got nan."
    if name == "--bootstrap 1e20 (no such flag)":
        return ["fit", _ok(tmp), "--bootstrap", "1e20"], "unrecognized arguments: --bootstrap 1e20"
    if name == "--target-compute -100":
        return ["fit", _ok(tmp), "--target-compute", "-100"], "--target-compute must be a positive compute, got -100."
    if name == "--target-reward nan":
        return ["fit", _ok(tmp), "--target-reward", "nan"], "--target-reward must be a pass rate in [0, 1], got nan."
    if name == "--min-compute -5":
        return ["fit", _ok(tmp), "--min-compute", "-5"], "--min-compute must be 0 or more, got -5."
    if name == "--min-compute -5 in compare":
        return ["compare", _ok(tmp), _ok(tmp), "--min-compute", "-5"], "--min-compute must be 0 or more"
    if name == "--r0 nan":
        return ["fit", _ok(tmp), "--r0", "nan"], "--r0 must be a pass rate in [0, 1], 'first' or 'fit', got nan."
    if name == "--r0 1.5 in compare":
        return ["compare", _ok(tmp), _ok(tmp), "--r0", "1.5"], "--r0 must be a pass rate in [0, 1]"
    if name == "--max-compute nan":
        return ["fit", _ok(tmp), "--max-compute", "nan"], "--max-compute must be a positive compute, got nan."
    if name == "--max-compute -5 before the file is read":
        return ["fit", str(tmp / "missing.csv"), "--max-compute", "-5"], "--max-compute must be a positive compute, got -5."
    if name == "mixed delimiters":
        lines = Path(_ok(tmp)).read_text().splitlines()
        lines[3::2] = [row.replace(",", ";") for row in lines[3::2]]  # every other row from line 4
        (tmp / "mixed.csv").write_text("\n".join(lines) + "\n")
        return ["fit", str(tmp / "mixed.csv")], (
            f"{tmp / 'mixed.csv'} line 4 has 1 cell(s), but the header has 3 columns split on ','; "
            "the row seems split on ';'")
    if name == "duplicate header column":
        (tmp / "dup.csv").write_text("step,gpu_hours,gpu_hours,val_pass_rate\n0,0,0,0.3\n1,10,20,0.4\n")
        return ["fit", str(tmp / "dup.csv")], f"{tmp / 'dup.csv'}: the header names the column 'gpu_hours' twice"
    if name == "--level as a word":
        return ["compare", _ok(tmp), "--level", "high"], "argument --level: invalid float value: 'high'"
    raise AssertionError(name)


CASES = ["binary file", "latin-1 csv", "latin-1 jsonl", "latin-1 in compare", "deeply nested json",
         "symlink loop", "symlink loop in compare", "csv field over 128 KB", "--margin nan",
         "--bootstrap 1e20 (no such flag)", "--target-compute -100", "--target-reward nan",
         "--min-compute -5", "--min-compute -5 in compare", "--r0 nan", "--r0 1.5 in compare",
         "--max-compute nan", "--max-compute -5 before the file is read", "--level as a word",
         "mixed delimiters", "duplicate header column"]


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_one_sentence_and_exit_2(tmp_path, name, cli_here):
    args, expected = _case(tmp_path, name)
    proc = cli_here(*args, "--no-budget", cwd=tmp_path)
    assert proc.returncode == EXIT_BAD_INPUT, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr and proc.stdout == ""
    err = proc.stderr.strip()
    assert err.count("\n") == 0 and expected in err, err


def test_a_refusal_of_compare_is_one_sentence_through_the_real_command(tmp_path):
    args, expected = _case(tmp_path, "latin-1 in compare")
    proc = scalerl(*args, "--no-budget", cwd=tmp_path)
    assert proc.returncode == EXIT_BAD_INPUT, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr and proc.stdout == ""
    err = proc.stderr.strip()
    assert err.count("\n") == 0 and expected in err, err


def test_a_tsv_file_is_split_on_tabs(tmp_path, cli_here):
    csv_path = Path(_ok(tmp_path))
    tsv = tmp_path / "run.tsv"
    tsv.write_text(csv_path.read_text().replace(",", "\t"))
    proc = cli_here("fit", str(tsv), "--no-budget", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert f"{tsv}: x = gpu_hours, y = val_pass_rate (21 points)" in proc.stdout


def test_a_truncated_tensorboard_file_is_read_with_a_one_line_warning(tmp_path, cli_here):
    whole = write_tensorboard(tmp_path / "whole", *synthetic_curve(n=21))
    (event,) = whole.iterdir()
    data = event.read_bytes()
    (tmp_path / "cut").mkdir()
    cut = tmp_path / "cut" / event.name
    cut.write_bytes(data[: len(data) - 7])  # the last record loses its tail
    proc = scalerl("fit", str(cut), "--no-budget", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"scalerl fit: warning: {cut}: the last ") and "cut short" in proc.stderr
    # the table may wrap a long path at any width: compare with the whitespace removed
    flat = "".join(proc.stdout.split())
    assert "".join(f"{cut}: x = compute_gpu_hours, y = val/pass_rate (20 points)".split()) in flat
    clean = cli_here("fit", str(event), "--no-budget", cwd=tmp_path)
    assert clean.returncode == 0 and clean.stderr == "", clean.stderr
