"""No output of ``scalerl fit`` / ``compare`` may overwrite an input or another output.

Refused with one sentence and exit code 2 before anything is written: the input stays byte
for byte what it was, and no output file appears.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scalerl.fit.commands.outputs import check_outputs
from scalerl.fit.errors import CurveError

from .._files import synthetic_curve, write_csv
from .test_errors import EXIT_BAD_INPUT, scalerl


def _one_sentence(proc, *expected: str) -> str:
    assert proc.returncode == EXIT_BAD_INPUT, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr and proc.stdout == ""
    err = proc.stderr.strip()
    assert err.count("\n") == 0 and all(e in err for e in expected), err
    return err


def test_json_onto_the_input_is_refused_and_the_input_kept(tmp_path):
    victim = write_csv(tmp_path / "victim.csv", *synthetic_curve(n=21))
    before = victim.read_bytes()
    proc = scalerl("fit", "./victim.csv", "--json", str(victim), "--no-budget", cwd=tmp_path)
    _one_sentence(proc, f"--json {victim} is the input victim.csv", "nothing was written")
    assert victim.read_bytes() == before


def test_an_output_through_a_link_or_a_tensorboard_folder_is_an_input(tmp_path):
    victim = write_csv(tmp_path / "victim.csv", *synthetic_curve(n=21))
    before = victim.read_bytes()
    os.link(victim, tmp_path / "hard.csv")  # the same inode under another name
    os.symlink(victim, tmp_path / "soft.html")
    proc = scalerl("compare", "victim.csv", str(tmp_path / "hard.csv"), "--html", "soft.html",
                   "--no-budget", cwd=tmp_path)
    _one_sentence(proc, "--html soft.html is the input victim.csv")
    assert victim.read_bytes() == before


def test_two_outputs_of_one_name_are_refused_before_either_is_written(tmp_path):
    write_csv(tmp_path / "run.csv", *synthetic_curve(n=21))
    proc = scalerl("fit", "run.csv", "--html", "same.out", "--plot", "sub/../same.out", "--no-budget", cwd=tmp_path)
    _one_sentence(proc, "--html same.out and --plot sub/../same.out are the same file")
    assert not (tmp_path / "same.out").exists()


def test_a_markdown_figure_that_is_the_plot_is_refused(tmp_path):
    write_csv(tmp_path / "a.csv", *synthetic_curve(n=21))
    write_csv(tmp_path / "b.csv", *synthetic_curve(n=21, seed=1))
    proc = scalerl("compare", "a.csv", "b.csv", "--markdown", "r.md", "--plot", "r_compare.png",
                   "--no-budget", cwd=tmp_path)
    _one_sentence(proc, "--markdown's compare figure r_compare.png and --plot r_compare.png are the same file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "b.csv"]


def test_check_outputs_accepts_distinct_new_files_and_refuses_a_folder_input(tmp_path):
    run = write_csv(tmp_path / "run.csv", *synthetic_curve(n=5))
    check_outputs([run], {"--json": tmp_path / "a.json", "--plot": tmp_path / "a.png", "--html": None})
    (tmp_path / "tb").mkdir()
    with pytest.raises(CurveError, match=r"--html .*tb is the input .*tb,"):
        check_outputs([run, tmp_path / "tb"], {"--html": Path(tmp_path / "tb")})
