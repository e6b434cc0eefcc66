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
    (tmp_path / "sub").mkdir()
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


def _not_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Targets that are not regular files (a named pipe, a socket, a device node where this user
    may make one) or lie in a missing folder, each with what the refusal says."""
    import socket
    import stat

    out = {"pipe": (tmp_path / "pipe", "it is a named pipe"), "missing": (tmp_path / "nope" / "x.out", "does not exist"),
           "socket": (tmp_path / "sock", "it is a socket")}
    os.mkfifo(out["pipe"][0])
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(out["socket"][0]))
    sock.close()
    try:  # a device of our own, the /dev/null kind (1, 3), never the machine's
        os.mknod(tmp_path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        out["device"] = (tmp_path / "null", "it is a device")
    except PermissionError:
        pass
    return out


def _commands(tmp_path: Path) -> list[tuple[str, list[str]]]:
    """Every output flag of every command, each with the command that takes it."""
    run = write_csv(tmp_path / "run.csv", *synthetic_curve(n=21))
    other = write_csv(tmp_path / "other.csv", *synthetic_curve(n=21, A=0.5))
    fit, plan = ["fit", str(run), "--no-budget"], ["plan", str(run), "--target", "0.5"]
    compare = ["compare", str(run), str(other), "--no-budget"]
    replay = ["sweep", "--replay", str(run), str(other), "--budget", "1000"]
    return [*[(flag, fit) for flag in ("--json", "--plot", "--html")], *[(flag, plan) for flag in ("--json", "--plot", "--html")],
            *[(flag, compare) for flag in ("--json", "--plot", "--html", "--markdown")], ("--json", replay)]


def test_every_output_flag_refuses_a_pipe_a_socket_a_device_and_a_missing_folder(tmp_path, capsys):
    """Reliability probe OUT-*-dev-full: ``--json /dev/full`` turned /dev/full into a file."""
    from scalerl.cli import main

    targets = _not_files(tmp_path)
    for flag, argv in _commands(tmp_path):
        for kind, (target, says) in targets.items():
            before = target.lstat().st_mode if target.exists() or target.is_symlink() else None
            assert main([*argv, flag, str(target)]) == EXIT_BAD_INPUT, (flag, kind)
            err = capsys.readouterr().err.strip()
            assert err.count("\n") == 0 and f"{flag} {target}: " in err and says in err, err
            assert "nothing was written" in err
            after = target.lstat().st_mode if target.exists() or target.is_symlink() else None
            assert after == before, (flag, kind)  # still the pipe, socket or device it was
    assert not (tmp_path / "nope").exists()
